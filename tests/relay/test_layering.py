"""Imports run one way (skillfleet > api | workers > broker > relay > store) and no package's
modules import each other in a cycle: pyproject.toml's import-linter contracts hold for the
tree, and break on a copy of it given one import against them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("skillfleet", "api", "workers", "broker", "relay", "store")
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` on the tree at `root`, with the contracts of its pyproject.toml."""
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_tree_keeps_every_import_contract():
    linted = lint_imports(ROOT)

    assert linted.returncode == 0, linted.stdout + linted.stderr


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the packages and pyproject.toml, to add an import to."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    return tmp_path


def add_line(module: Path, line: str) -> None:
    with module.open("a", encoding="utf-8") as source:
        source.write(f"\n\n{line}\n")


def test_a_store_module_importing_the_broker_breaks_the_layers(tree: Path):
    add_line(tree / "store" / "hashing.py", "from broker import broker  # noqa: E402")

    linted = lint_imports(tree)

    assert linted.returncode == 1
    assert "store is not allowed to import broker" in linted.stdout
    assert "store.hashing -> broker.broker" in linted.stdout


def test_an_import_inside_a_function_counts_as_much_as_one_at_the_top(tree: Path):
    add_line(
        tree / "relay" / "naming.py",
        "def later() -> None:\n    from skillfleet import cli  # noqa: F401",
    )

    linted = lint_imports(tree)

    assert linted.returncode == 1
    assert "relay.naming -> skillfleet.cli" in linted.stdout


def test_the_api_importing_worker_code_breaks_their_independence(tree: Path):
    add_line(tree / "api" / "tools.py", "import workers.tasks  # noqa: E402")

    linted = lint_imports(tree)

    assert linted.returncode == 1
    assert "api.tools -> workers.tasks" in linted.stdout


def test_two_modules_of_a_package_importing_each_other_break_the_acyclic_contract(tree: Path):
    add_line(tree / "store" / "limits.py", "from store import names  # noqa: E402")

    linted = lint_imports(tree)

    assert linted.returncode == 1
    assert "No cycles are allowed in store" in linted.stdout

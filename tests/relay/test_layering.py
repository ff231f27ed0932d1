"""The API and the layers under it never import the worker package; only the CLI starts workers."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Packages that run in the API process (or under it) and must work without `workers`.
LAYERS = ("api", "broker", "store", "relay")
FORBIDDEN = "workers"


def imported_modules(source: str) -> list[tuple[int, str]]:
    """Every module an `import` or `from … import` names, at any depth (functions included)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def forbidden_imports(package: Path) -> list[str]:
    """`<file>:<line> imports <module>` for every import of the worker package under `package`."""
    found = []
    for path in sorted(package.rglob("*.py")):
        for line, module in imported_modules(path.read_text(encoding="utf-8")):
            if module == FORBIDDEN or module.startswith(FORBIDDEN + "."):
                found.append(f"{path.relative_to(package)}:{line} imports {module}")
    return found


@pytest.mark.parametrize("package", LAYERS)
def test_the_package_never_imports_the_worker_package(package: str):
    assert forbidden_imports(ROOT / package) == []


def test_the_scan_sees_imports_in_every_form(tmp_path: Path):
    module = tmp_path / "sample.py"
    module.write_text(
        "import workers\n"
        "import workers.tasks as tasks\n"
        "from workers import notify\n"
        "from workers.runners.node import NodeRunner\n"
        "def later():\n"
        "    from workers.context import worker_context\n"
        "from relay import naming\n"
        "import workersmith\n"
        "from . import workers\n",
        encoding="utf-8",
    )
    assert sorted(forbidden_imports(tmp_path)) == [
        "sample.py:1 imports workers",
        "sample.py:2 imports workers.tasks",
        "sample.py:3 imports workers",
        "sample.py:4 imports workers.runners.node",
        "sample.py:6 imports workers.context",
    ]

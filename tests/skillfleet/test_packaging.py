"""How `make up` installs the project (`pip install -e .`): quietly, as a plain path entry."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("skillfleet", "api", "broker", "relay", "store", "workers", "migrations")


def test_an_editable_install_puts_the_project_on_the_path_without_a_warning(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, project / name)
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package, project / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    out = tmp_path / "out"
    out.mkdir()

    # What pip runs in its build environment, with this environment's setuptools.
    build = subprocess.run(
        [sys.executable, "-c",
         f"from setuptools import build_meta; print(build_meta.build_editable({str(out)!r}))"],
        cwd=project, capture_output=True, text=True, timeout=120,
    )  # fmt: skip

    assert build.returncode == 0, build.stderr
    assert "may take precedence during imports" not in build.stdout + build.stderr
    wheel = out / build.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(wheel) as archive:
        [pth] = [name for name in archive.namelist() if name.endswith(".pth")]
        assert archive.read(pth).decode().strip() == str(project)


SERVER_SIDE = ("sqlalchemy", "jsonschema", "celery", "broker.policy", "store.models")


def test_a_command_that_talks_to_the_api_loads_nothing_of_the_server_side() -> None:
    # Each `skillfleet …` starts a Python process; a client command that imported the store and
    # the broker paid about a second and a half of CPU before it said anything.
    probe = (
        "import sys\n"
        "from skillfleet.cli import cli\n"
        "for name in ('skills', 'runs', 'run', 'nodes', 'approvals', 'jobs', 'secrets'):\n"
        "    cli.get_command(None, name)\n"
        f"print([m for m in {SERVER_SIDE!r} if m in sys.modules])\n"
    )
    shown = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert shown.stdout.strip() == "[]"


def test_every_command_group_is_listed_and_loads() -> None:
    from skillfleet.cli import LAZY_COMMANDS, cli

    listed = cli.list_commands(None)  # type: ignore[arg-type]

    assert {"up", "api", "db", "tokens", *LAZY_COMMANDS} <= set(listed)
    assert all(cli.get_command(None, name) is not None for name in LAZY_COMMANDS)  # type: ignore[arg-type]

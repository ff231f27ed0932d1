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

"""uv, the one tool that resolves and installs Python packages: the standard environment on
nodes, and skills' declared dependencies wherever they run.

Every call installs wheels only (`--no-build`): no package's own code runs on the host that
installs it. Packages come from the operator's package index (SKILLFLEET_PACKAGE_INDEX, else
uv's default, PyPI); uv's own configuration files are not read.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from store.errors import StoreError
from store.limits import DEPENDENCY_BUILD_SECONDS, DEPENDENCY_RESOLVE_SECONDS

# The end of uv's explanation that a failure shows (its first lines name the cause).
MESSAGE_CHARS = 800
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class ResolutionFailed(StoreError):
    """Raised when uv can't resolve or install requirements; `definite` when no index would
    change that (no solution), not when the index could not be reached."""

    code = "dependencies_unavailable"
    status = 422

    def __init__(self, message: str, definite: bool = False) -> None:
        super().__init__(message)
        self.definite = definite


@dataclass(frozen=True)
class Target:
    """The Python that packages are for: an interpreter here, or a version and platform (the
    runner image's, which this host can't run)."""

    python: str | None = None
    python_version: str | None = None
    platform: str | None = None

    def flags(self) -> list[str]:
        if self.python is not None:
            return ["--python", self.python]
        flags = ["--python-version", self.python_version or ""]
        return [*flags, "--python-platform", self.platform] if self.platform else flags

    @property
    def key(self) -> str:
        return f"{self.python or ''}|{self.python_version or ''}|{self.platform or ''}"


def uv_binary() -> str:
    """The uv executable that the `uv` distribution installed beside this Python."""
    from uv import find_uv_bin

    return str(find_uv_bin())


def resolve(
    requirements: Sequence[str],
    target: Target,
    index: str | None = None,
    timeout: float = DEPENDENCY_RESOLVE_SECONDS,
) -> list[str]:
    """The exact pins (`name==version`) `requirements` resolve to for `target`, sorted.

    Raises ResolutionFailed with uv's explanation.
    """
    command = [uv_binary(), "pip", "compile", "-", *_common(index), *target.flags(),
               "--no-header", "--no-annotate", "--quiet"]  # fmt: skip
    output = _run(command, "\n".join(requirements) + "\n", timeout, "resolved")
    return sorted(line.strip() for line in output.splitlines() if line.strip())


def install(
    pins: Sequence[str],
    target_folder: Path,
    target: Target,
    index: str | None = None,
    timeout: float = DEPENDENCY_BUILD_SECONDS,
    compile_bytecode: bool = True,
) -> None:
    """Install exactly `pins` (no other dependencies) into `target_folder`, a plain folder
    that goes on PYTHONPATH. Raises ResolutionFailed."""
    command = [uv_binary(), "pip", "install", *_common(index), *target.flags(), "--no-deps",
               "--target", str(target_folder), "-r", "-", "--quiet"]  # fmt: skip
    if compile_bytecode:
        command.append("--compile-bytecode")
    _run(command, "\n".join(pins) + "\n", timeout, "installed")


def create_environment(
    folder: Path, python: str, lock: Path, index: str | None = None,
    timeout: float = DEPENDENCY_BUILD_SECONDS,
) -> None:  # fmt: skip
    """A virtual environment of `python` at `folder` (seeing its system's packages too) with
    every package of `lock`, each file's hash checked. Raises ResolutionFailed."""
    made = [uv_binary(), "venv", "--no-config", "--color", "never", "--quiet",
            "--system-site-packages", "--python", python, str(folder)]  # fmt: skip
    _run(made, "", timeout, "made")
    interpreter = str(folder / "bin" / "python")
    filled = [uv_binary(), "pip", "install", *_common(index), "--python", interpreter,
              "--require-hashes", "--compile-bytecode", "-r", str(lock), "--quiet"]  # fmt: skip
    _run(filled, "", timeout, "installed")


def pins_key(pins: Sequence[str], target: Target) -> str:
    """A short hash naming an environment of exactly these pins for that target."""
    text = target.key + "\n" + "\n".join(sorted(pins))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _common(index: str | None) -> list[str]:
    flags = ["--no-config", "--no-build", "--color", "never", "--no-progress"]
    return [*flags, "--default-index", index] if index else flags


def _run(command: list[str], stdin: str, timeout: float, done: str) -> str:
    try:
        result = subprocess.run(
            command,
            input=stdin,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ResolutionFailed(
            f"The packages could not be {done} within {timeout:g} s; the package index may be "
            "slow or out of reach."
        ) from None
    except OSError as e:
        raise ResolutionFailed(f"uv could not start: {e}.") from e
    if result.returncode != 0:
        # One line: uv wraps its explanation to a terminal's width.
        explanation = " ".join(_ANSI.sub("", result.stderr).split()).removeprefix("error: ")
        if len(explanation) > MESSAGE_CHARS:
            explanation = explanation[:MESSAGE_CHARS] + "…"
        definite = "No solution found" in explanation or "not found in the package" in explanation
        raise ResolutionFailed(f"uv: {explanation}", definite=definite)
    return result.stdout

"""How every tier starts a skill's script: the interpreter its extension names in the standard
environment (workers/runners/base.py's INTERPRETERS), and for Python the skill's root on the
import path, as `python -m scripts.x` run from the skill's folder would have it.

A Python script gets PYTHONPATH holding its own folder, then the skill's root, then its
declared dependencies. So each of these works as it does where the skill was written: `import
helpers` beside the script, `from scripts.helpers import x`, `from .helpers import x`, and
packages the skill declares. `-P` keeps the working directory (the run's input files) and the
script's folder from being put first on the import path.

A script that needs its package (`needs_package`: it imports relatively, reads `__package__`
or `__spec__`, or a folder on its way has an `__init__.py`) and whose path names a module
(`scripts/x.py`, `tools/sub/y.py`: every part an identifier) runs as that module, `python3 -P
-m scripts.x`. Any other runs by its path, `python3 -P <root>/scripts/x.py`: the same import
path, `sys.argv`, `__file__` and `__name__`, without runpy and what it imports (about 5 ms of
CPU a start).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from workers.runners.base import INTERPRETERS, command_for

PYTHON = ".py"
# -P (Python 3.11+): no unsafe path (the working directory) first on sys.path.
SAFE_PATH_SINCE = (3, 11)
# What only a module run gives a script: a relative import (`from .x import y`, or `from` and
# the dot across a line continuation) and the names runpy sets. A mention in a string or a
# comment counts too: a needless module run costs a few milliseconds, a missing one the run.
PACKAGE_CONTEXT = re.compile(rb"\bfrom[\s\\]+\.|__package__|__spec__")
PACKAGE_INIT = "__init__.py"


def module_of(script: str) -> str | None:
    """The module name a skill-relative path runs as, or None when a part is no identifier."""
    pure = PurePosixPath(script)
    if pure.suffix != PYTHON:
        return None
    parts = [*pure.parts[:-1], pure.stem]
    if not all(part.isidentifier() for part in parts):
        return None
    return ".".join(parts)


def needs_package(folder: Path, skill_hash: str, script: str) -> bool:
    """Whether the Python `script` of the skill whose verified files are in `folder` must run
    as its module (the module's text above); read once per hash and script."""
    return _needs_package(str(folder), skill_hash, script)


@functools.lru_cache(maxsize=512)
def _needs_package(folder: str, skill_hash: str, script: str) -> bool:
    pure = PurePosixPath(script)
    if pure.suffix != PYTHON:
        return False
    parents = pure.parts[:-1]
    for depth in range(1, len(parents) + 1):
        if Path(folder, *parents[:depth], PACKAGE_INIT).exists():
            return True  # `-m` runs the package's __init__.py first
    try:
        source = Path(folder, script).read_bytes()
    except OSError:
        return True  # as before: the run reports what is wrong with the script
    return PACKAGE_CONTEXT.search(source) is not None


def script_command(
    root: str,
    script: str,
    argv: Sequence[str] = (),
    python_version: tuple[int, int] | None = SAFE_PATH_SINCE,
    as_module: bool = True,
) -> list[str]:
    """The command line of `script` (a POSIX path inside the skill, whose root this tier sees
    at `root`), then its `argv`; -P needs a Python new enough. `as_module`: a script that
    needs its package (`needs_package`) runs as its module where its path names one."""
    path = f"{root}/{script}"
    if python_version is None or python_version < SAFE_PATH_SINCE:
        return command_for(path, argv)
    module = module_of(script)
    if module is not None and as_module:
        return ["python3", "-P", "-m", module, *argv]
    if PurePosixPath(script).suffix == PYTHON:
        return [*INTERPRETERS[PYTHON], "-P", path, *argv]
    return command_for(path, argv)


def python_path(root: str, script: str, dependencies: str | None = None) -> str:
    """PYTHONPATH of a Python script: its folder, the skill's root, its declared dependencies."""
    folder = str(PurePosixPath(root, script).parent)
    entries = [folder, root] if folder != root else [root]
    if dependencies is not None:
        entries.append(dependencies)
    return ":".join(entries)

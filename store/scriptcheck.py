"""Syntax checks of a skill's scripts before the skill is saved.

`.py` files are compiled in-process (nothing is run and no bytecode is written); `.sh` files
are read by `bash -n`; `.js` and `.mjs` files by `node --check` when node is installed (node
reads `.mjs` as a module and decides `.js` by its own rules). `.ts` (bun's) and `.cs` files are
not checked: the hosts that validate skills have neither bun nor a C# compiler. Checks never
follow symbolic links.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

CHECK_TIMEOUT_SECONDS = 10

# The checkers run without the caller's environment, so BASH_ENV or NODE_OPTIONS can't
# make them load anything, and bash's messages stay in English.
_CHECK_ENV = {"LC_ALL": "C"}
_BASH_LINE = re.compile(r"^.*?: line (\d+): (.+)$")
_NODE_LOCATION = re.compile(r":(\d+)$")


def check_scripts(root: Path) -> list[str]:
    """Return one problem sentence for every script under `root` that has a syntax error."""
    problems: list[str] = []
    for relative in _regular_files(root):
        problem = check_script(root, relative)
        if problem is not None:
            problems.append(problem)
    return problems


def check_script(root: Path, relative: str) -> str | None:
    """Check one file, named by its POSIX path relative to `root`; None when it is fine."""
    suffix = Path(relative).suffix.lower()
    if suffix == ".py":
        return _check_python(root, relative)
    if suffix == ".sh":
        return _check_shell(root, relative)
    if suffix in (".js", ".mjs"):
        return _check_javascript(root, relative)
    return None


def _regular_files(root: Path) -> list[str]:
    found: list[str] = []
    for directory, _dirs, files in os.walk(root):
        for name in files:
            path = Path(directory, name)
            if stat.S_ISREG(path.lstat().st_mode):
                found.append(path.relative_to(root).as_posix())
    return sorted(found)


def _check_python(root: Path, relative: str) -> str | None:
    source = (root / relative).read_bytes()
    try:
        compile(source, relative, "exec", dont_inherit=True)
    except SyntaxError as e:
        line = f" line {e.lineno}" if e.lineno else ""
        return f"{relative}{line}: {_sentence(e.msg or 'invalid syntax')}"
    except ValueError as e:
        return f"{relative}: {_sentence(str(e))}"
    except (RecursionError, MemoryError):
        return f"{relative}: the code is nested too deeply to compile."
    return None


def _check_shell(root: Path, relative: str) -> str | None:
    bash = shutil.which("bash")
    if bash is None:
        return None
    result = _run([bash, "-n", "--", relative], root, relative)
    if isinstance(result, str):
        return result
    if result.returncode == 0:
        return None
    first = _first_line(result.stderr)
    match = _BASH_LINE.match(first)
    if match:
        return f"{relative} line {match.group(1)}: {_sentence(match.group(2))}"
    return f"{relative}: {_sentence(first or 'bash -n refused it')}"


def _check_javascript(root: Path, relative: str) -> str | None:
    node = shutil.which("node")
    if node is None:
        return None
    result = _run([node, "--check", "--", relative], root, relative)
    if isinstance(result, str):
        return result
    if result.returncode == 0:
        return None
    lines = result.stderr.splitlines()
    # node prints "<absolute path>:<line>" first; only the line number is kept.
    location = _NODE_LOCATION.search(lines[0]) if lines else None
    line = f" line {location.group(1)}" if location else ""
    error = next((text for text in lines if text.startswith("SyntaxError")), "")
    message = error.removeprefix("SyntaxError:").strip() or "invalid syntax"
    return f"{relative}{line}: {_sentence(message)}"


def _run(command: list[str], root: Path, relative: str) -> subprocess.CompletedProcess[str] | str:
    """Run a checker without a shell; a timeout comes back as a problem sentence."""
    try:
        return subprocess.run(
            command,
            cwd=root,
            env=_CHECK_ENV,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=CHECK_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return f"{relative}: the syntax check took longer than {CHECK_TIMEOUT_SECONDS} seconds."


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith(".") else f"{text}."

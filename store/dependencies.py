"""Declared dependencies: the Python packages a skill's scripts need beyond the standard
environment (store/environment.py), named in a `requirements.txt` or a script's PEP 723 block.

    # /// script
    # dependencies = ["tabulate>=0.9"]
    # ///

Only requirement specifiers are read: a name, extras, a version and markers. A line that
points elsewhere (`--index-url`, `--extra-index-url`, `-e`, `-f`, `-r`, any other option, a
path, a URL, `git+…`, `name @ url`) is a problem: the packages come from the operator's
package index and nowhere else. A skill's declared requirements make one environment per skill
version, built with uv by the runner (workers/runners/environments.py on a node,
workers/runners/dependency_volumes.py on the Spark) and cached by what it resolves to.
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet

from store.environment import IMAGE_PLATFORM, IMAGE_PYTHON
from store.errors import SkillInvalid
from store.limits import MAX_DEPENDENCIES
from store.resolver import ResolutionFailed, Target, resolve

REQUIREMENTS_FILES = ("requirements.txt", "scripts/requirements.txt")
# PEP 723's own expression for a metadata block.
_BLOCK = re.compile(r"(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$")
_ELSEWHERE = re.compile(r"^[a-z][a-z0-9+.-]*:|^[./~\\]|[/\\]", re.IGNORECASE)
_QUOTED_CHARS = 80


@dataclass(frozen=True)
class Declared:
    """What a skill declares: each file with its requirements, as written."""

    files: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def requirements(self) -> tuple[str, ...]:
        """Every requirement once, in the order first declared."""
        return tuple(dict.fromkeys(line for _path, lines in self.files for line in lines))

    def __bool__(self) -> bool:
        return bool(self.requirements)

    def as_dicts(self) -> list[dict[str, object]]:
        return [{"file": path, "requirements": list(lines)} for path, lines in self.files]


def read_declared(files: Mapping[str, bytes]) -> tuple[Declared, list[str]]:
    """The requirements the files (POSIX path -> bytes) declare, and a sentence per problem."""
    found: list[tuple[str, tuple[str, ...]]] = []
    problems: list[str] = []
    for path in sorted(files):
        if path in REQUIREMENTS_FILES:
            lines = _requirements_file(path, _text(files[path]), problems)
        elif PurePosixPath(path).suffix == ".py":
            lines = _script_block(path, _text(files[path]), problems)
        else:
            continue
        if lines:
            found.append((path, tuple(lines)))
    declared = Declared(tuple(found))
    if len(declared.requirements) > MAX_DEPENDENCIES:
        problems.append(
            f"The skill declares {len(declared.requirements)} requirements; the limit is "
            f"{MAX_DEPENDENCIES}."
        )
    return declared, problems


def dependency_problems(root: Path, paths: Iterable[str]) -> list[str]:
    """The problems of what the files at `paths` (relative to `root`) declare."""
    wanted = [p for p in paths if p in REQUIREMENTS_FILES or PurePosixPath(p).suffix == ".py"]
    return read_declared({path: (root / path).read_bytes() for path in wanted})[1]


def declared_in(folder: Path) -> Declared:
    """What the skill in `folder` declares (a stored skill: its lines were checked on import)."""
    files: dict[str, bytes] = {}
    for path in REQUIREMENTS_FILES:
        if (folder / path).is_file():
            files[path] = (folder / path).read_bytes()
    for script in sorted(folder.rglob("*.py")):
        if script.is_file() and not script.is_symlink():
            data = script.read_bytes()
            if b"# /// script" in data:
                files[script.relative_to(folder).as_posix()] = data
    return read_declared(files)[0]


@functools.lru_cache(maxsize=512)
def declared_for(folder: str, skill_hash: str) -> Declared:
    """`declared_in` once per content hash: a hash names a skill's files for good."""
    return declared_in(Path(folder))


def check_resolvable(declared: Declared, index: str | None = None) -> list[str]:
    """Resolve what a skill declares against the package index, as an import does: wheels
    for the runner image's Python. Raises SkillInvalid when no index would resolve it (no such
    package, conflicting versions, no wheel); returns a warning when the index could not be
    asked, and the runner resolves them on the first run."""
    if not declared:
        return []
    python = ".".join(str(part) for part in IMAGE_PYTHON)
    try:
        resolve(declared.requirements, Target(python_version=python, platform=IMAGE_PLATFORM),
                index)  # fmt: skip
    except ResolutionFailed as e:
        if e.definite:
            problem = f"The skill's declared dependencies can't be installed: {e.message}"
            raise SkillInvalid("The skill has 1 problem.", errors=[problem]) from e
        return [
            "The skill's declared dependencies could not be checked against the package index "
            f"({e.message}); the runner resolves them on the first run."
        ]
    return []


def requirement_problem(where: str, text: str) -> str | None:
    """Why `text` (one requirement) can't be installed from the package index, or None."""
    shown = _quote(text)
    if text.startswith("-"):
        return (
            f"{where}: {shown} is an option; only requirement specifiers (a name, extras, a "
            "version and markers) are read, and packages come from the operator's package "
            "index only."
        )
    try:
        requirement = Requirement(text)
    except InvalidRequirement:
        if _ELSEWHERE.search(text.split(";")[0]):
            return _elsewhere(where, shown)
        return f"{where}: {shown} is not a requirement such as pypdf>=4 or pyyaml."
    if requirement.url is not None:
        return _elsewhere(where, shown)
    return None


def _elsewhere(where: str, shown: str) -> str:
    return (
        f"{where}: {shown} points elsewhere (a path, a URL or a repository); packages come "
        "from the operator's package index only, so name them by name and version."
    )


def _requirements_file(path: str, text: str, problems: list[str]) -> list[str]:
    lines: list[str] = []
    for number, line in _logical_lines(text):
        problem = requirement_problem(f"{path} line {number}", line)
        if problem is not None:
            problems.append(problem)
        else:
            lines.append(str(Requirement(line)))
    return lines


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each requirement line: continuations joined, comments and
    blank lines left out, as pip reads the file."""
    found: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if not pending:
            start = number
        line = re.sub(r"(^|\s)#.*$", "", raw)
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        line, pending = (pending + line).strip(), ""
        if line:
            found.append((start, line))
    if pending.strip():
        found.append((start, pending.strip()))
    return found


def _script_block(path: str, text: str, problems: list[str]) -> list[str]:
    blocks = [m for m in _BLOCK.finditer(text) if m.group("type") == "script"]
    if not blocks:
        return []
    if len(blocks) > 1:
        problems.append(f"{path} holds more than one '# /// script' block; PEP 723 allows one.")
        return []
    content = "".join(
        line[2:] if line.startswith("# ") else line[1:]
        for line in blocks[0].group("content").splitlines(keepends=True)
    )
    try:
        metadata = tomllib.loads(content)
    except tomllib.TOMLDecodeError as e:
        problems.append(f"{path}: its '# /// script' block is not valid TOML: {e}.")
        return []
    _check_requires_python(path, metadata.get("requires-python"), problems)
    dependencies = metadata.get("dependencies", [])
    if not isinstance(dependencies, list) or not all(isinstance(d, str) for d in dependencies):
        problems.append(
            f"{path}: 'dependencies' in its '# /// script' block must be a list of strings."
        )
        return []
    lines: list[str] = []
    for line in dependencies:
        problem = requirement_problem(f"{path}'s script block", line.strip())
        if problem is not None:
            problems.append(problem)
        else:
            lines.append(str(Requirement(line)))
    return lines


def _check_requires_python(path: str, value: object, problems: list[str]) -> None:
    if value is None:
        return
    if isinstance(value, str):
        try:
            SpecifierSet(value)
            return
        except InvalidSpecifier:
            pass
    problems.append(
        f"{path}: 'requires-python' in its '# /// script' block must be a version specifier "
        "such as >=3.11."
    )


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _quote(text: str) -> str:
    quoted = f'"{text}"'
    return quoted if len(quoted) <= _QUOTED_CHARS else quoted[: _QUOTED_CHARS - 2] + '…"'

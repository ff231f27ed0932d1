"""Confining a resource path an agent names to the files of one skill."""

from __future__ import annotations

import stat
from pathlib import Path, PurePosixPath
from urllib.parse import unquote

from store.errors import InvalidResourcePath, ResourceNotFound, ResourceTooLarge
from store.limits import MAX_PATH_CHARS, MAX_RESOURCE_BYTES

# check_relative_path's rules as one pattern (for the API's document): text that is not only
# spaces, of 1 to MAX_PATH_CHARS characters, none a control character or a backslash, not
# starting with '/' or a drive letter's ':', with no '..' segment and nothing percent-encoded.
RELATIVE_PATH_PATTERN = (
    r"^(?=.*\S)(?!/)(?!.:)(?!(?:.*/)?\.\.(?:/|$))(?!.*%[0-9A-Fa-f]{2})"
    rf"[^\u0000-\u001f\\]{{1,{MAX_PATH_CHARS}}}$"
)


def check_relative_path(path: object) -> str:
    """The path as a clean POSIX relative path, or InvalidResourcePath."""
    if not isinstance(path, str) or not path.strip():
        raise InvalidResourcePath("The path must be a non-empty relative path such as 'SKILL.md'.")
    if len(path) > MAX_PATH_CHARS:
        raise InvalidResourcePath("The path is too long.")
    if "\0" in path or any(ord(ch) < 32 for ch in path):
        raise InvalidResourcePath("The path holds a NUL or control character.")
    decoded = _fully_unquoted(path)
    for candidate in {path, decoded}:
        _refuse_escape(candidate)
    if decoded != path:
        # An agent has no reason to percent-encode a file name; treat it as an attempt to hide.
        raise InvalidResourcePath("The path is percent-encoded; name the file as it is.")
    return PurePosixPath(path).as_posix()


def _fully_unquoted(path: str) -> str:
    previous, current = path, unquote(path)
    for _ in range(5):
        if current == previous:
            break
        previous, current = current, unquote(current)
    return current


def _refuse_escape(path: str) -> None:
    if "\0" in path:
        raise InvalidResourcePath("The path holds a NUL character.")
    if path.startswith(("/", "\\")) or (len(path) > 1 and path[1] == ":"):
        raise InvalidResourcePath("The path must be relative to the skill folder, not absolute.")
    if "\\" in path:
        raise InvalidResourcePath("The path must use forward slashes.")
    parts = path.split("/")
    if any(part == ".." for part in parts):
        raise InvalidResourcePath("The path may not climb out of the skill folder with '..'.")


def resolve_resource(root: Path, path: object) -> tuple[str, Path]:
    """The clean relative path and the regular file it names inside `root`; no link is followed."""
    rel = check_relative_path(path)
    target = root / rel
    try:
        info = target.lstat()
    except (FileNotFoundError, NotADirectoryError):
        raise ResourceNotFound(f"The skill has no file '{rel}'.") from None
    if stat.S_ISLNK(info.st_mode):
        raise InvalidResourcePath(f"'{rel}' is a link; only the skill's own files can be read.")
    if not stat.S_ISREG(info.st_mode):
        raise ResourceNotFound(f"'{rel}' is not a file of the skill.")
    resolved_root = root.resolve()
    if not target.resolve().is_relative_to(resolved_root):
        raise InvalidResourcePath("The path leads out of the skill folder.")
    return rel, target


def read_resource(root: Path, path: object, limit: int = MAX_RESOURCE_BYTES) -> tuple[str, bytes]:
    """The clean path and bytes of one skill file, refusing files over `limit`."""
    rel, target = resolve_resource(root, path)
    size = target.stat().st_size
    if size > limit:
        raise ResourceTooLarge(
            f"'{rel}' is {size} bytes; files over {limit // 1024} KiB "
            "can't be returned to an agent."
        )
    return rel, target.read_bytes()

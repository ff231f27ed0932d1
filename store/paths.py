"""Every path the store builds below one of its roots goes through `inside`."""

from __future__ import annotations

from pathlib import Path

from store.errors import UnsafePath


def inside(root: Path, *parts: str) -> Path:
    """`root/part/...`, refused unless every part is one plain path segment strictly inside root.

    A part may not be empty, `.` or `..`, hold a slash, a backslash or NUL, or be absolute; the
    result, with symbolic links resolved, must lie strictly below the resolved root.
    """
    if not parts:
        raise UnsafePath("A path inside the store needs at least one part.")
    for part in parts:
        if (
            not isinstance(part, str)
            or part in ("", ".", "..")
            or "/" in part
            or "\\" in part
            or "\0" in part
        ):
            raise UnsafePath(f"{part!r} is not a plain name, so no path is built from it.")
    base = root.resolve()
    path = base.joinpath(*parts)
    resolved = path.resolve()
    if resolved == base or base not in resolved.parents:
        raise UnsafePath(f"{'/'.join(parts)!r} would lead outside its folder.")
    return path

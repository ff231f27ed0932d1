"""A script call's command line and files, read once before anyone is asked.

`args` is the script's argv as given: a list of strings, passed after the script's path, never
through a shell. `files` maps a path in the run's working directory to one of the owner's files
(its id, from `POST /api/files` or an earlier run) or to `{"content_base64": …}`, a small file
sent inline (kept as a file of the owner's here, so the call's record names it by id). Either
way the call is normalised to `{path: {"id", "size", "sha256"}}`: what the owner approves and
what the run gets, byte for byte.
"""

from __future__ import annotations

import base64
import binascii
import io
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from broker.errors import InvalidCall
from store.archive import size_text
from store.files import FileInfo, FileStore, FileTooLarge, is_file_id
from store.limits import (
    MAX_ARGUMENT_TEXT,
    MAX_FILE_NAME_CHARS,
    MAX_FILE_PATH_CHARS,
    MAX_FILE_PATH_DEPTH,
    MAX_INLINE_FILE_BYTES,
    MAX_RUN_FILE_BYTES,
    MAX_RUN_FILES,
)

MAX_ARGS = 256
INLINE = "content_base64"
FILES_SHAPE = (
    "HOST: 'files' must map a path in the run's working directory to a file id (from "
    'POST /api/files) or to {"content_base64": "..."}, such as {"in.pdf": "<id>"}.'
)


def read_args(args: object, declared_argv: bool, script: str) -> tuple[str, ...] | None:
    """The call's `args` as the script's argv; None when it sent none."""
    if args is None:
        return None
    if declared_argv:
        raise InvalidCall(
            f"HOST: {script} builds its command line from 'arguments' (its parameters_schema "
            "declares argv); send those, not 'args'."
        )
    if not isinstance(args, list) or not all(isinstance(item, str) for item in args):
        raise InvalidCall(
            "HOST: 'args' must be a list of strings, the script's command line after its "
            'path, such as ["in.pdf", "out.json"].'
        )
    if len(args) > MAX_ARGS:
        raise InvalidCall(f"HOST: 'args' holds {len(args)} items; at most {MAX_ARGS} are taken.")
    if any("\0" in item for item in args):
        raise InvalidCall("HOST: an item of 'args' holds a NUL character, which no argv can.")
    size = sum(len(item.encode("utf-8", "surrogatepass")) for item in args)
    if size > MAX_ARGUMENT_TEXT:
        raise InvalidCall(
            f"HOST: 'args' is {size:,} bytes; at most {MAX_ARGUMENT_TEXT:,} are taken."
        )
    return tuple(args)


def read_files(files: object, store: FileStore | None, owner_id: int) -> dict[str, dict[str, Any]]:
    """The call's `files`, each checked and by id; inline ones are kept as the owner's files."""
    if files is None:
        return {}
    if not isinstance(files, Mapping):
        raise InvalidCall(FILES_SHAPE)
    if len(files) > MAX_RUN_FILES:
        raise InvalidCall(
            f"HOST: 'files' names {len(files)} files; at most {MAX_RUN_FILES} go into one run."
        )
    if files and store is None:
        raise InvalidCall("HOST: files can't be given to a run here.")
    paths = {work_path(path): value for path, value in files.items()}
    _refuse_overlaps(list(paths))
    assert store is not None or not paths
    placed: dict[str, dict[str, Any]] = {}
    total = 0
    for path, value in sorted(paths.items()):
        assert store is not None
        info = _file_of(value, store, owner_id, path)
        total += info.size
        if total > MAX_RUN_FILE_BYTES:
            raise InvalidCall(
                f"HOST: the files come to more than {size_text(MAX_RUN_FILE_BYTES)}, the most "
                "one run takes."
            )
        placed[path] = info.entry()
    return placed


def work_path(path: object) -> str:
    """A path in the run's working directory, as a clean relative POSIX path."""
    if not isinstance(path, str) or not path.strip():
        raise InvalidCall("HOST: a path in 'files' must be a relative path, such as 'in.pdf'.")
    shown = path if len(path) <= 80 else path[:77] + "..."
    if len(path) > MAX_FILE_PATH_CHARS:
        raise InvalidCall(f"HOST: the path {shown!r} is over {MAX_FILE_PATH_CHARS} characters.")
    if any(ord(char) < 32 or char in "\x7f\\" for char in path):
        raise InvalidCall(f"HOST: the path {shown!r} holds a NUL, control character or backslash.")
    if path.startswith("/"):
        raise InvalidCall(
            f"HOST: the path {shown!r} is absolute; paths are relative to the working directory."
        )
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise InvalidCall(
            f"HOST: the path {shown!r} has an empty, '.' or '..' part; name the file plainly."
        )
    if len(parts) > MAX_FILE_PATH_DEPTH or any(
        len(part.encode("utf-8", "surrogatepass")) > MAX_FILE_NAME_CHARS for part in parts
    ):
        raise InvalidCall(f"HOST: the path {shown!r} is too deep, or a part of it too long.")
    return PurePosixPath(path).as_posix()


def _refuse_overlaps(paths: list[str]) -> None:
    """No path may be a folder of another (`a` and `a/b`)."""
    taken = set(paths)
    for path in paths:
        for parent in PurePosixPath(path).parents:
            if str(parent) in taken:
                raise InvalidCall(
                    f"HOST: 'files' names {str(parent)!r} as a file and as the folder of {path!r}."
                )


def _file_of(value: object, store: FileStore, owner_id: int, path: str) -> FileInfo:
    if isinstance(value, str):
        return store.find(owner_id, value)
    if isinstance(value, Mapping) and set(value) == {INLINE}:
        return _inline(value[INLINE], store, owner_id, path)
    if isinstance(value, Mapping) and is_file_id(value.get("id")):
        # A normalised entry, as an approved call replays it: the same bytes or nothing.
        found = store.find(owner_id, str(value["id"]))
        if value.get("sha256", found.sha256) != found.sha256:
            raise InvalidCall(f"HOST: the file for {path!r} is not the one the call named.")
        return found
    raise InvalidCall(FILES_SHAPE)


def _inline(content: object, store: FileStore, owner_id: int, path: str) -> FileInfo:
    if not isinstance(content, str):
        raise InvalidCall(f"HOST: the content_base64 of {path!r} must be base64 text.")
    if len(content) > (MAX_INLINE_FILE_BYTES * 4) // 3 + 4:
        raise FileTooLarge(
            f"HOST: the inline file {path!r} is larger than {size_text(MAX_INLINE_FILE_BYTES)}; "
            "upload it with POST /api/files and name its id instead."
        )
    try:
        data = base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError) as e:
        raise InvalidCall(f"HOST: the content_base64 of {path!r} is not valid base64.") from e
    if len(data) > MAX_INLINE_FILE_BYTES:
        raise FileTooLarge(
            f"HOST: the inline file {path!r} is larger than {size_text(MAX_INLINE_FILE_BYTES)}; "
            "upload it with POST /api/files and name its id instead."
        )
    return store.save(owner_id, PurePosixPath(path).name, io.BytesIO(data))

"""Owners' files: what a call places in a run's working directory and what a run made there.

A file is uploaded (`POST /api/files`), sent inline with a call (`files` with
`content_base64`), or saved from a run's working directory by its worker. Its bytes live in
`<data>/files/<id>` (0600), written to a temporary name and renamed, so a file is whole or not
there; its row holds the owner, name, size and SHA-256, and when it expires (the owner's
setting `SKILLFLEET_FILE_TTL`). Another owner's file is as unknown as a missing one.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, Any

from sqlalchemy import Select, bindparam, delete, insert, select

from store.archive import size_text
from store.db import SessionFactory, core_connection, core_transaction, transaction
from store.errors import StoreError
from store.limits import FILE_CHUNK_BYTES, MAX_FILE_NAME_CHARS
from store.models import StoredFile, utcnow

FILE_MODE = 0o600
# A file's id is a UUID; anything else names no file (and never a path).
_ID_CHARS = frozenset("0123456789abcdef-")


class FileNotFound(StoreError):
    """Raised when a file id names no file of the caller's (missing, expired or another's)."""

    code = "file_not_found"
    status = 404


class FileTooLarge(StoreError):
    """Raised when a file is larger than SKILLFLEET_FILE_MAX_BYTES."""

    code = "file_too_large"
    status = 413


class FileInvalid(StoreError):
    """Raised when an upload has no file or an unusable name."""

    code = "file_invalid"
    status = 422


@dataclass(frozen=True)
class FileInfo:
    """A stored file as the API shows it."""

    id: str
    name: str
    size: int
    sha256: str
    created_at: datetime
    expires_at: datetime
    run_id: str | None = None
    path: str | None = None

    def entry(self) -> dict[str, Any]:
        """How a run's files list it: by id, with its size and SHA-256."""
        return {"id": self.id, "size": self.size, "sha256": self.sha256}

    @classmethod
    def of(cls, row: Any, prefix: str = "") -> FileInfo:
        """From a `StoredFile`, or a row of its columns (named with `prefix` before each)."""
        return cls(*(getattr(row, prefix + name) for name in _FIELDS))


# A file's row by its id, and a new one: Core statements built once (every call with files
# reads each, and every file a run sends back is inserted).
_FIELDS = tuple(field.name for field in fields(FileInfo))
_FIND = select(
    StoredFile.id, StoredFile.owner_id, StoredFile.name, StoredFile.size, StoredFile.sha256,
    StoredFile.created_at, StoredFile.expires_at, StoredFile.run_id, StoredFile.path,
).where(StoredFile.id == bindparam("id"))  # fmt: skip
_INSERT = insert(StoredFile)


def _values(owner_id: int, info: FileInfo) -> dict[str, Any]:
    return {
        "id": info.id, "owner_id": owner_id, "name": info.name, "size": info.size,
        "sha256": info.sha256, "run_id": info.run_id, "path": info.path,
        "created_at": info.created_at, "expires_at": info.expires_at,
    }  # fmt: skip


def is_file_id(text: object) -> bool:
    return isinstance(text, str) and len(text) == 36 and set(text) <= _ID_CHARS


def clean_name(name: str | None) -> str:
    """A file's name as kept: its last path part, without control characters; refused when
    nothing is left."""
    base = (name or "").replace("\\", "/").rsplit("/", 1)[-1]
    kept = "".join(char for char in base if char.isprintable()).strip()
    if not kept or kept in (".", ".."):
        raise FileInvalid("The file needs a name (the multipart part's filename).")
    return kept[:MAX_FILE_NAME_CHARS]


class FileStore:
    """Files of owners on disk, indexed in the database."""

    def __init__(self, folder: Path, sessions: SessionFactory, max_bytes: int, ttl: int):
        self.folder = folder
        self.sessions = sessions
        self.max_bytes = max_bytes
        self.ttl = ttl

    def path(self, file_id: str) -> Path:
        if not is_file_id(file_id):
            raise FileNotFound(f"No file '{file_id[:64]}' of yours is kept.")
        return self.folder / file_id

    def save(
        self,
        owner_id: int,
        name: str,
        source: IO[bytes] | Iterable[bytes],
        run_id: str | None = None,
        path: str | None = None,
    ) -> FileInfo:
        """Keep the bytes `source` gives as a new file of `owner_id`; FileTooLarge past the limit,
        and then nothing is kept."""
        file_id = str(uuid.uuid4())
        target = self.path(file_id)
        self.folder.mkdir(parents=True, exist_ok=True)
        temp = target.with_name(f".{file_id}.partial")
        digest = hashlib.sha256()
        size = 0
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
            with os.fdopen(fd, "wb") as out:
                for chunk in _chunks(source):
                    size += len(chunk)
                    if size > self.max_bytes:
                        raise FileTooLarge(
                            f"The file is larger than {size_text(self.max_bytes)}, the limit "
                            "for a file (SKILLFLEET_FILE_MAX_BYTES)."
                        )
                    digest.update(chunk)
                    out.write(chunk)
            now = utcnow()
            info = FileInfo(
                file_id, name, size, digest.hexdigest(), now,
                now + timedelta(seconds=self.ttl), run_id, path,
            )  # fmt: skip
            os.replace(temp, target)
            # One Core INSERT: a Session's bookkeeping cost as much again, and a run's every
            # file sent back pays it.
            with core_transaction(self.sessions) as connection:
                connection.execute(_INSERT, _values(owner_id, info))
        except BaseException:
            temp.unlink(missing_ok=True)
            target.unlink(missing_ok=True)
            raise
        return info

    def find(self, owner_id: int, file_id: str) -> FileInfo:
        """The owner's file `file_id` while it is kept; FileNotFound otherwise."""
        if not is_file_id(file_id):
            raise _missing(file_id)
        with core_connection(self.sessions) as connection:
            row = connection.execute(_FIND, {"id": file_id}).first()
        if row is None or row.owner_id != owner_id:
            raise _missing(file_id)
        return still_kept(file_id, FileInfo.of(row))

    def read(self, info: FileInfo) -> Iterator[bytes]:
        """The file's bytes in chunks; FileNotFound when they went (expired meanwhile)."""
        try:
            handle = open(self.path(info.id), "rb")  # noqa: SIM115 - closed by the generator
        except FileNotFoundError as e:
            raise FileNotFound(f"No file '{info.id}' of yours is kept.") from e
        return _read_all(handle)

    @staticmethod
    def kept(owner_id: int) -> Select[StoredFile]:
        """The owner's files not yet expired (unordered: the list route pages them)."""
        return select(StoredFile).where(
            StoredFile.owner_id == owner_id, StoredFile.expires_at > utcnow()
        )

    def delete(self, owner_id: int, file_id: str) -> None:
        info = self.find(owner_id, file_id)
        with transaction(self.sessions) as session:
            session.execute(delete(StoredFile).where(StoredFile.id == info.id))
        self.path(info.id).unlink(missing_ok=True)

    def expire(self, batch: int = 1000) -> int:
        """Remove up to `batch` files past their time; how many went."""
        query = select(StoredFile.id).where(StoredFile.expires_at <= utcnow()).limit(batch)
        with transaction(self.sessions) as session:
            ids = list(session.scalars(query))
            if ids:
                session.execute(delete(StoredFile).where(StoredFile.id.in_(ids)))
        for file_id in ids:
            self.path(file_id).unlink(missing_ok=True)
        return len(ids)


def still_kept(file_id: str, info: FileInfo | None) -> FileInfo:
    """`info`, an owner's file `file_id` as read (None: no such file of theirs), while it is
    kept; FileNotFound once it expired."""
    if info is None or info.expires_at <= utcnow():
        raise _missing(file_id)
    return info


def _missing(file_id: object) -> FileNotFound:
    return FileNotFound(f"No file '{str(file_id)[:64]}' of yours is kept.")


def _chunks(source: IO[bytes] | Iterable[bytes]) -> Iterator[bytes]:
    if hasattr(source, "read"):
        while chunk := source.read(FILE_CHUNK_BYTES):
            yield chunk
        return
    yield from source


def _read_all(handle: IO[bytes]) -> Iterator[bytes]:
    with handle:
        while chunk := handle.read(FILE_CHUNK_BYTES):
            yield chunk

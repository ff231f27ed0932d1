"""A run's files on its worker: the call's files placed in its working directory before the
script starts, and every file the run created or changed there sent back to the API after.

Files travel over the node's authenticated channel (its token; the API's node routes), never
through a task message. An input file arrives byte for byte or the run does not start
(`input_file_unavailable`). What comes back: regular files only, at most MAX_OUTPUT_FILES and
MAX_OUTPUT_FILE_BYTES in all, each within the API's file limit; links, special files and what
passes the caps are named in a note instead.

A worker keeps the input files it fetched (InputCache, by SHA-256, in a folder only it reads):
a run given a file the worker already holds, as when an agent runs a script again on the same
PDF, gets it without another request. What the cache gives is proven to hash to its name
(remembered while its signature stands, else hashed as it is copied), so a file altered there
is fetched again, never placed.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import stat
import tarfile
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

from relay.errors import RunError
from store.archive import size_text
from store.limits import (
    FILE_CHUNK_BYTES,
    INPUT_CACHE_BYTES,
    MAX_OUTPUT_FILE_BYTES,
    MAX_OUTPUT_FILES,
)
from store.names import is_valid_hash

HTTP_TIMEOUT = 60.0
# An input placed in a run's folder, as its entry stands until something writes it: inode,
# size, modification time (put a second into the past as it is placed, so that any write, which
# sets it to the clock's time, changes it) and change time (only the kernel sets that). The
# same signature after the run says the bytes are the ones placed, without reading them again.
Signature = tuple[int, int, int, int]
STALE_FETCH_SECONDS = 3600  # a fetch into the cache unfinished this long was abandoned
# A trim leaves the cache within this share of its bytes, so that the next one is some files
# away: the cache keeps up to its bytes, and runs at about this share of them.
TRIM_TO = 0.9
# A process may keep this share of the room a trim found before it looks again: several
# processes keeping into one folder (workers of one node) stay within its bytes.
ROOM_SHARE = 4
SHOWN_LEFT_OUT = 5  # a note names this many left-out files, then counts the rest


class InputFileUnavailable(RunError):
    """Raised when an input file can't be fetched whole (expired, or not the bytes named)."""

    code = "input_file_unavailable"
    status = 409


class InputCache:
    """Input files by their SHA-256 in `folder` (made 0700), at most `max_bytes` in all.

    A kept file is proven to hash to its name (as it is fetched, or hashed as it is copied) and
    the proof remembered with its signature, as packages' proofs are (workers/packages.py): while
    the signature stands, nothing wrote the file since, and it is copied by the kernel unread.

    Trimming reads the whole folder (a stat of every kept file), so it is not done for every
    file kept: a trim leaves the cache within TRIM_TO of its bytes and notes the room left,
    and the folder is read again only once this process has kept a share of that room
    (ROOM_SHARE).
    A cache of many small inputs so pays its scan once in hundreds of files, not each time.
    """

    def __init__(self, folder: Path, max_bytes: int = INPUT_CACHE_BYTES) -> None:
        self.folder = folder
        self.max_bytes = max_bytes
        self._proven: dict[str, Signature] = {}
        self._room = 0  # bytes this process may keep before it trims (none: it trims first)
        self._lock = threading.Lock()  # the worker's threads keep files at once
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        folder.chmod(0o700)
        # What a worker that died mid-fetch left (another worker's fetch now is younger).
        stale = time.time() - STALE_FETCH_SECONDS
        for entry in os.scandir(folder):
            if not entry.name.startswith("."):
                continue
            try:
                if entry.stat(follow_symlinks=False).st_mtime < stale:
                    Path(entry.path).unlink(missing_ok=True)
            except FileNotFoundError:  # kept meanwhile, under its hash
                continue

    def place(self, sha256: object, out: IO[bytes]) -> bool:
        """Write the kept file `sha256` to `out`; False (and `out` left empty) when none is
        kept or what is kept has other bytes (then it goes)."""
        path = self._path(sha256)
        if path is None:
            return False
        try:
            source = os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb")
        except OSError:
            return False
        with source:
            info = os.fstat(source.fileno())
            if stat.S_ISREG(info.st_mode) and self._proven.get(path.name) == _signature(info):
                _copy(source, out, info.st_size)
                self._placed(path.name, source)
                return True
            digest = hashlib.sha256()
            while chunk := source.read(FILE_CHUNK_BYTES):
                digest.update(chunk)
                out.write(chunk)
            if digest.hexdigest() == sha256:
                self._placed(path.name, source)
                return True
        self._proven.pop(path.name, None)
        out.seek(0)
        out.truncate()
        path.unlink(missing_ok=True)
        return False

    def _placed(self, name: str, source: IO[bytes]) -> None:
        """The file just placed goes last in line to be removed, proven as it now stands."""
        os.utime(source.fileno())
        self._proven[name] = _signature(os.fstat(source.fileno()))

    def kept(self, path: Path) -> None:
        """`path` was just written with bytes that hash to its name: proven as it stands; the
        cache is trimmed when this process used its room."""
        info = os.lstat(path)
        self._proven[path.name] = _signature(info)
        with self._lock:
            self._room -= info.st_size
            due = self._room < 0
        if due:
            self.trim()

    def writer(self, sha256: object, size: int) -> _Keeping | None:
        """Where to write a file about to be fetched so that it is kept; None when it is not
        to be (too large, or a name that is no SHA-256)."""
        path = self._path(sha256)
        if path is None or size > self.max_bytes // 8:
            return None
        return _Keeping(self, path)

    def trim(self) -> None:
        """Remove the least recently placed files until what is kept is within TRIM_TO of the
        cache's bytes; then note the room left for this process (at least a share of the rest,
        so that the scans stay as far apart however full the cache runs)."""
        entries = []
        for entry in os.scandir(self.folder):
            if entry.name.startswith("."):
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            entries.append((info.st_mtime_ns, info.st_size, entry.path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.max_bytes * TRIM_TO:
                break
            Path(path).unlink(missing_ok=True)
            self._proven.pop(os.path.basename(path), None)
            total -= size
        for name in set(self._proven) - {os.path.basename(path) for _, _, path in entries}:
            self._proven.pop(name, None)  # gone meanwhile (another worker's trim)
        with self._lock:
            self._room = max(self.max_bytes - total, 0) // ROOM_SHARE

    def _path(self, sha256: object) -> Path | None:
        return self.folder / str(sha256) if is_valid_hash(sha256) else None


class _Keeping:
    """A file being written into the cache: `keep` names it by its hash once whole."""

    def __init__(self, cache: InputCache, path: Path) -> None:
        self.cache = cache
        self.path = path
        self.temp = path.with_name(f".{uuid.uuid4().hex}")
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        self.out = os.fdopen(os.open(self.temp, flags, 0o600), "w+b")  # read by `_copy`

    def write(self, chunk: bytes) -> None:
        self.out.write(chunk)

    def keep(self) -> None:
        self.out.close()
        os.replace(self.temp, self.path)
        self.cache.kept(self.path)

    def drop(self) -> None:
        self.out.close()
        self.temp.unlink(missing_ok=True)


class RunFiles:
    """A worker's channel to the API for its runs' files, with its node's token, and the input
    files it keeps (`cache`)."""

    def __init__(
        self,
        api_url: str,
        node: str,
        token: str,
        client: httpx.Client | None = None,
        cache: InputCache | None = None,
    ) -> None:
        self.node = node
        self.cache = cache
        self.client = client or httpx.Client(timeout=HTTP_TIMEOUT)
        self._base = f"{api_url.rstrip('/')}/api/nodes/{node}/runs"
        self._headers = {"Authorization": f"Bearer {token}"}

    def fetch(self, run_id: str, path: str, entry: Mapping[str, Any], out: IO[bytes]) -> None:
        """Write the input file `entry` (placed at `path`) to `out`; raises
        InputFileUnavailable unless its bytes are exactly the ones the call named."""
        sha256 = entry.get("sha256")
        if self.cache is not None and self.cache.place(sha256, out):
            return
        keeping = self.cache.writer(sha256, entry.get("size", 0)) if self.cache else None
        if keeping is None:
            self._fetch(run_id, path, entry, out)
            return
        # Written once, into the cache; the kernel copies it to `out` from there.
        try:
            self._fetch(run_id, path, entry, keeping.out)
            size = keeping.out.tell()
            keeping.out.seek(0)  # flushed
            _copy(keeping.out, out, size)
        except BaseException:
            keeping.drop()
            raise
        keeping.keep()

    def _fetch(self, run_id: str, path: str, entry: Mapping[str, Any], out: IO[bytes]) -> None:
        url = f"{self._base}/{run_id}/files/{entry['id']}"
        digest = hashlib.sha256()
        try:
            with self.client.stream("GET", url, headers=self._headers) as response:
                if response.status_code != 200:
                    response.read()
                    raise InputFileUnavailable(
                        f"The input file {path} could not be fetched: {_reason(response)}"
                    )
                # As they arrive: re-cut into pieces of a size, 1 MiB costs another 0.6 ms.
                for chunk in response.iter_bytes():
                    digest.update(chunk)
                    out.write(chunk)
        except httpx.HTTPError as e:
            raise InputFileUnavailable(f"The input file {path} could not be fetched: {e}") from e
        if digest.hexdigest() != entry.get("sha256"):
            raise InputFileUnavailable(
                f"The input file {path} arrived with other bytes than the call named."
            )

    def send(self, run_id: str, path: str, source: IO[bytes], size: int) -> dict[str, Any] | str:
        """Keep what the run made at `path` (`size` bytes) as its owner's file: its entry, or
        why not."""
        url = f"{self._base}/{run_id}/files"
        headers = {
            **self._headers,
            "Content-Type": "application/octet-stream",
            "Content-Length": str(size),
        }
        try:
            response = self.client.post(
                url, params={"path": path}, headers=headers, content=_chunks(source)
            )
        except httpx.HTTPError as e:
            return f"it could not be sent ({type(e).__name__})"
        if response.status_code != 201:
            return _reason(response)
        kept = response.json()
        return {"path": path, "size": kept["size"], "sha256": kept["sha256"], "id": kept["id"]}

    def close(self) -> None:
        self.client.close()


def _reason(response: httpx.Response) -> str:
    try:
        body = response.json()
        return f"{body['message']} ({body['code']})"
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}"


def place_inputs(
    channel: RunFiles, run_id: str, inputs: Mapping[str, Mapping[str, Any]], work: Path,
    uid: int | None = None,
) -> dict[str, Signature]:  # fmt: skip
    """Fetch each input file into `work` at its path (folders made as needed), owned by `uid`
    when given. `work` is the run's own and no process of the run lives yet. Returns each
    placed file's signature, for `collect`."""
    placed: dict[str, Signature] = {}
    for path, entry in sorted(inputs.items()):
        target = work / path
        for folder in reversed([*target.relative_to(work).parents][:-1]):
            made = work / folder
            if not made.is_dir():
                made.mkdir(mode=0o755)
                if uid is not None:
                    os.chown(made, uid, uid)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with os.fdopen(os.open(target, flags, 0o644), "wb") as out:
            channel.fetch(run_id, path, entry, out)
        if uid is not None:
            os.chown(target, uid, uid)
        past = time.time_ns() - 1_000_000_000
        os.utime(target, ns=(past, past), follow_symlinks=False)
        placed[path] = _signature(os.lstat(target))
    return placed


@dataclass
class Sent:
    """What a run sent back, and what it left out with the reason."""

    files: list[dict[str, Any]] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    total: int = 0

    def note(self) -> str | None:
        if not self.left_out:
            return None
        shown = "; ".join(self.left_out[:SHOWN_LEFT_OUT])
        more = len(self.left_out) - SHOWN_LEFT_OUT
        rest = f"; and {more} more" if more > 0 else ""
        return f"Not every file the run made came back: {shown}{rest}."


@dataclass(frozen=True)
class Found:
    """One entry of the working directory after the run."""

    path: str
    kind: str  # "file", "link", "special"
    size: int = 0
    open: Any = None  # () -> IO[bytes], for a file
    signature: Signature | None = None  # a file on this host's file system


def collect(
    channel: RunFiles,
    run_id: str,
    found: Iterable[Found],
    inputs: Mapping[str, Mapping[str, Any]],
    placed: Mapping[str, Signature] | None = None,
) -> Sent:
    """Send back every file created or changed (an input with other bytes now), within caps;
    an input whose signature is still the one `placed` holds is unchanged unread."""
    sent = Sent()
    for entry in sorted(found, key=lambda item: item.path):
        if entry.kind == "link":
            sent.left_out.append(f"{entry.path} (a symbolic link, not followed)")
            continue
        if entry.kind != "file":
            sent.left_out.append(f"{entry.path} (not a regular file)")
            continue
        given = inputs.get(entry.path)
        if given is not None and given.get("size") == entry.size:
            if entry.signature is not None and (placed or {}).get(entry.path) == entry.signature:
                continue  # an input nothing wrote
            with entry.open() as source:
                if _sha256(source) == given.get("sha256"):
                    continue  # an input, unchanged
        if len(sent.files) >= MAX_OUTPUT_FILES:
            sent.left_out.append(f"{entry.path} (past the {MAX_OUTPUT_FILES}-file limit)")
            continue
        if sent.total + entry.size > MAX_OUTPUT_FILE_BYTES:
            sent.left_out.append(
                f"{entry.path} (past {size_text(MAX_OUTPUT_FILE_BYTES)} of files in all)"
            )
            continue
        with entry.open() as source:
            kept = channel.send(run_id, entry.path, source, entry.size)
        if isinstance(kept, str):
            sent.left_out.append(f"{entry.path} ({kept})")
            continue
        sent.files.append(kept)
        sent.total += entry.size
    return sent


def found_in(work: Path) -> Iterator[Found]:
    """The working directory's entries, never following a link."""
    for folder, dirs, names in os.walk(work):
        base = Path(folder)
        for name in [*dirs, *names]:
            path = base / name
            info = path.lstat()
            relative = path.relative_to(work).as_posix()
            if stat.S_ISLNK(info.st_mode):
                yield Found(relative, "link")
            elif stat.S_ISREG(info.st_mode):
                yield Found(relative, "file", info.st_size, _opener(path), _signature(info))
            elif not stat.S_ISDIR(info.st_mode):
                yield Found(relative, "special")
        dirs[:] = [d for d in dirs if not (base / d).is_symlink()]


def found_in_tar(archive: tarfile.TarFile, root: str) -> Iterator[Found]:
    """The entries of a tar of the working directory (the engine's archive of a container's
    folder, whose members start with `root`)."""
    for member in archive:
        name = member.name
        if name in (root, f"{root}/", ".", "./"):
            continue
        relative = name.removeprefix(f"{root}/").removeprefix("./")
        if member.isdir():
            continue
        if member.issym() or member.islnk():
            yield Found(relative, "link")
        elif member.isreg():
            yield Found(relative, "file", member.size, _tar_opener(archive, member))
        else:
            yield Found(relative, "special")


def _signature(info: os.stat_result) -> Signature:
    return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _opener(path: Path) -> Any:
    def opened() -> IO[bytes]:
        return os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb")

    return opened


def _tar_opener(archive: tarfile.TarFile, member: tarfile.TarInfo) -> Any:
    def opened() -> IO[bytes]:
        extracted = archive.extractfile(member)
        assert extracted is not None
        return extracted

    return opened


def _copy(source: IO[bytes], out: IO[bytes], size: int) -> None:
    """`size` bytes from the start of `source` to `out`: by the kernel when `out` is a file."""
    try:
        target = out.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):
        shutil.copyfileobj(source, out, FILE_CHUNK_BYTES)
        return
    out.flush()
    offset = 0
    while offset < size:
        sent = os.sendfile(target, source.fileno(), offset, size - offset)
        if sent == 0:
            break
        offset += sent


def _chunks(source: IO[bytes]) -> Iterator[bytes]:
    while chunk := source.read(FILE_CHUNK_BYTES):
        yield chunk


def _sha256(source: IO[bytes]) -> str:
    digest = hashlib.sha256()
    while chunk := source.read(FILE_CHUNK_BYTES):
        digest.update(chunk)
    return digest.hexdigest()

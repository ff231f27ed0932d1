"""Safe import of skill archives: bounded reads, entry checks, zip extraction and careful writes.

Zip uploads, packages and GitHub imports share the same rules: every entry is checked (name,
type, declared size, collisions, limits) and read into memory before anything is written, so a
refused archive leaves the destination empty.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import stat
import unicodedata
import zipfile
import zlib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Protocol

from store.errors import ArchiveUnsafe, SkillInvalid, SkillTooLarge, ZipTooLarge
from store.limits import (
    KIB,
    MAX_ARCHIVE_ENTRIES,
    MAX_COMPRESSION_RATIO,
    MAX_FILE_BYTES,
    MAX_FILES,
    MAX_SKILL_BYTES,
    MAX_ZIP_BYTES,
    MIB,
)

Parts = tuple[str, ...]

SKILL_FILE = "SKILL.md"
LAYOUT_MESSAGE = "The zip must hold a skill at its root or in one top folder."

_CHUNK = 64 * KIB
_UTF8_NAME_FLAG = 0x800
_ENCRYPTED_FLAG = 0x1
_MAX_COMPONENT_BYTES = 255
_MAX_PATH_BYTES = 1024
_DRIVE = re.compile(r"^[A-Za-z]:")
# Folders and files that macOS adds to the zips it makes; they are never part of a skill.
_JUNK_FOLDERS = frozenset({"__MACOSX"})
_JUNK_FILES = frozenset({".DS_Store"})


class ByteStream(Protocol):
    """Anything with a binary `read(size)`, such as an uploaded file's stream."""

    def read(self, size: int, /) -> bytes: ...


def size_text(limit: int) -> str:
    """Names a byte limit the way a person would say it (5 MiB, 256 KiB)."""
    if limit % MIB == 0:
        return f"{limit // MIB} MiB"
    if limit % KIB == 0:
        return f"{limit // KIB} KiB"
    return f"{limit} bytes"


def read_bounded(stream: ByteStream, limit: int = MAX_ZIP_BYTES) -> bytes:
    """Reads the whole stream; raises ZipTooLarge once more than `limit` bytes arrived."""
    chunks: list[bytes] = []
    total = 0
    while True:
        # Never ask for more than one byte past the limit, so an endless stream costs nothing.
        chunk = stream.read(min(_CHUNK, limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > limit:
            raise ZipTooLarge(f"The zip is larger than {size_text(limit)}.")
        chunks.append(chunk)


def split_entry_name(name: str) -> Parts:
    """Splits an archive entry name into path parts; raises ArchiveUnsafe for unsafe names."""
    if not name:
        raise ArchiveUnsafe("An entry of the archive has an empty name.")
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ArchiveUnsafe(f"The entry {name!r} has a name that is not valid UTF-8.") from e
    if any(unicodedata.category(char) == "Cc" for char in name):
        raise ArchiveUnsafe(f"The entry {name!r} has a control character in its name.")
    if name.startswith(("/", "\\")) or _DRIVE.match(name):
        raise ArchiveUnsafe(f"The entry {name} has an absolute path.")
    if "\\" in name:
        raise ArchiveUnsafe(f"The entry {name} has a backslash in its name.")
    parts = tuple(name.removesuffix("/").split("/"))
    if any(part == "" for part in parts):
        raise ArchiveUnsafe(f"The entry {name} has an empty part in its path.")
    if any(part in (".", "..") for part in parts):
        raise ArchiveUnsafe(f"The entry {name} has a '.' or '..' part in its path.")
    too_long = any(len(part.encode("utf-8")) > _MAX_COMPONENT_BYTES for part in parts)
    if too_long or len(encoded) > _MAX_PATH_BYTES:
        raise ArchiveUnsafe(f"The entry {name[:80]}… has a name that is too long.")
    return parts


def is_junk(parts: Parts) -> bool:
    """True for the macOS metadata entries that are skipped silently."""
    return parts[0] in _JUNK_FOLDERS or parts[-1] in _JUNK_FILES


def _fold(parts: Parts) -> str:
    # NFC + casefold: names that differ only in case or Unicode form collide on macOS/Windows.
    return "/".join(unicodedata.normalize("NFC", part).casefold() for part in parts)


class Staging:
    """Checks the entries of one archive as they are declared: collisions, counts and sizes."""

    def __init__(
        self,
        *,
        subject: str = "The skill",
        max_files: int = MAX_FILES,
        max_file_bytes: int = MAX_FILE_BYTES,
        max_bytes: int = MAX_SKILL_BYTES,
        max_entries: int = MAX_ARCHIVE_ENTRIES,
    ) -> None:
        self.dirs: set[Parts] = set()
        self.sizes: dict[Parts, int] = {}
        self._names: dict[str, tuple[bool, Parts]] = {}
        self._explicit_dirs: set[Parts] = set()
        self._entries = 0
        self._total = 0
        self._subject = subject
        self._max_files = max_files
        self._max_file_bytes = max_file_bytes
        self._max_bytes = max_bytes
        self._max_entries = max_entries

    def add_dir(self, parts: Parts) -> None:
        """Records a folder entry."""
        self._count_entry()
        if parts in self._explicit_dirs:
            raise ArchiveUnsafe(f"The archive holds {'/'.join(parts)} twice.")
        self._explicit_dirs.add(parts)
        self._claim(parts, is_dir=True)

    def add_file(self, parts: Parts, size: int) -> None:
        """Records a regular file and its declared size; raises SkillTooLarge over a limit."""
        self._count_entry()
        name = "/".join(parts)
        if parts in self.sizes:
            raise ArchiveUnsafe(f"The archive holds {name} twice.")
        self._claim(parts, is_dir=False)
        if size > self._max_file_bytes:
            raise SkillTooLarge(
                f"{name} is larger than {size_text(self._max_file_bytes)} per file."
            )
        if len(self.sizes) >= self._max_files:
            raise SkillTooLarge(f"{self._subject} has more than {self._max_files} files.")
        self._total += size
        if self._total > self._max_bytes:
            raise SkillTooLarge(f"{self._subject} is larger than {size_text(self._max_bytes)}.")
        self.sizes[parts] = size

    def _count_entry(self) -> None:
        self._entries += 1
        if self._entries > self._max_entries:
            raise SkillTooLarge(f"The archive holds more than {self._max_entries} entries.")

    def _claim(self, parts: Parts, *, is_dir: bool) -> None:
        for depth in range(1, len(parts)):
            self._claim_one(parts[:depth], is_dir=True)
        self._claim_one(parts, is_dir=is_dir)

    def _claim_one(self, parts: Parts, *, is_dir: bool) -> None:
        key = _fold(parts)
        known = self._names.get(key)
        if known is None:
            self._names[key] = (is_dir, parts)
            if is_dir:
                self.dirs.add(parts)
            return
        known_is_dir, known_parts = known
        if known_parts != parts:
            first, second = "/".join(known_parts), "/".join(parts)
            raise ArchiveUnsafe(f"{first} and {second} differ only in case; both are refused.")
        if known_is_dir != is_dir:
            raise ArchiveUnsafe(f"{'/'.join(parts)} is both a file and a folder.")


def write_tree(
    dest: Path,
    dirs: Iterable[Parts],
    files: Mapping[Parts, bytes],
    *,
    dir_mode: int,
    file_mode: int,
) -> None:
    """Writes checked folders and files into `dest` (absent or empty); on failure it is emptied."""
    if dest.is_symlink():
        raise ValueError("The destination must not be a symbolic link.")
    if not dest.exists():
        _make_dir(dest, dir_mode)
    elif any(dest.iterdir()):
        raise ValueError("The destination folder must be empty.")
    try:
        # Sorted tuples put every folder before the folders and files inside it.
        for parts in sorted(set(dirs)):
            _make_dir(dest.joinpath(*parts), dir_mode)
        for parts, data in sorted(files.items()):
            _write_file(dest.joinpath(*parts), data, file_mode)
    except BaseException:
        _empty(dest)
        raise


def _make_dir(path: Path, mode: int) -> None:
    os.mkdir(path, 0o700)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchmod(fd, mode)  # chmod after mkdir: the umask must not decide the mode
    finally:
        os.close(fd)


def _write_file(path: Path, data: bytes, mode: int) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "wb") as out:
        os.fchmod(out.fileno(), mode)
        out.write(data)


def _empty(dest: Path) -> None:
    for child in dest.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def extract_zip(data: bytes, dest: Path) -> Path:
    """Checks every entry of a zip upload, writes the skill into the empty `dest`, returns its root.

    Files get mode 0644 and folders 0755. macOS metadata (`__MACOSX/`, `.DS_Store`) is skipped.
    """
    if len(data) > MAX_ZIP_BYTES:
        raise ZipTooLarge(f"The zip is larger than {size_text(MAX_ZIP_BYTES)}.")
    archive = open_zip(data)
    with archive:
        staging, entries = _stage_zip(archive)
        root = _skill_root(staging)
        files = {parts: read_zip_entry(archive, info, parts) for parts, info in entries.items()}
    write_tree(dest, staging.dirs, files, dir_mode=0o755, file_mode=0o644)
    return dest.joinpath(*root)


def open_zip(data: bytes) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(io.BytesIO(data))
    except UnicodeDecodeError as e:
        # zipfile decodes names flagged as UTF-8 while opening; bad bytes fail here.
        raise ArchiveUnsafe("An entry of the zip has a name that is not valid UTF-8.") from e
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError) as e:
        raise ArchiveUnsafe("The upload is not a zip archive.") from e


def _stage_zip(archive: zipfile.ZipFile) -> tuple[Staging, dict[Parts, zipfile.ZipInfo]]:
    staging = Staging()
    entries: dict[Parts, zipfile.ZipInfo] = {}
    for parts, info, is_dir in zip_entries(archive):
        if is_dir:
            staging.add_dir(parts)
        else:
            staging.add_file(parts, info.file_size)
            entries[parts] = info
    return staging, entries


def zip_entries(archive: zipfile.ZipFile) -> Iterator[tuple[Parts, zipfile.ZipInfo, bool]]:
    """Every entry but macOS metadata as (path parts, info, is a folder), each checked first.

    Raises ArchiveUnsafe for an unsafe name, a link, a device, an encrypted entry or a bomb.
    """
    for info in archive.infolist():
        name = zip_entry_name(info)
        parts = split_entry_name(name)
        if is_junk(parts):
            continue
        is_dir = zip_entry_is_dir(info, name)
        if not is_dir:
            check_zip_file(info, name)
        yield parts, info, is_dir


def zip_entry_name(info: zipfile.ZipInfo) -> str:
    # orig_filename keeps what zipfile cuts at a NUL byte, so control characters stay visible.
    name = info.orig_filename
    if info.flag_bits & _UTF8_NAME_FLAG:
        return name
    raw = name.encode("cp437")  # zipfile decoded the unflagged bytes as cp437; this undoes it
    if raw.isascii():
        return name
    try:
        # macOS Archive Utility writes UTF-8 names without the flag; accept real UTF-8 only.
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ArchiveUnsafe(f"The entry {raw!r} has a name that is not valid UTF-8.") from e


def zip_entry_is_dir(info: zipfile.ZipInfo, name: str) -> bool:
    file_type = stat.S_IFMT(info.external_attr >> 16)
    named_dir = name.endswith("/")
    if file_type == stat.S_IFLNK:
        raise ArchiveUnsafe(f"The entry {name} is a symbolic link; links are refused.")
    if file_type not in (0, stat.S_IFREG, stat.S_IFDIR):
        raise ArchiveUnsafe(
            f"The entry {name} is a device, pipe or socket; only files are allowed."
        )
    if file_type and (file_type == stat.S_IFDIR) != named_dir:
        raise ArchiveUnsafe(f"The entry {name} is marked as both a file and a folder.")
    if named_dir and info.file_size:
        raise ArchiveUnsafe(f"The folder entry {name} carries data.")
    return named_dir


def check_zip_file(info: zipfile.ZipInfo, name: str) -> None:
    if info.flag_bits & _ENCRYPTED_FLAG:
        raise ArchiveUnsafe(f"The entry {name} is encrypted; encrypted zips are refused.")
    # Every file over the per-file limit is refused anyway; a ratio no honest file has marks it
    # as a bomb rather than a large file. Smaller entries stay bounded by the size limits and by
    # counting their real bytes.
    ratio = info.file_size / max(info.compress_size, 1)
    if info.file_size > MAX_FILE_BYTES and ratio > MAX_COMPRESSION_RATIO:
        raise ArchiveUnsafe(
            f"The entry {name} looks like a compression bomb: it expands {int(ratio)} times."
        )


def _skill_root(staging: Staging) -> Parts:
    if (SKILL_FILE,) in staging.sizes:
        return ()
    tops = {parts[0] for parts in staging.sizes} | {parts[0] for parts in staging.dirs}
    if len(tops) == 1:
        (top,) = tops
        if (top, SKILL_FILE) in staging.sizes:
            return (top,)
    raise SkillInvalid(LAYOUT_MESSAGE, errors=[LAYOUT_MESSAGE])


def read_zip_entry(archive: zipfile.ZipFile, info: zipfile.ZipInfo, parts: Parts) -> bytes:
    name = "/".join(parts)
    declared = info.file_size
    chunks: list[bytes] = []
    total = 0
    try:
        with archive.open(info) as src:
            while chunk := src.read(min(_CHUNK, declared + 1 - total)):
                total += len(chunk)
                if total > declared:
                    raise ArchiveUnsafe(f"The entry {name} holds more data than its header says.")
                chunks.append(chunk)
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as e:
        # zipfile stops at the declared size, so a lying header ends in a checksum error here.
        raise ArchiveUnsafe(f"The entry {name} does not match its header.") from e
    except (NotImplementedError, RuntimeError) as e:
        raise ArchiveUnsafe(f"The entry {name} uses a compression this store can't read.") from e
    if total != declared:
        raise ArchiveUnsafe(f"The entry {name} holds less data than its header says.")
    return b"".join(chunks)

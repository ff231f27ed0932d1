"""Skill packages: the deterministic `.tar.gz` a node downloads, and its safe unpacking."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import tarfile
import zlib
from pathlib import Path

from store.archive import Parts, Staging, split_entry_name, write_tree
from store.errors import ArchiveUnsafe
from store.limits import KIB, MAX_ARCHIVE_ENTRIES, MAX_SKILL_BYTES

_DIR_MODE = 0o755
_FILE_MODE = 0o644
_CACHE_DIR_MODE = 0o700
_CACHE_FILE_MODE = 0o600
# A tar holds its data plus a header, padding and perhaps a PAX header per entry, and an end mark.
_MAX_TAR_BYTES = MAX_SKILL_BYTES + MAX_ARCHIVE_ENTRIES * 4 * KIB + 20 * KIB
_FILE_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE)
_LINK_TYPES = (tarfile.SYMTYPE, tarfile.LNKTYPE)


def build_package(root: Path) -> bytes:
    """Packs the regular files of a skill folder into a `.tar.gz` that depends only on content.

    Entries are sorted by POSIX path, folders are those holding files, owners and times are
    zero and modes are 0755/0644, so the same files always give the same bytes.
    """
    files = _regular_files(root)
    dirs = {"/".join(parts[:depth]) for parts in files for depth in range(1, len(parts))}
    names = sorted(dirs | {"/".join(parts) for parts in files})
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8") as tar:
            for name in names:
                if name in dirs:
                    tar.addfile(_tar_info(name, tarfile.DIRTYPE, _DIR_MODE, 0))
                else:
                    data = _read_regular(root / name)
                    info = _tar_info(name, tarfile.REGTYPE, _FILE_MODE, len(data))
                    tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _regular_files(root: Path) -> list[Parts]:
    found: list[Parts] = []
    # os.walk does not descend into linked folders; linked files are skipped by the lstat check.
    for folder, _dirnames, filenames in os.walk(root):
        base = Path(folder).relative_to(root).parts
        for filename in filenames:
            if stat.S_ISREG(os.lstat(os.path.join(folder, filename)).st_mode):
                found.append((*base, filename))
    return found


def _read_regular(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as src:
        return src.read()


def _tar_info(name: str, kind: bytes, mode: int, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.size = size
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def extract_package(data: bytes, dest: Path, expected_sha256: str) -> None:
    """Checks a package's SHA-256, then unpacks it into `dest` (absent or empty) safely.

    Same refusals as an import. Folders get mode 0700 and files 0600 (never an exec bit);
    a refused package leaves `dest` empty.
    """
    if hashlib.sha256(data).hexdigest() != expected_sha256.strip().lower():
        raise ArchiveUnsafe("The package's SHA-256 does not match the manifest.")
    tar_bytes = _gunzip_bounded(data)
    try:
        with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:", encoding="utf-8") as tar:
            staging, members = _stage_tar(tar, dest)
            files = {parts: _read_member(tar, member, parts) for parts, member in members.items()}
    except (tarfile.TarError, EOFError, OSError, ValueError) as e:
        raise ArchiveUnsafe("The package is not a readable tar.gz archive.") from e
    write_tree(dest, staging.dirs, files, dir_mode=_CACHE_DIR_MODE, file_mode=_CACHE_FILE_MODE)


def _gunzip_bounded(data: bytes) -> bytes:
    # Inflate with a cap first, so a gzip bomb costs a few MiB instead of all memory.
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        tar_bytes = inflater.decompress(data, _MAX_TAR_BYTES + 1)
    except zlib.error as e:
        raise ArchiveUnsafe("The package is not a readable tar.gz archive.") from e
    if len(tar_bytes) > _MAX_TAR_BYTES or inflater.unconsumed_tail:
        raise ArchiveUnsafe("The package expands to more than a skill may hold.")
    if not inflater.eof or inflater.unused_data:
        raise ArchiveUnsafe("The package is not a readable tar.gz archive.")
    return tar_bytes


def _stage_tar(tar: tarfile.TarFile, dest: Path) -> tuple[Staging, dict[Parts, tarfile.TarInfo]]:
    staging = Staging()
    members: dict[Parts, tarfile.TarInfo] = {}
    # Iterate with next() so a tar with endless members stops at the entry limit (Staging).
    while (member := tar.next()) is not None:
        parts = split_entry_name(member.name)
        _check_member_type(member)
        _check_with_data_filter(member, dest)
        if member.type == tarfile.DIRTYPE:
            staging.add_dir(parts)
        else:
            staging.add_file(parts, member.size)
            members[parts] = member
    return staging, members


def _check_member_type(member: tarfile.TarInfo) -> None:
    if member.type in _FILE_TYPES or member.type == tarfile.DIRTYPE:
        return
    if member.type in _LINK_TYPES:
        raise ArchiveUnsafe(f"The entry {member.name} is a link; links are refused.")
    raise ArchiveUnsafe(f"The entry {member.name} is a device, pipe or special entry; refused.")


def _check_with_data_filter(member: tarfile.TarInfo, dest: Path) -> None:
    # A second opinion from the standard library's own rules for untrusted tars. CPython before
    # 3.11.4 (Debian bookworm's python3 is 3.11.2) has none; the checks above are the rule.
    data_filter = getattr(tarfile, "data_filter", None)
    if data_filter is None:
        return
    try:
        data_filter(member, str(dest))
    except tarfile.FilterError as e:
        raise ArchiveUnsafe(f"The entry {member.name} is refused: {e}") from e


def _read_member(tar: tarfile.TarFile, member: tarfile.TarInfo, parts: Parts) -> bytes:
    source = tar.extractfile(member)
    if source is None:
        raise ArchiveUnsafe(f"The entry {'/'.join(parts)} can't be read as a file.")
    with source:
        data = source.read(member.size + 1)
    if len(data) != member.size:
        raise ArchiveUnsafe(f"The entry {'/'.join(parts)} does not hold the size its header says.")
    return data

"""Skill packages: deterministic builds, safe unpacking, hostile tars refused leaving nothing."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from store.errors import ArchiveUnsafe, SkillTooLarge, StoreError
from store.limits import MAX_ARCHIVE_ENTRIES, MIB
from store.packages import build_package, extract_package

SKILL_MD = b"---\nname: demo\ndescription: A demo skill.\n---\nHello.\n"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def skill(tmp_path: Path) -> Path:
    root = tmp_path / "demo"
    (root / "scripts").mkdir(parents=True)
    (root / "references" / "deep").mkdir(parents=True)
    (root / "SKILL.md").write_bytes(SKILL_MD)
    (root / "scripts" / "run.sh").write_bytes(b"#!/bin/sh\necho hi\n")
    (root / "scripts" / "run.sh").chmod(0o755)
    (root / "references" / "deep" / "notes-é.md").write_bytes(b"notes\n")
    (root / "a-b.txt").write_bytes(b"sorts between a and a/\n")
    return root


def files_of(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def make_tar(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return buffer.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, **fields: object) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    for key, value in fields.items():
        setattr(info, key, value)
    return info


def assert_refused(data: bytes, dest: Path, error: type[StoreError], *words: str) -> None:
    with pytest.raises(error) as caught:
        extract_package(data, dest, sha256(data))
    for word in words:
        assert word in caught.value.message
    assert not dest.exists() or list(dest.iterdir()) == [], "nothing may be left behind"


def test_building_the_same_folder_twice_gives_identical_bytes(skill: Path) -> None:
    assert build_package(skill) == build_package(skill)


def test_package_bytes_do_not_change_with_mtimes_or_modes(skill: Path) -> None:
    before = build_package(skill)
    for path in skill.rglob("*"):
        os.utime(path, (1_700_000_000, 1_700_000_000))
    (skill / "SKILL.md").chmod(0o600)
    assert build_package(skill) == before


def test_package_changes_when_a_file_changes(skill: Path) -> None:
    before = build_package(skill)
    (skill / "SKILL.md").write_bytes(SKILL_MD + b"more\n")
    assert build_package(skill) != before


def test_package_is_a_gzip_with_zero_mtime_and_no_file_name(skill: Path) -> None:
    data = build_package(skill)
    assert data[:2] == b"\x1f\x8b"
    assert data[4:8] == b"\0\0\0\0"  # gzip header mtime
    assert not data[3] & 0x08  # FNAME flag: no file name stored


def test_package_entries_are_sorted_normalised_and_hold_only_regular_files(skill: Path) -> None:
    (skill / "empty").mkdir()
    os.symlink("SKILL.md", skill / "link.md")
    with tarfile.open(fileobj=io.BytesIO(build_package(skill)), mode="r:gz") as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == [
        "SKILL.md",
        "a-b.txt",
        "references",
        "references/deep",
        "references/deep/notes-é.md",
        "scripts",
        "scripts/run.sh",
    ]
    for info in members:
        assert (info.mtime, info.uid, info.gid, info.uname, info.gname) == (0, 0, 0, "", "")
        assert info.mode == (0o755 if info.isdir() else 0o644)


def test_package_round_trip_reproduces_every_file(skill: Path, tmp_path: Path) -> None:
    data = build_package(skill)
    dest = tmp_path / "demo@abc"
    extract_package(data, dest, sha256(data))
    assert files_of(dest) == files_of(skill)


def test_unpacked_package_has_private_modes_and_no_exec_bit(skill: Path, tmp_path: Path) -> None:
    data = build_package(skill)
    dest = tmp_path / "unpacked"
    extract_package(data, dest, sha256(data))
    assert stat.S_IMODE(dest.stat().st_mode) == 0o700
    for path in dest.rglob("*"):
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), path
    assert not os.access(dest / "scripts" / "run.sh", os.X_OK)


def test_package_with_wrong_sha256_is_refused_before_unpacking(skill: Path, tmp_path: Path) -> None:
    data = build_package(skill)
    dest = tmp_path / "unpacked"
    with pytest.raises(ArchiveUnsafe) as caught:
        extract_package(data, dest, sha256(data + b"x"))
    assert caught.value.code == "archive_unsafe"
    assert caught.value.message == "The package's SHA-256 does not match the manifest."
    assert not dest.exists()


def test_package_sha256_is_compared_case_insensitively(skill: Path, tmp_path: Path) -> None:
    data = build_package(skill)
    extract_package(data, tmp_path / "unpacked", sha256(data).upper())
    assert (tmp_path / "unpacked" / "SKILL.md").read_bytes() == SKILL_MD


def test_bytes_that_are_not_a_tar_gz_are_refused(tmp_path: Path) -> None:
    assert_refused(b"not a package", tmp_path / "d", ArchiveUnsafe, "not a readable tar.gz")
    plain = gzip.compress(b"not a tar either" * 100)
    assert_refused(plain, tmp_path / "d", ArchiveUnsafe, "not a readable tar.gz")


Hostile = tuple[Callable[[], tarfile.TarInfo], str]

HOSTILE: dict[str, Hostile] = {
    "symlink": (lambda: member("link", tarfile.SYMTYPE, linkname="/etc/passwd"), "link"),
    "hardlink": (lambda: member("hard", tarfile.LNKTYPE, linkname="SKILL.md"), "link"),
    "parent path": (lambda: member("../escape.txt"), "'..'"),
    "nested parent path": (lambda: member("scripts/../../escape.txt"), "'..'"),
    "absolute path": (lambda: member("/etc/cron.d/evil"), "absolute"),
    "char device": (lambda: member("dev", tarfile.CHRTYPE, devmajor=1, devminor=3), "device"),
    "block device": (lambda: member("blk", tarfile.BLKTYPE, devmajor=8, devminor=0), "device"),
    "fifo": (lambda: member("pipe", tarfile.FIFOTYPE), "pipe"),
    "backslash": (lambda: member("scripts\\evil.sh"), "backslash"),
    "control character": (lambda: member("evil\x07.txt"), "control character"),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_package_with_hostile_member_is_refused_and_nothing_written(
    tmp_path: Path, kind: str
) -> None:
    make_member, word = HOSTILE[kind]
    data = make_tar((member("SKILL.md"), SKILL_MD), (make_member(), b"evil"))
    assert_refused(data, tmp_path / "dest", ArchiveUnsafe, word)


def test_package_with_duplicate_member_is_refused(tmp_path: Path) -> None:
    data = make_tar((member("SKILL.md"), SKILL_MD), (member("SKILL.md"), b"second"))
    assert_refused(data, tmp_path / "dest", ArchiveUnsafe, "SKILL.md", "twice")


def test_package_with_case_colliding_members_is_refused(tmp_path: Path) -> None:
    data = make_tar((member("SKILL.md"), SKILL_MD), (member("skill.md"), b"other"))
    assert_refused(data, tmp_path / "dest", ArchiveUnsafe, "differ only in case")


def test_package_member_over_one_mib_is_refused(tmp_path: Path) -> None:
    data = make_tar((member("SKILL.md"), SKILL_MD), (member("big.bin"), b"\0" * (MIB + 1)))
    assert_refused(data, tmp_path / "dest", SkillTooLarge, "big.bin", "1 MiB")


def test_package_with_too_many_members_is_refused(tmp_path: Path) -> None:
    members = [(member(f"d{i}", tarfile.DIRTYPE), b"") for i in range(MAX_ARCHIVE_ENTRIES + 1)]
    data = make_tar((member("SKILL.md"), SKILL_MD), *members)
    assert_refused(data, tmp_path / "dest", SkillTooLarge, "entries")


def test_gzip_bomb_package_is_refused_without_inflating_it_all(tmp_path: Path) -> None:
    data = gzip.compress(b"\0" * (64 * MIB))
    assert len(data) < MIB
    assert_refused(data, tmp_path / "dest", ArchiveUnsafe, "expands")


def test_refused_package_leaves_an_existing_empty_dest_empty(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    data = make_tar((member("SKILL.md"), SKILL_MD), (member("link", tarfile.SYMTYPE), b""))
    assert_refused(data, dest, ArchiveUnsafe, "link")
    assert dest.is_dir()

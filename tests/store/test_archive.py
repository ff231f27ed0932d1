"""Zip import: bounded reads, hostile entries refused with nothing written, honest zips unpacked."""

from __future__ import annotations

import io
import random
import stat
import struct
import warnings
import zipfile
from pathlib import Path

import pytest

from store.archive import extract_zip, read_bounded
from store.errors import ArchiveUnsafe, SkillInvalid, SkillTooLarge, StoreError, ZipTooLarge
from store.limits import MAX_ARCHIVE_ENTRIES, MAX_FILES, MAX_ZIP_BYTES, MIB

SKILL_MD = b"---\nname: demo\ndescription: A demo skill.\n---\nHello.\n"

Entry = tuple[str | zipfile.ZipInfo, bytes]


def make_zip(entries: list[Entry], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about duplicate names; we want them
        with zipfile.ZipFile(buffer, "w", compression=method) as archive:
            for name, data in entries:
                archive.writestr(name, data)
    return buffer.getvalue()


def unix_entry(name: str, mode: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.create_system = 3  # Unix, so external_attr carries a file mode
    info.external_attr = mode << 16
    return info


def text_of(size: int) -> bytes:
    """Honest text that compresses like real files (a ratio far below any bomb)."""
    return random.Random(size).randbytes(size // 2 + 1).hex().encode()[:size]


def patch_headers(data: bytes, name: str, *, size: int | None = None, flags: int = 0) -> bytes:
    """Rewrites an entry's uncompressed size and/or sets flag bits, in local and central headers."""
    patched = bytearray(data)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        local = archive.getinfo(name).header_offset
    central = patched.find(b"PK\x01\x02")
    while central >= 0:
        name_length = struct.unpack_from("<H", patched, central + 28)[0]
        if patched[central + 46 : central + 46 + name_length] == name.encode():
            break
        central = patched.find(b"PK\x01\x02", central + 4)
    for flags_at, size_at in ((local + 6, local + 22), (central + 8, central + 24)):
        old_flags = struct.unpack_from("<H", patched, flags_at)[0]
        struct.pack_into("<H", patched, flags_at, old_flags | flags)
        if size is not None:
            struct.pack_into("<I", patched, size_at, size)
    return bytes(patched)


def assert_refused(
    data: bytes, dest: Path, error: type[StoreError], code: str, *words: str
) -> StoreError:
    with pytest.raises(error) as caught:
        extract_zip(data, dest)
    assert caught.value.code == code
    for word in words:
        assert word in caught.value.message
    assert list(dest.iterdir()) == [], "a refused zip must leave nothing behind"
    return caught.value


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    staging = tmp_path / "staging"
    staging.mkdir()
    return staging


class EndlessStream:
    """A stream that never ends; it counts what it handed out."""

    def __init__(self) -> None:
        self.served = 0

    def read(self, size: int = -1, /) -> bytes:
        chunk = b"z" * (size if size > 0 else 1 << 20)
        self.served += len(chunk)
        return chunk


def test_bounded_read_returns_a_small_stream_whole() -> None:
    assert read_bounded(io.BytesIO(b"abc" * 1000)) == b"abc" * 1000


def test_bounded_read_accepts_exactly_the_limit() -> None:
    assert len(read_bounded(io.BytesIO(b"x" * MAX_ZIP_BYTES))) == MAX_ZIP_BYTES


def test_bounded_read_refuses_a_stream_over_five_mib() -> None:
    with pytest.raises(ZipTooLarge) as caught:
        read_bounded(io.BytesIO(b"x" * (MAX_ZIP_BYTES + 1)))
    assert caught.value.code == "zip_too_large"
    assert caught.value.message == "The zip is larger than 5 MiB."


def test_bounded_read_stops_an_endless_stream_just_past_the_limit() -> None:
    stream = EndlessStream()
    with pytest.raises(ZipTooLarge):
        read_bounded(stream)
    assert stream.served == MAX_ZIP_BYTES + 1


def test_zip_with_skill_at_root_is_unpacked_into_dest(dest: Path) -> None:
    data = make_zip([("SKILL.md", SKILL_MD), ("scripts/run.py", b"print('hi')\n")])
    assert extract_zip(data, dest) == dest
    assert (dest / "SKILL.md").read_bytes() == SKILL_MD
    assert (dest / "scripts" / "run.py").read_bytes() == b"print('hi')\n"


def test_zip_with_one_top_folder_returns_that_folder(dest: Path) -> None:
    data = make_zip([("demo/", b""), ("demo/SKILL.md", SKILL_MD), ("demo/a/b/c.txt", b"c")])
    root = extract_zip(data, dest)
    assert root == dest / "demo"
    assert (root / "a" / "b" / "c.txt").read_bytes() == b"c"


def test_unpacked_files_are_0644_and_folders_0755_even_if_the_zip_says_otherwise(
    dest: Path,
) -> None:
    data = make_zip(
        [
            (unix_entry("SKILL.md", stat.S_IFREG | 0o777), SKILL_MD),
            (unix_entry("scripts/", stat.S_IFDIR | 0o777), b""),
            (unix_entry("scripts/run.sh", stat.S_IFREG | 0o4755), b"echo hi\n"),
        ]
    )
    extract_zip(data, dest)
    assert stat.S_IMODE((dest / "SKILL.md").stat().st_mode) == 0o644
    assert stat.S_IMODE((dest / "scripts" / "run.sh").stat().st_mode) == 0o644
    assert stat.S_IMODE((dest / "scripts").stat().st_mode) == 0o755


def test_macos_metadata_is_skipped_silently(dest: Path) -> None:
    data = make_zip(
        [
            ("demo/SKILL.md", SKILL_MD),
            ("demo/.DS_Store", b"junk"),
            ("__MACOSX/demo/._SKILL.md", b"junk"),
        ]
    )
    root = extract_zip(data, dest)
    assert sorted(p.name for p in dest.rglob("*")) == ["SKILL.md", "demo"]
    assert root == dest / "demo"


def test_utf8_names_without_the_utf8_flag_are_read_as_utf8(dest: Path) -> None:
    # macOS Archive Utility writes UTF-8 names without setting flag bit 11.
    data = make_zip([("SKILL.md", SKILL_MD), ("notes-XX.md", b"n")])
    data = data.replace(b"notes-XX.md", "notes-é.md".encode())
    extract_zip(data, dest)
    assert (dest / "notes-é.md").read_bytes() == b"n"


def test_bytes_that_are_not_a_zip_are_refused(dest: Path) -> None:
    assert_refused(b"not a zip at all", dest, ArchiveUnsafe, "archive_unsafe", "not a zip")


def test_zip_data_over_five_mib_is_refused(dest: Path) -> None:
    assert_refused(b"\0" * (MAX_ZIP_BYTES + 1), dest, ZipTooLarge, "zip_too_large", "5 MiB")


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("../x", ("../x", "'..'")),
        ("demo/../../x", ("demo/../../x", "'..'")),
        ("/etc/x", ("/etc/x", "absolute")),
        ("C:\\x", ("absolute",)),
        ("\\\\server\\x", ("absolute",)),
        ("demo\\x", ("demo\\x", "backslash")),
        ("demo//x", ("demo//x", "empty part")),
        ("demo/./x", ("'.'",)),
        ("demo/\x1bx", ("control character",)),
    ],
)
def test_zip_with_unsafe_entry_name_is_refused_and_nothing_written(
    dest: Path, name: str, words: tuple[str, ...]
) -> None:
    data = make_zip([("demo/SKILL.md", SKILL_MD), (name, b"evil")])
    assert_refused(data, dest, ArchiveUnsafe, "archive_unsafe", *words)


def test_zip_with_nul_byte_in_a_name_is_refused(dest: Path) -> None:
    data = make_zip([("SKILL.md", SKILL_MD), ("evilXname", b"evil")])
    data = data.replace(b"evilXname", b"evil\0name")
    assert_refused(data, dest, ArchiveUnsafe, "archive_unsafe", "control character")


def test_zip_with_non_utf8_name_is_refused(dest: Path) -> None:
    data = make_zip([("SKILL.md", SKILL_MD), ("cafX.md", b"latin-1")])
    data = data.replace(b"cafX.md", b"caf\xe9.md")
    assert_refused(data, dest, ArchiveUnsafe, "archive_unsafe", "not valid UTF-8")


@pytest.mark.parametrize(
    ("mode", "words"),
    [
        (stat.S_IFLNK | 0o777, ("symbolic link",)),
        (stat.S_IFCHR | 0o644, ("device",)),
        (stat.S_IFBLK | 0o644, ("device",)),
        (stat.S_IFIFO | 0o644, ("pipe",)),
        (stat.S_IFSOCK | 0o644, ("socket",)),
    ],
)
def test_zip_with_link_or_device_entry_is_refused_and_nothing_written(
    dest: Path, mode: int, words: tuple[str, ...]
) -> None:
    data = make_zip([("SKILL.md", SKILL_MD), (unix_entry("special", mode), b"/etc/passwd")])
    assert_refused(data, dest, ArchiveUnsafe, "archive_unsafe", "special", *words)


def test_zip_with_duplicate_entry_is_refused(dest: Path) -> None:
    data = make_zip([("SKILL.md", SKILL_MD), ("a.txt", b"one"), ("a.txt", b"two")])
    assert_refused(data, dest, ArchiveUnsafe, "archive_unsafe", "a.txt", "twice")


@pytest.mark.parametrize(
    ("first", "second"),
    [("README.md", "readme.md"), ("Scripts/a.py", "scripts/b.py"), ("café", "cafe\u0301")],
)
def test_zip_with_names_differing_only_in_case_is_refused(
    dest: Path, first: str, second: str
) -> None:
    data = make_zip([("SKILL.md", SKILL_MD), (first, b"1"), (second, b"2")])
    assert_refused(data, dest, ArchiveUnsafe, "archive_unsafe", "differ only in case")


def test_zip_with_a_name_that_is_both_file_and_folder_is_refused(dest: Path) -> None:
    data = make_zip([("SKILL.md", SKILL_MD), ("a", b"file"), ("a/b", b"inside")])
    assert_refused(data, dest, ArchiveUnsafe, "archive_unsafe", "both a file and a folder")


def test_encrypted_zip_entry_is_refused(dest: Path) -> None:
    data = make_zip([("SKILL.md", SKILL_MD), ("secret.txt", b"not really encrypted")])
    data = patch_headers(data, "secret.txt", flags=0x1)
    assert_refused(data, dest, ArchiveUnsafe, "archive_unsafe", "secret.txt", "encrypted")


def test_compression_bomb_is_refused_before_anything_is_inflated(dest: Path) -> None:
    data = make_zip([("SKILL.md", SKILL_MD), ("zeros.bin", b"\0" * (6 * MIB))])
    assert len(data) < 64 * 1024
    assert_refused(data, dest, ArchiveUnsafe, "archive_unsafe", "zeros.bin", "compression bomb")


def test_entry_yielding_more_than_its_header_declares_is_refused(dest: Path) -> None:
    data = make_zip([("SKILL.md", SKILL_MD), ("liar.txt", text_of(200_000))])
    data = patch_headers(data, "liar.txt", size=1000)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.getinfo("liar.txt").file_size == 1000
    assert_refused(data, dest, ArchiveUnsafe, "archive_unsafe", "liar.txt", "header")


def test_file_over_one_mib_is_refused_naming_the_limit(dest: Path) -> None:
    data = make_zip([("SKILL.md", SKILL_MD), ("big.txt", text_of(MIB + 1))])
    assert_refused(data, dest, SkillTooLarge, "skill_too_large", "big.txt", "1 MiB")


def test_skill_over_five_mib_in_total_is_refused_naming_the_limit(dest: Path) -> None:
    entries: list[Entry] = [("SKILL.md", SKILL_MD)]
    entries += [(f"part{i}.txt", text_of(MIB)) for i in range(6)]
    assert_refused(make_zip(entries), dest, SkillTooLarge, "skill_too_large", "5 MiB")


def test_skill_with_more_than_two_hundred_files_is_refused(dest: Path) -> None:
    entries: list[Entry] = [("SKILL.md", SKILL_MD)]
    entries += [(f"f{i}.txt", b"x") for i in range(MAX_FILES)]
    assert_refused(make_zip(entries), dest, SkillTooLarge, "skill_too_large", "200 files")


def test_zip_with_too_many_entries_is_refused(dest: Path) -> None:
    entries: list[Entry] = [("SKILL.md", SKILL_MD)]
    entries += [(f"d{i}/", b"") for i in range(MAX_ARCHIVE_ENTRIES)]
    assert_refused(make_zip(entries), dest, SkillTooLarge, "skill_too_large", "entries")


@pytest.mark.parametrize(
    "names",
    [
        ["one/SKILL.md", "two/SKILL.md"],
        ["demo/SKILL.md", "stray.txt"],
        ["demo/nested/SKILL.md"],
        ["README.md"],
        [],
    ],
)
def test_zip_without_a_skill_at_root_or_in_one_top_folder_is_invalid(
    dest: Path, names: list[str]
) -> None:
    data = make_zip([(name, SKILL_MD) for name in names])
    error = assert_refused(data, dest, SkillInvalid, "skill_invalid", "root or in one top folder")
    assert error.errors == ["The zip must hold a skill at its root or in one top folder."]

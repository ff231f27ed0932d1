"""Every refused import answers its code and leaves the store and the database unchanged."""

from __future__ import annotations

import io
import random
import stat
import struct
import zipfile

import pytest
from factories import skill_files, skill_md, skill_zip, store_snapshot, zip_bytes

SKILL = skill_files("disk-report")


def entry(name: str, mode: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = mode << 16
    info.create_system = 3
    return info


def with_entries(*extra: tuple[zipfile.ZipInfo | str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for rel, data in SKILL.items():
            archive.writestr(f"disk-report/{rel}", data)
        for info, data in extra:
            archive.writestr(info, data)
    return buffer.getvalue()


def non_utf8_name() -> bytes:
    data = with_entries(("disk-report/placeholder-x.md", b"x"))
    # Rewrite the name's bytes to Latin-1 "é" (0xE9) without the UTF-8 flag.
    return data.replace(b"placeholder-x", b"placeholder\xe9")


def lying_header() -> bytes:
    """An entry whose headers declare 10 bytes but whose data inflates to 600 KiB."""
    big = b"A" * (600 * 1024)
    data = with_entries(("disk-report/assets/blob.bin", big))
    declared = struct.pack("<I", 10)
    real = struct.pack("<I", len(big))
    return data.replace(real, declared)


HOSTILE = {
    "absolute path": lambda: with_entries(("/etc/cron.d/evil", b"x")),
    "parent path": lambda: with_entries(("disk-report/../../evil.py", b"x")),
    "symlink": lambda: with_entries((entry("disk-report/link", stat.S_IFLNK | 0o777), b"/etc")),
    "fifo": lambda: with_entries((entry("disk-report/fifo", stat.S_IFIFO | 0o644), b"")),
    "device": lambda: with_entries((entry("disk-report/dev", stat.S_IFCHR | 0o644), b"")),
    "duplicate": lambda: with_entries(("disk-report/SKILL.md", SKILL["SKILL.md"])),
    "case collision": lambda: with_entries(("disk-report/skill.md", b"x")),
    "non-utf8 name": non_utf8_name,
    "lying header": lying_header,
}


def post_zip(client, auth, data: bytes, query: str = ""):
    return client.post(
        f"/api/skills{query}",
        headers=auth,
        data={"file": (io.BytesIO(data), "skill.zip")},
        content_type="multipart/form-data",
    )


@pytest.fixture
def before(client, auth, services):
    """The store with one skill already installed, and its snapshot."""
    assert post_zip(client, auth, skill_zip("existing")).status_code == 201
    return store_snapshot(services.settings.skills_dir, services.sessions)


def assert_unchanged(services, before) -> None:
    assert store_snapshot(services.settings.skills_dir, services.sessions) == before


@pytest.mark.filterwarnings("ignore:Duplicate name")
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_archive_is_refused_as_unsafe_and_store_unchanged(
    client, auth, services, before, case
):
    response = post_zip(client, auth, HOSTILE[case]())
    assert response.status_code == 422, response.json
    assert response.json["code"] == "archive_unsafe"
    assert response.json["message"]
    assert_unchanged(services, before)


def test_compression_bomb_is_refused_and_store_unchanged(client, auth, services, before):
    data = with_entries(("disk-report/assets/zeros.bin", b"\0" * (64 * 1024 * 1024)))
    assert len(data) < 200 * 1024
    response = post_zip(client, auth, data)
    assert response.status_code == 422, response.json
    assert response.json["code"] == "archive_unsafe"
    assert "compression bomb" in response.json["message"]
    assert_unchanged(services, before)


def test_zip_over_five_mib_is_refused_as_too_large_and_store_unchanged(
    client, auth, services, before
):
    response = post_zip(client, auth, b"PK" + b"\0" * (5 * 1024 * 1024 + 10))
    assert response.status_code == 413
    assert response.json["code"] == "zip_too_large"
    assert "5 MiB" in response.json["message"]
    assert_unchanged(services, before)


def test_skill_over_a_limit_is_refused_naming_the_limit_and_store_unchanged(
    client, auth, services, before
):
    files = dict(SKILL)
    files["assets/big.bin"] = random.Random(0).randbytes(1024 * 1024 + 1)
    response = post_zip(client, auth, zip_bytes(files, top="disk-report"))
    assert response.status_code == 413, response.json
    assert response.json["code"] == "skill_too_large"
    assert "1 MiB" in response.json["message"]
    assert_unchanged(services, before)


def test_invalid_header_is_refused_with_every_problem_and_store_unchanged(
    client, auth, services, before
):
    # Unknown keys and display-style names are only warnings now; these problems remain.
    files = dict(SKILL)
    files["SKILL.md"] = (
        b"---\nname: Disk_Report\ndescription: ''\ncolour: blue\nmetadata:\n"
        b"  skillfleet.tier: admin\n  skillfleet.execution: gpu\n---\n"
    )
    response = post_zip(client, auth, zip_bytes(files, top="Disk_Report"))
    assert response.status_code == 422, response.json
    assert response.json["code"] == "skill_invalid"
    errors = response.json["errors"]
    assert len(errors) >= 3
    assert any("skillfleet.tier" in e for e in errors)
    assert any("skillfleet.execution" in e for e in errors)
    assert any("description" in e.lower() for e in errors)
    assert_unchanged(services, before)


def test_a_name_no_valid_name_can_be_made_from_is_refused_and_store_unchanged(
    client, auth, services, before
):
    files = dict(SKILL)
    files["SKILL.md"] = skill_md("数据工具").encode()
    response = post_zip(client, auth, zip_bytes(files))
    assert response.status_code == 422
    assert response.json["code"] == "skill_invalid"
    assert any("--name" in e for e in response.json["errors"])
    assert_unchanged(services, before)


def test_script_with_a_syntax_error_is_refused_before_saving(client, auth, services, before):
    files = dict(SKILL)
    files["scripts/broken.py"] = b"def broken(:\n"
    response = post_zip(client, auth, zip_bytes(files, top="disk-report"))
    assert response.status_code == 422
    assert any("scripts/broken.py" in e for e in response.json["errors"])
    assert_unchanged(services, before)


def test_existing_name_is_refused_with_409_and_store_unchanged(client, auth, services, before):
    response = post_zip(client, auth, skill_zip("existing"))
    assert response.status_code == 409
    assert response.json["code"] == "skill_exists"
    assert_unchanged(services, before)


def test_replacing_a_builtin_is_refused_with_403_and_store_unchanged(
    client, auth, services, before
):
    response = post_zip(client, auth, skill_zip("skill-authoring"), "?replace=true")
    assert response.status_code == 403
    assert response.json["code"] == "skill_builtin"
    assert_unchanged(services, before)


def test_zip_with_no_skill_md_anywhere_is_refused_and_store_unchanged(
    client, auth, services, before
):
    data = zip_bytes({"a/README.md": b"# a\n", "b/notes.md": b"# b\n"})
    response = post_zip(client, auth, data)
    assert response.status_code == 422
    assert response.json["code"] == "skill_invalid"
    assert_unchanged(services, before)


def test_a_derived_name_taken_by_a_skill_is_refused_with_409_naming_both(
    client, auth, services, before
):
    files = dict(SKILL)
    files["SKILL.md"] = skill_md("Existing").encode()
    response = post_zip(client, auth, zip_bytes(files, top="Existing"))
    assert response.status_code == 409, response.json
    assert response.json["code"] == "skill_exists"
    assert "'Existing'" in response.json["message"]
    assert "'existing'" in response.json["message"]
    assert_unchanged(services, before)


def test_upload_without_a_file_field_is_refused(client, auth, services, before):
    response = client.post(
        "/api/skills", headers=auth, data={"enable": "true"}, content_type="multipart/form-data"
    )
    assert response.status_code == 400
    assert response.json["code"] == "file_missing"
    assert_unchanged(services, before)


def test_not_a_zip_is_refused_as_unsafe(client, auth, services, before):
    response = post_zip(client, auth, b"this is not a zip at all")
    assert response.status_code == 422
    assert response.json["code"] == "archive_unsafe"
    assert_unchanged(services, before)

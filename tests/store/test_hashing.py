"""The content hash of DESIGN.md section 3, byte for byte, and the grant key."""

from __future__ import annotations

import hashlib
from pathlib import Path

from store.hashing import content_hash, grant_key, hash_entries, shown_key


def test_hash_is_sha256_over_sorted_path_nul_digest_newline_lines(tmp_path: Path):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "SKILL.md").write_bytes(b"---\nname: x\n---\n")
    (tmp_path / "scripts" / "a.py").write_bytes(b"print(1)\n")
    lines = "".join(
        f"{path}\0{hashlib.sha256(data).hexdigest()}\n"
        for path, data in sorted(
            [("scripts/a.py", b"print(1)\n"), ("SKILL.md", b"---\nname: x\n---\n")]
        )
    )
    expected = hashlib.sha256(lines.encode()).hexdigest()
    assert content_hash(tmp_path) == expected
    assert hash_entries(
        [("scripts/a.py", b"print(1)\n"), ("SKILL.md", b"---\nname: x\n---\n")]
    ) == (expected)


def test_the_known_vector_stays_the_same(tmp_path: Path):
    (tmp_path / "SKILL.md").write_bytes(b"hello\n")
    digest = hashlib.sha256(b"hello\n").hexdigest()
    assert content_hash(tmp_path) == hashlib.sha256(f"SKILL.md\0{digest}\n".encode()).hexdigest()


def test_any_edit_rename_or_new_file_changes_the_hash(tmp_path: Path):
    (tmp_path / "SKILL.md").write_bytes(b"a")
    first = content_hash(tmp_path)
    (tmp_path / "SKILL.md").write_bytes(b"b")
    second = content_hash(tmp_path)
    (tmp_path / "extra.txt").write_bytes(b"")
    third = content_hash(tmp_path)
    assert len({first, second, third}) == 3


def test_mtimes_and_empty_folders_do_not_change_the_hash(tmp_path: Path):
    (tmp_path / "SKILL.md").write_bytes(b"a")
    first = content_hash(tmp_path)
    (tmp_path / "empty").mkdir()
    (tmp_path / "SKILL.md").touch()
    assert content_hash(tmp_path) == first


def test_grant_key_holds_the_full_hash_and_is_shown_with_eight_hex_digits():
    key = grant_key("disk-report", "abcdef0123456789" * 4)
    assert key == "skill:disk-report@" + "abcdef0123456789" * 4
    assert shown_key(key) == "skill:disk-report@abcdef01"
    assert shown_key("tool:run_skill_script") == "tool:run_skill_script"

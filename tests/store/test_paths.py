"""Every store path is built by one function that refuses anything not strictly inside."""

from __future__ import annotations

from pathlib import Path

import pytest

from store.errors import UnsafePath
from store.names import is_valid_name
from store.paths import inside


@pytest.mark.parametrize(
    "parts",
    [("..",), (".",), ("",), ("a/b",), ("../x",), ("/etc",), ("a\x00b",), ("a\\b",), ("ok", "..")],
)
def test_parts_that_are_not_plain_names_are_refused(tmp_path: Path, parts: tuple[str, ...]):
    with pytest.raises(UnsafePath):
        inside(tmp_path, *parts)


def test_a_symlink_leading_outside_is_refused(tmp_path: Path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(tmp_path)
    with pytest.raises(UnsafePath):
        inside(root, "link")
    assert inside(root, "owner_1", "skill") == root.resolve() / "owner_1" / "skill"


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("a", True),
        ("disk-report", True),
        ("a" * 64, True),
        ("a" * 65, False),
        ("a--b", False),
        ("-a", False),
        ("a-", False),
        ("A", False),
        ("a_b", False),
        ("", False),
        (None, False),
    ],
)
def test_the_one_name_grammar(name: object, valid: bool):
    assert is_valid_name(name) is valid

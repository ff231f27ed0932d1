"""The pattern the API's document gives for a skill file's path says exactly what
check_relative_path accepts."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store.errors import InvalidResourcePath
from store.resources import RELATIVE_PATH_PATTERN, check_relative_path

# Pieces a path is made of, the ones the rules are about among them.
PIECES = st.sampled_from(["a", "SKILL.md", "/", "..", ".", "\\", ":", "%2e", "%41", " ", "\t", "é"])
PATHS = st.lists(PIECES | st.text(max_size=3), max_size=8).map("".join)


def accepted(path: str) -> bool:
    try:
        check_relative_path(path)
    except InvalidResourcePath:
        return False
    return True


@given(PATHS)
def test_a_path_matches_the_pattern_exactly_when_the_store_accepts_it(path):
    assert bool(re.fullmatch(RELATIVE_PATH_PATTERN, path)) == accepted(path)


@pytest.mark.parametrize(
    ("path", "ok"),
    [
        ("SKILL.md", True),
        ("scripts/check.py", True),
        ("..a/b", True),
        ("a/../b", False),
        ("/etc/passwd", False),
        ("c:/x", False),
        ("a\\b", False),
        ("a%2e%2e", False),
        ("  ", False),
        ("a\nb", False),
        ("x" * 1025, False),
    ],
)
def test_the_pattern_keeps_each_rule(path, ok):
    assert bool(re.fullmatch(RELATIVE_PATH_PATTERN, path)) == ok == accepted(path)

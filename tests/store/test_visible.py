"""What an owner reads of an agent's text: every character that could hide or disguise it is
written as its escape, and nothing else changes."""

from __future__ import annotations

import pytest

from store.visible import first_hidden, shown_json, visible


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("echo hi\x1b[2K\rrm -rf ~", "echo hi\\x1b[2K\\x0drm -rf ~"),
        ("ls \u202etxt.exe", "ls \\u202etxt.exe"),
        ("a\u2066b\u2069c", "a\\u2066b\\u2069c"),
        ("zero\u200bwidth", "zero\\u200bwidth"),
        ("line\u2028break", "line\\u2028break"),
        ("no\u00a0break", "no\\xa0break"),
        ("back\x08space\x7f", "back\\x08space\\x7f"),
        ("tag\U000e0041", "tag\\U000e0041"),
        ("bom\ufeff", "bom\\ufeff"),
    ],
)
def test_control_format_and_look_alike_characters_are_written_as_escapes(text, shown):
    assert visible(text) == shown
    first = first_hidden(text)
    assert first is not None and shown.startswith(text[: text.index(first_char(text))] + first)


def first_char(text: str) -> str:
    return next(char for char in text if visible(char) != char)


def test_plain_text_newlines_tabs_and_letters_of_any_script_are_unchanged():
    for text in ("rm -rf /tmp/x", "two\nlines\tand a tab", "Café, Straße, 日本語, ✓ done", ""):
        assert visible(text) == text
        assert first_hidden(text) is None


def test_escaping_twice_changes_nothing_more():
    once = visible("a\x1b\u202eb")
    assert visible(once) == once == "a\\x1b\\u202eb"


def test_json_to_show_escapes_what_json_leaves():
    shown = shown_json({"command": "echo \x1b \u202e é"})
    assert shown == '{\n  "command": "echo \\u001b \\u202e é"\n}'

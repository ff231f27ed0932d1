"""A script's command line from its schema's argv: order, options, flags, and every refusal."""

from __future__ import annotations

from typing import Any

import pytest

from store.commandline import CommandLineError, command_line, entries
from store.limits import MAX_ARGUMENT_TEXT

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "pdf": {"type": "string"},
        "out": {"type": "string"},
        "pages": {"type": "integer"},
        "scale": {"type": "number"},
        "verbose": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "files": {"type": "array", "items": {"type": "string"}},
    },
    "argv": [
        {"flag": "--verbose", "property": "verbose"},
        {"option": "--pages", "property": "pages"},
        {"option": "-s", "property": "scale"},
        {"option": "--tag", "property": "tags"},
        "pdf",
        "out",
        "--",
        "files",
    ],
}
DECLARED = entries(SCHEMA)


def argv(**arguments: object) -> list[str]:
    return command_line(DECLARED, arguments)


def refusal(**arguments: object) -> str:
    with pytest.raises(CommandLineError) as error:
        argv(**arguments)
    assert error.value.message.startswith("HOST: ")
    return error.value.message


def test_values_go_on_the_command_line_in_the_declared_order_each_as_one_argument():
    assert argv(pdf="in put.pdf", out="out.json", pages=3, scale=1.5, verbose=True) == [
        "--verbose", "--pages", "3", "-s", "1.5", "in put.pdf", "out.json", "--",
    ]  # fmt: skip


def test_a_value_a_shell_would_read_stays_one_plain_argument():
    text = "a.pdf; rm -rf / $(reboot) `id` | cat > x\nnext line"
    assert argv(pdf=text) == [text, "--"]


def test_absent_options_and_false_flags_are_left_out():
    assert argv(pdf="a.pdf", verbose=False, pages=None) == ["a.pdf", "--"]
    assert argv() == ["--"]


def test_an_array_gives_one_argument_per_item_and_an_option_once_per_item():
    assert argv(tags=["a", "b"], pdf="x.pdf", out="o", files=["1.pdf", "2.pdf"]) == [
        "--tag", "a", "--tag", "b", "x.pdf", "o", "--", "1.pdf", "2.pdf",
    ]  # fmt: skip


def test_after_the_end_of_options_a_value_may_begin_with_a_dash():
    assert argv(pdf="a", out="o", files=["-rf", "--help"]) == ["a", "o", "--", "-rf", "--help"]


@pytest.mark.parametrize(
    "arguments",
    [
        {"pdf": "-rf"},
        {"pdf": "--output=/etc/passwd"},
        {"pdf": "-"},
        {"pdf": "a.pdf", "out": "--help"},
        {"pages": -1},
        {"scale": -0.0},
        {"tags": ["ok", "-x"]},
    ],
)
def test_a_value_that_begins_with_a_dash_is_never_taken_for_an_option(arguments):
    assert "so the script would take it for an option" in refusal(**arguments)


def test_a_value_without_a_dash_is_never_an_option_even_in_an_option_s_place():
    assert argv(pages=0, tags=["x=y"]) == ["--pages", "0", "--tag", "x=y", "--"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"pdf": "a\x00b"}, "HOST: arguments.pdf holds a NUL character"),
        ({"pdf": "a", "out": "o", "files": ["b\x00"]}, "HOST: arguments.files holds a NUL"),
        ({"pdf": "\ud800"}, "HOST: arguments.pdf is not valid text: it holds a lone surrogate."),
        ({"pdf": True}, "must be a string or a number (or an array of them), not a boolean."),
        ({"pdf": {"a": 1}}, "must be a string or a number (or an array of them), not an object."),
        ({"tags": [["nested"]]}, "not an array."),
        ({"scale": float("nan")}, "HOST: arguments.scale must be a finite number."),
        ({"verbose": "yes"}, "HOST: arguments.verbose must be true or false"),
        ({"out": "o.json"}, 'HOST: arguments give "out" without "pdf", which comes before it'),
    ],
)
def test_what_can_t_be_one_safe_argument_is_refused_naming_the_argument(arguments, message):
    assert message in refusal(**arguments)


def test_the_whole_command_line_is_held_to_the_argument_text_limit():
    half = "x" * (MAX_ARGUMENT_TEXT // 2)
    assert "HOST: the command line would hold" in refusal(pdf=half, out=half)
    assert argv(pdf="x" * (MAX_ARGUMENT_TEXT - 10)) == ["x" * (MAX_ARGUMENT_TEXT - 10), "--"]


def test_a_schema_without_argv_declares_no_command_line():
    assert entries({"type": "object"}) == ()
    assert command_line((), {"pdf": "-rf"}) == []

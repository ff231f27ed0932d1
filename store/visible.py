"""Text an owner reads, with whatever could hide or disguise it written out as an escape.

Agents write much of what an owner approves or answers: a command, a call's arguments, a
question. Control characters (ESC starts a terminal's escape sequences, CR rewrites the line,
BS erases) and format characters (U+202E shows the rest of a line reversed, zero-width ones
hide between letters) let such text look like something else on the console, in a terminal or in
a push notification. `visible` writes each as its Python escape (`\\x1b`, `\\u202e`), keeping
newlines and tabs, so every surface shows what is really there. It is the one function that does
this: the API's cards, the CLI and Web Push payloads all call it.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any

KEPT = "\n\t"
# Control, format, surrogate, line and paragraph separators, and unassigned code points (which
# a newer font may draw as nothing); spaces other than the ASCII one, which look like it.
HIDING = frozenset({"Cc", "Cf", "Cs", "Cn", "Zl", "Zp", "Zs"})
# Every character that is plain printable ASCII, or a kept newline or tab, needs no look.
_PLAIN = re.compile(r"[\x20-\x7e\n\t]*")


def hides(char: str) -> bool:
    """Whether `char` could hide or disguise the text around it."""
    if char in KEPT or char == " ":
        return False
    return unicodedata.category(char) in HIDING


def escape(char: str) -> str:
    """`char` as Python writes it in a string literal: `\\x1b`, `\\u202e`, `\\U000e0001`."""
    point = ord(char)
    if point < 0x100:
        return f"\\x{point:02x}"
    if point < 0x10000:
        return f"\\u{point:04x}"
    return f"\\U{point:08x}"


def visible(text: str) -> str:
    """`text` with every character that could hide or disguise it written as an escape."""
    if _PLAIN.fullmatch(text):
        return text
    return "".join(escape(char) if hides(char) else char for char in text)


def first_hidden(text: str) -> str | None:
    """The escape of the first character of `text` that `visible` would write out, if any."""
    for char in text:
        if hides(char):
            return escape(char)
    return None


def shown_json(value: Any) -> str:
    """`value` as indented JSON text to show (JSON escapes control characters; `visible` the
    rest)."""
    return visible(json.dumps(value, indent=2, ensure_ascii=False))

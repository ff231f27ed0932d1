"""SKILL.md files that other agents read and strict YAML does not: how an import reads them.

Two shapes are common in public skill repositories. A SKILL.md with no front matter at all
(plain Markdown) is read as a header with no keys, so its name comes from its folder and its
description from its first paragraph, each with its own warning (store/leniency.py). A header
whose top-level value holds `: ` or starts with a character YAML reserves (`@`, a backquote),
written unquoted as in `description: Use when: the user asks`, is read with those values as
plain text. Everything else YAML refuses stays refused, and SKILL.md is never rewritten.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from store.errors import SkillInvalid
from store.skillmd import (
    BOM,
    FENCE,
    decode_skill_md,
    has_front_matter,
    load_header,
    split_front_matter,
    strip_leading_blank_lines,
)
from store.validation import format_problems, quote

# A top-level `key: value` line; its value is quoted when YAML can't read it as plain text.
_TOP_LEVEL = re.compile(r"^([A-Za-z_][\w.-]*):[ \t]+(\S.*?)[ \t]*$")
# First characters that make a value quoted, a collection, a block, an alias or a tag.
_STRUCTURE = tuple("'\"[{|>&*!#")
# First characters YAML reserves: a value starting with one can't be plain text.
_RESERVED = tuple("@`%")


@dataclass
class Loose:
    """The header and body of a SKILL.md, and what was bent to read them."""

    header: dict[str, Any]
    body: str
    warnings: list[str] = field(default_factory=list)


def read_loose(data: bytes) -> Loose:
    """Read SKILL.md bytes as an import does; raises SkillInvalid when nothing can be read."""
    text = decode_skill_md(data)
    plain = strip_leading_blank_lines(text.removeprefix(BOM))
    if not has_front_matter(text) and not plain.startswith(FENCE):
        # A fence after blank lines is not taken for Markdown: the strict reading refuses it.
        warning = (
            "SKILL.md has no front matter (a header between '---' lines); it is read as a "
            "header with no keys."
        )
        return Loose({}, plain, [warning])
    yaml_text, body = split_front_matter(text)
    try:
        return Loose(load_header(yaml_text), body)
    except SkillInvalid as e:
        quoted, keys = _quote_unquoted(yaml_text)
        if not keys:
            raise
        try:
            header = load_header(quoted)
        except SkillInvalid:
            raise e from None
        reason = format_problems(e)[0].removesuffix(".")
        shown = ", ".join(quote(key) for key in keys)
        plural = len(keys) > 1
        warning = (
            f"{reason}; the {'values' if plural else 'value'} of {shown} "
            f"{'are' if plural else 'is'} read as plain text, as written."
        )
        return Loose(header, body, [warning])


def _quote_unquoted(yaml_text: str) -> tuple[str, list[str]]:
    """The YAML text with each top-level value YAML can't read as plain text (holding `: `,
    ending in `:`, starting with a reserved character) in double quotes, and their keys."""
    lines: list[str] = []
    keys: list[str] = []
    for line in yaml_text.split("\n"):
        match = _TOP_LEVEL.match(line)
        value = match[2] if match else ""
        unreadable = ": " in value or value.endswith(":") or value.startswith(_RESERVED)
        if match and unreadable and not value.startswith(_STRUCTURE):
            lines.append(f"{match[1]}: {json.dumps(value, ensure_ascii=False)}")
            keys.append(match[1])
        else:
            lines.append(line)
    return "\n".join(lines), keys

"""Reading SKILL.md: the YAML front matter (the header) and the Markdown body."""

from __future__ import annotations

import re
from typing import Any

import yaml

from store.errors import SkillInvalid
from store.safeyaml import YamlTooLarge, load_yaml

FENCE = "---"
BOM = "\ufeff"
_LEADING_BLANK_LINES = re.compile(r"\A(?:[ \t]*\n)+")


def decode_skill_md(data: bytes) -> str:
    """Decode SKILL.md bytes as UTF-8 (a byte order mark is allowed)."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        problem = f"SKILL.md is not UTF-8 text: line {line} holds bytes that can't be decoded."
        raise SkillInvalid("SKILL.md can't be read.", errors=[problem]) from e


def split_front_matter(text: str) -> tuple[str, str]:
    """Split SKILL.md text into the front matter's YAML text and the body.

    The front matter starts at the first line, `---`, and ends at the next line that is
    exactly `---` (trailing whitespace allowed). Line endings become `\\n`; leading blank
    lines of the body are dropped.
    """
    lines = _normalise_newlines(text.removeprefix(BOM)).split("\n")
    if not has_front_matter(text):
        problem = "SKILL.md has no front matter: it must start with a line '---'."
        raise SkillInvalid("SKILL.md can't be read.", errors=[problem])
    for index in range(1, len(lines)):
        if lines[index].rstrip() == FENCE:
            yaml_text = "\n".join(lines[1:index])
            body = "\n".join(lines[index + 1 :])
            return yaml_text, strip_leading_blank_lines(body)
    problem = "SKILL.md's front matter is never closed: add a line '---' after the header."
    raise SkillInvalid("SKILL.md can't be read.", errors=[problem])


def parse_skill_md(text: str) -> tuple[dict[str, Any], str]:
    """Parse SKILL.md text into its header mapping and its body (safe YAML, within bounds)."""
    yaml_text, body = split_front_matter(text)
    return load_header(yaml_text), body


def has_front_matter(text: str) -> bool:
    """Whether SKILL.md text starts with a front matter fence."""
    return _normalise_newlines(text.removeprefix(BOM)).split("\n")[0].rstrip() == FENCE


def load_header(yaml_text: str) -> dict[str, Any]:
    """The header mapping of the front matter's YAML text; SkillInvalid says why not."""
    try:
        header = load_yaml(yaml_text)
    except YamlTooLarge as e:
        problem = f"The front matter is too large to read: {_yaml_reason(e)}."
        raise SkillInvalid("SKILL.md can't be read.", errors=[problem]) from e
    except yaml.YAMLError as e:
        problem = f"The front matter is not valid YAML: {_yaml_reason(e)}."
        raise SkillInvalid("SKILL.md can't be read.", errors=[problem]) from e
    if header is None:
        problem = "The front matter is empty: it must hold at least name and description."
        raise SkillInvalid("SKILL.md can't be read.", errors=[problem])
    if not isinstance(header, dict):
        problem = (
            f"The front matter must be a mapping of keys to values, not a {_yaml_kind(header)}."
        )
        raise SkillInvalid("SKILL.md can't be read.", errors=[problem])
    return header


def read_skill_md(data: bytes) -> tuple[dict[str, Any], str]:
    """Decode and parse the bytes of a SKILL.md file."""
    return parse_skill_md(decode_skill_md(data))


def _normalise_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def strip_leading_blank_lines(body: str) -> str:
    """`body` without the blank lines it starts with."""
    return _LEADING_BLANK_LINES.sub("", body)


def _yaml_reason(error: yaml.YAMLError) -> str:
    """A one-line reason with the line number inside SKILL.md (the header starts at line 2)."""
    if isinstance(error, yaml.MarkedYAMLError):
        reason = error.problem or error.context or "it can't be parsed"
        mark = error.problem_mark or error.context_mark
        if mark is not None:
            return f"{reason} (line {mark.line + 2} of SKILL.md)"
        return reason
    return str(error).splitlines()[0] if str(error) else "it can't be parsed"


def _yaml_kind(value: object) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "plain string"
    return type(value).__name__

"""Leniency towards skills written for other agents: what an import bends, and the warning it says.

Skills found on GitHub are written for Claude Code, Codex, ADK or a marketplace, and many bend the
Agent Skills specification in ways that don't matter to skillfleet: extra header keys,
`allowed-tools` as a YAML list, a display-style name. An import reads the header as written,
turns it into the header the specification describes and records one warning per change; the
strict checks of store/validation.py then run on the result, so what protects the system (the
name rule, skillfleet's settings, sizes, scripts) is never bent. SKILL.md itself is never
rewritten: the content hash is of what was uploaded.
"""

from __future__ import annotations

import base64
import math
import re
import unicodedata
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any

from store.errors import SkillInvalid
from store.frontmatter import read_loose
from store.limits import MAX_COMPATIBILITY_CHARS, MAX_DESCRIPTION_CHARS, MAX_NAME_CHARS
from store.schemas import SCHEMA_KEY
from store.validation import (
    ALIAS_PREFIX,
    PREFIX,
    SPEC_FIELDS,
    SkillInfo,
    check_header,
    check_skill_dir,
    format_problems,
    quote,
    validate_header,
)

NAME_RULE = "1 to 64 lowercase letters a-z, digits and single hyphens"
NAME_HINT = "give it one when importing (name= in the API, --name in the CLI)"

_NOT_NAME = re.compile(r"[^a-z0-9]+")
_MARKDOWN_LEAD = re.compile(r"^(?:[-*>]|\d+\.)\s+")


@dataclass
class Relaxed:
    """A header made to meet the specification, and what was changed to get there."""

    header: dict[str, Any]
    name: str | None
    warnings: list[str] = field(default_factory=list)
    unknown_keys: dict[str, Any] = field(default_factory=dict)
    loose_metadata: dict[str, Any] = field(default_factory=dict)
    declared_name: str | None = None
    problems: list[str] = field(default_factory=list)


def read_skill_dir(root: Path, folder_name: str | None, name: str | None = None) -> SkillInfo:
    """Validate the skill folder `root` the way an import does: lenient header, strict rest.

    `folder_name` is the folder the skill came from (None: it had none, as a zip with the skill
    at its root); `name` is the name the user chose, if any. Raises SkillTooLarge or
    SkillInvalid, as validate_skill_dir does.
    """

    def read(data: bytes, problems: list[str]) -> SkillInfo | None:
        try:
            loose = read_loose(data)
        except SkillInvalid as e:
            problems.extend(format_problems(e))
            return None
        relaxed = relax_header(loose.header, loose.body, folder_name, name)
        relaxed.warnings[:0] = loose.warnings
        info = check_header(relaxed.header, loose.body, relaxed.name, problems)
        problems.extend(relaxed.problems)
        return _with_notes(info, relaxed)

    return check_skill_dir(root, read)


def read_header(header: dict[str, Any], body: str, name: str) -> SkillInfo:
    """The header of an installed skill, read leniently under its installed `name`.

    The warnings the import gave are kept with the skill (`Skill.warnings`); the ones here
    describe this read, in which the installed name counts as a given name.
    """
    relaxed = relax_header(header, body, None, name)
    return _with_notes(validate_header(relaxed.header, body, relaxed.name), relaxed)


def relax_header(
    header: dict[Any, Any], body: str, folder_name: str | None, name: str | None
) -> Relaxed:
    """The header as the specification wants it, with a warning for every change."""
    relaxed = Relaxed(header={}, name=None)
    unknown = [key for key in header if key not in SPEC_FIELDS]
    for key in unknown:
        relaxed.unknown_keys[str(key)] = json_safe(header[key])
    if unknown:
        relaxed.warnings.append(
            f"{_keys('The header key', unknown)} in the Agent Skills specification; kept as "
            "written for review, skillfleet does not read "
            + ("it." if len(unknown) == 1 else "them.")
        )
    relaxed.header = {key: header[key] for key in header if key in SPEC_FIELDS}
    _relax_name(relaxed, header.get("name"), folder_name, name)
    _relax_description(relaxed, body)
    _relax_text(relaxed, "license", None)
    _relax_text(relaxed, "compatibility", MAX_COMPATIBILITY_CHARS)
    _relax_allowed_tools(relaxed)
    _relax_metadata(relaxed)
    return relaxed


def derive_name(text: str) -> str:
    """A valid skill name made from `text` ("" when nothing usable is left).

    Lowercase ASCII (accents dropped), every run of other characters becomes one hyphen,
    hyphens trimmed from both ends, cut to 64 characters. A valid name is returned unchanged.
    """
    decomposed = unicodedata.normalize("NFKD", text)
    plain = "".join(char for char in decomposed if not unicodedata.combining(char)).lower()
    return _NOT_NAME.sub("-", plain).strip("-")[:MAX_NAME_CHARS].rstrip("-")


def split_tools(value: str) -> list[str]:
    """The entries of an allowed-tools string separated by spaces or commas.

    A separator inside parentheses belongs to its entry, as in `Bash(git add:*)`.
    """
    tools: list[str] = []
    current: list[str] = []
    depth = 0
    for char in value:
        if char == "(":
            depth += 1
        elif char == ")" and depth:
            depth -= 1
        if depth == 0 and (char.isspace() or char == ","):
            if current:
                tools.append("".join(current))
                current = []
            continue
        current.append(char)
    if current:
        tools.append("".join(current))
    return tools


def json_safe(value: Any) -> Any:
    """A YAML value as JSON can carry it: dates as ISO text, binary as base64, sets as lists."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [json_safe(item) for item in value]
    return str(value)


# -- the name ----------------------------------------------------------------------------


def _relax_name(
    relaxed: Relaxed, declared: object, folder_name: str | None, chosen: str | None
) -> None:
    written = _scalar_text(declared)
    if chosen is not None:
        # The user's choice is checked by the strict name rule, never bent.
        relaxed.name = chosen
        if written != chosen:
            relaxed.declared_name = written
            shown = quote(written) if written is not None else "no name"
            relaxed.warnings.append(
                f"Installed as {quote(chosen)}, the name given at import; SKILL.md says "
                f"{shown} and is kept as uploaded."
            )
    elif written and derive_name(written) == written:
        relaxed.name = written
        if folder_name is not None and folder_name != written:
            relaxed.warnings.append(
                f"The name {quote(written)} differs from its folder {quote(folder_name)}; "
                f"the skill is installed as {quote(written)}."
            )
    else:
        relaxed.name = _derived_name(relaxed, written, folder_name)
    if relaxed.name is not None:
        relaxed.header["name"] = relaxed.name


def _derived_name(relaxed: Relaxed, written: str | None, folder_name: str | None) -> str | None:
    candidates = [(written, "SKILL.md's name"), (folder_name, "its folder's name")]
    for source, origin in candidates:
        derived = derive_name(source) if source else ""
        if derived:
            relaxed.declared_name = written
            if written is None:
                reason = "The header has no name"
            else:
                reason = (
                    f"The name {quote(written)} is not a valid skill name "
                    f"({_why_invalid(written)}; names hold {NAME_RULE})"
                )
            relaxed.warnings.append(
                f"{reason}; the skill is installed as {quote(derived)}, made from {origin}, "
                "and SKILL.md is kept as uploaded."
            )
            return derived
    # Nothing usable (no name, or only symbols or non-Latin letters): the strict check says
    # what is wrong with the name as written, and this says how to go on.
    relaxed.problems.append(
        "No valid skill name can be made from SKILL.md's name or its folder; " + NAME_HINT + "."
    )
    return None


# -- the other spec fields -----------------------------------------------------------------


def _relax_description(relaxed: Relaxed, body: str) -> None:
    value = relaxed.header.get("description")
    text = _scalar_text(value)
    if text is not None and text.strip():
        if not isinstance(value, str):
            relaxed.warnings.append("The description is not text; it is read as text.")
        if len(text) > MAX_DESCRIPTION_CHARS:
            relaxed.warnings.append(
                f"The description is {len(text)} characters long; the catalog shows its first "
                f"{MAX_DESCRIPTION_CHARS} characters."
            )
            text = text[: MAX_DESCRIPTION_CHARS - 1] + "…"
        relaxed.header["description"] = text
        return
    if value is not None and text is None:
        return  # a list or a mapping: the strict check refuses it
    first = _first_paragraph(body)
    if first:
        relaxed.header["description"] = first
        relaxed.warnings.append(
            "The header has no description; the first paragraph of SKILL.md is used: "
            f"{quote(first)}."
        )


def _first_paragraph(body: str) -> str:
    """The body's first paragraph of prose (headings and code fences skipped), on one line."""
    lines: list[str] = []
    for line in body.splitlines():
        stripped = line.strip()
        if stripped.startswith(("#", "```", "<", "|", "---")) or not stripped:
            if lines:
                break
            continue
        lines.append(_MARKDOWN_LEAD.sub("", stripped))
    paragraph = " ".join(lines)
    if len(paragraph) > MAX_DESCRIPTION_CHARS:
        paragraph = paragraph[: MAX_DESCRIPTION_CHARS - 1] + "…"
    return paragraph


def _relax_text(relaxed: Relaxed, key: str, limit: int | None) -> None:
    if key not in relaxed.header or relaxed.header[key] is None:
        return
    value = relaxed.header[key]
    text = _scalar_text(value)
    if text is None or not text.strip():
        del relaxed.header[key]
        kind = "not text" if text is None else "empty"
        relaxed.warnings.append(f"The {key} field is {kind}; it is ignored.")
        return
    if not isinstance(value, str):
        relaxed.warnings.append(f"The {key} field is not text; it is read as text.")
    if limit is not None and len(text) > limit:
        relaxed.warnings.append(
            f"The {key} field is {len(text)} characters long; its first {limit} are kept."
        )
        text = text[:limit]
    relaxed.header[key] = text


def _relax_allowed_tools(relaxed: Relaxed) -> None:
    value = relaxed.header.get("allowed-tools")
    if value is None:
        return
    form: str | None = None
    if isinstance(value, list):
        items = [_scalar_text(item) for item in value]
        tools = [tool for item in items if item for tool in split_tools(item)]
        form = "a YAML list"
    elif isinstance(value, str):
        tools = split_tools(value)
        if [tool for part in value.split(",") for tool in split_tools(part)] == tools:
            form = "a comma-separated list" if "," in value else None
    else:
        del relaxed.header["allowed-tools"]
        relaxed.warnings.append(
            "The allowed-tools field is neither text nor a list of tools; it is ignored."
        )
        return
    normalised = " ".join(tools)
    relaxed.header["allowed-tools"] = normalised or None
    if form is not None and normalised:
        relaxed.warnings.append(
            f"allowed-tools is written as {form}; it is read as {quote(normalised)}. "
            "It is shown for review and grants nothing by itself."
        )


def _relax_metadata(relaxed: Relaxed) -> None:
    value = relaxed.header.get("metadata")
    if value is None:
        return
    if not isinstance(value, dict):
        del relaxed.header["metadata"]
        relaxed.unknown_keys["metadata"] = json_safe(value)
        relaxed.warnings.append(
            "The metadata field is not a mapping; it is kept as written and skillfleet "
            "does not read it."
        )
        return
    kept: dict[Any, Any] = {}
    for key, item in value.items():
        ours = isinstance(key, str) and key.startswith((PREFIX, ALIAS_PREFIX))
        if ours or key == SCHEMA_KEY or (isinstance(key, str) and isinstance(item, str)):
            kept[key] = item  # skillfleet's own keys stay under the strict checks
        else:
            relaxed.loose_metadata[str(key)] = json_safe(item)
    relaxed.header["metadata"] = kept
    if relaxed.loose_metadata:
        loose = list(relaxed.loose_metadata)
        one = len(loose) == 1
        keys = ", ".join(quote(key) for key in loose)
        relaxed.warnings.append(
            f"The metadata {'value' if one else 'values'} of {keys} {'is' if one else 'are'} "
            "not text as the specification asks; kept as written, skillfleet does not read "
            + ("it." if one else "them.")
        )


# -- small helpers -----------------------------------------------------------------------


def _scalar_text(value: object) -> str | None:
    """A string, or a number or date YAML read from unquoted text; None for anything else."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float | date):
        return str(value)
    return None


def _why_invalid(name: str) -> str:
    checks = [
        (len(name) > MAX_NAME_CHARS, f"{len(name)} characters"),
        (any(char.isupper() for char in name), "uppercase letters"),
        (any(char.isspace() for char in name), "spaces"),
        ("_" in name, "underscores"),
        (bool(re.search(r"[^A-Za-z0-9\s_-]", name)), "other characters"),
        (name.startswith("-") or name.endswith("-") or "--" in name, "stray hyphens"),
    ]
    return ", ".join(reason for failed, reason in checks if failed) or "empty"


def _keys(subject: str, keys: list[Any]) -> str:
    """'The header key "a" is not' or 'The header keys "a", "b" are not'."""
    quoted = ", ".join(quote(str(key)) for key in keys)
    if len(keys) == 1:
        return f"{subject} {quoted} is not"
    return f"{subject}s {quoted} are not"


def _with_notes(info: SkillInfo, relaxed: Relaxed) -> SkillInfo:
    metadata = {**info.metadata, **relaxed.loose_metadata}
    return replace(
        info,
        metadata=metadata,
        warnings=tuple(relaxed.warnings),
        unknown_keys=relaxed.unknown_keys,
        declared_name=relaxed.declared_name,
    )

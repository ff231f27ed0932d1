"""Reading edit_skill's arguments once, exactly: known names, each once, each of its type.

Every refusal is a HOST: sentence naming the field, so the model can fix that one field.
Repeated names are found in the raw JSON body (a parsed object keeps only the last one).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from broker.errors import InvalidCall
from store.errors import SkillInvalid
from store.limits import MAX_RATIONALE_CHARS
from store.schemas import parse_schema_text

TOP_FIELDS = ("skill_name", "changes", "rationale")
CHANGE_FIELDS = ("files", "description", "body", "parameters_schema")
_READS = "it reads skill_name, changes (files, description, body, parameters_schema) and rationale"


@dataclass(frozen=True)
class EditArguments:
    """An edit as the model asked for it; `None` in `files` deletes that file."""

    skill_name: str
    files: dict[str, str | None]
    rationale: str
    description: str | None = None
    body: str | None = None
    parameters_schema: dict[str, Any] | None = None
    schema_given: bool = False  # parameters_schema: null removes the schema

    def as_json(self) -> dict[str, Any]:
        changes: dict[str, Any] = {"files": dict(self.files)}
        for key in ("description", "body"):
            if getattr(self, key) is not None:
                changes[key] = getattr(self, key)
        if self.schema_given:
            changes["parameters_schema"] = self.parameters_schema
        return {"skill_name": self.skill_name, "changes": changes, "rationale": self.rationale}


def read_edit(arguments: dict[str, Any]) -> EditArguments:
    """The edit in `arguments`, or InvalidCall naming the first field that is wrong."""
    _known(arguments, TOP_FIELDS, "")
    for key in TOP_FIELDS:
        if key not in arguments:
            raise InvalidCall(f"HOST: edit_skill needs the field '{key}'; {_READS}.")
    name = _text(arguments, "skill_name", "skill_name")
    rationale = _text(arguments, "rationale", "rationale")
    if len(rationale) > MAX_RATIONALE_CHARS:
        raise InvalidCall(
            f"HOST: edit_skill's field 'rationale' is {len(rationale)} characters; "
            f"keep it to {MAX_RATIONALE_CHARS}."
        )
    changes = arguments["changes"]
    if not isinstance(changes, dict):
        raise InvalidCall(_type("changes", "an object", changes))
    _known(changes, CHANGE_FIELDS, "changes.")
    files = _files(changes.get("files", {}))
    description = _optional_text(changes, "description")
    body = _optional_text(changes, "body")
    schema = _schema(changes.get("parameters_schema"))
    if not files and description is None and body is None and "parameters_schema" not in changes:
        raise InvalidCall(
            "HOST: edit_skill's field 'changes' changes nothing; give files, description, "
            "body or parameters_schema."
        )
    return EditArguments(
        skill_name=name,
        files=files,
        rationale=rationale,
        description=description,
        body=body,
        parameters_schema=schema,
        schema_given="parameters_schema" in changes,
    )


def _schema(value: object) -> dict[str, Any] | None:
    """changes.parameters_schema as an object, or as its JSON text (parsed), or null."""
    if isinstance(value, str):
        try:
            return parse_schema_text(value)
        except SkillInvalid as e:
            message = f"HOST: the edited skill would be refused: {e.message}"
            raise SkillInvalid(message, e.errors) from e
    if value is not None and not isinstance(value, dict):
        raise InvalidCall(
            _type("changes.parameters_schema", "an object, its JSON text or null", value)
        )
    return value


def _known(given: dict[str, Any], fields: tuple[str, ...], prefix: str) -> None:
    for key in given:
        if key not in fields:
            raise InvalidCall(f"HOST: edit_skill has no field '{prefix}{key}'; {_READS}.")


def _text(given: dict[str, Any], key: str, shown: str) -> str:
    value = given[key]
    if not isinstance(value, str) or not value.strip():
        raise InvalidCall(_type(shown, "a non-empty string", value))
    return value


def _optional_text(changes: dict[str, Any], key: str) -> str | None:
    if key not in changes:
        return None
    value = changes[key]
    if not isinstance(value, str):
        raise InvalidCall(_type(f"changes.{key}", "a string", value))
    return value


def _files(value: object) -> dict[str, str | None]:
    if not isinstance(value, dict):
        raise InvalidCall(_type("changes.files", "an object of path -> text or null", value))
    for path, text in value.items():
        if text is not None and not isinstance(text, str):
            raise InvalidCall(_type(f"changes.files['{path[:200]}']", "a string or null", text))
    return dict(value)


def _type(field: str, wanted: str, value: object) -> str:
    return f"HOST: edit_skill's field '{field}' must be {wanted}, not {_kind(value)}."


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


# -- repeated names in the raw body --------------------------------------------------------


class _Object(dict[str, Any]):
    """A parsed JSON object that remembers the names it was given more than once."""

    repeated: tuple[str, ...] = ()


def _pairs(pairs: list[tuple[str, Any]]) -> _Object:
    found = _Object()
    repeated: list[str] = []
    for key, value in pairs:
        if key in found and key not in repeated:
            repeated.append(key)
        found[key] = value
    found.repeated = tuple(repeated)
    return found


def repeated_fields(raw: bytes) -> tuple[str, ...]:
    """Dotted names under `arguments` that the JSON body gives more than once."""
    try:
        body = json.loads(raw, object_pairs_hook=_pairs)
    except (ValueError, RecursionError):
        return ()  # the route's own parser reports a malformed body
    if not isinstance(body, dict):
        return ()
    found: list[str] = []
    _walk(body.get("arguments"), "", found)
    return tuple(found)


def _walk(value: object, prefix: str, found: list[str]) -> None:
    if isinstance(value, _Object):
        found.extend(prefix + key for key in value.repeated)
        for key, item in value.items():
            _walk(item, f"{prefix}{key}.", found)
    elif isinstance(value, list):
        for item in value:
            _walk(item, prefix, found)


def repeated_message(fields: tuple[str, ...]) -> str:
    return f"HOST: edit_skill's field '{fields[0]}' is given more than once; send each field once."

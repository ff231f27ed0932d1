"""The arguments schema of each skill script: declared under metadata, or the mode's default.

A skill declares `parameters_schema` under metadata, as a YAML mapping or JSON text: either
one JSON Schema for every script, or a map from script path (`scripts/verify.py`) to a
schema. Every schema must have `"type": "object"`; its `argv` says which arguments the script
also gets on its command line (store/commandline.py).
"""

from __future__ import annotations

import copy
import json
import os
import stat
from pathlib import Path
from typing import Any, Protocol

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from store.commandline import ARGV_KEY, CommandLineError, Entry, check_argv, constrain, entries
from store.environment import INTERPRETERS
from store.errors import SkillInvalid

SCHEMA_KEY = "parameters_schema"
SCRIPTS_DIR = "scripts"
# The extensions the standard environment runs (store/environment.py's INTERPRETERS).
SCRIPT_SUFFIXES = tuple(INTERPRETERS)

_NODE_PROPERTY: dict[str, Any] = {
    "type": "string",
    "description": "The server to run on: one of your nodes, as list_nodes names them.",
}
# A skill that may run on the Spark or a node (execution `auto`): `node` picks, or is left out.
_WHERE_PROPERTY: dict[str, Any] = {
    "type": "string",
    "description": 'Where to run: one of your nodes (list_nodes), or "spark" or "sandbox"; '
    "left out, the Spark runs it while a Spark worker serves.",
}
DEFAULT_SCHEMAS: dict[str, dict[str, Any]] = {
    "node": {"type": "object", "properties": {"node": _NODE_PROPERTY}, "required": ["node"]},
    "spark": {"type": "object"},
    "sandbox": {"type": "object", "properties": {"node": _NODE_PROPERTY}},
    "auto": {"type": "object", "properties": {"node": _WHERE_PROPERTY}},
}

# Walked before jsonschema sees it: YAML aliases can make a small header expand into a huge
# (or cyclic) structure.
_MAX_SCHEMA_NODES = 10_000
_MAX_SCHEMA_DEPTH = 64
# Keys that mark a mapping without "type" as one (broken) schema rather than a map of scripts.
_SCHEMA_KEYWORDS = {
    "$schema", "$id", "$ref", "properties", "required", "additionalProperties", ARGV_KEY
}  # fmt: skip


class DeclaredSchemas(Protocol):
    """What a skill's header declares about its scripts' arguments (store.validation.SkillInfo)."""

    @property
    def execution(self) -> str: ...

    @property
    def parameters_schema(self) -> dict[str, Any] | None: ...

    @property
    def script_schemas(self) -> dict[str, dict[str, Any]]: ...


def schema_for(info: DeclaredSchemas, script: str) -> dict[str, Any]:
    """The arguments schema of `script` (a POSIX path inside the skill); always a fresh copy.

    For node execution the schema always has a required `node` string: the server to run on;
    for `auto` an optional one that picks the Spark, the sandbox or a node. Values that go on
    the script's command line are held to what a command line can carry.
    """
    declared = info.script_schemas.get(script, info.parameters_schema)
    if declared is None:
        return copy.deepcopy(DEFAULT_SCHEMAS[info.execution])
    schema = constrain(copy.deepcopy(declared))
    if info.execution == "node":
        properties = schema.setdefault("properties", {})
        properties.setdefault("node", copy.deepcopy(_NODE_PROPERTY))
        required = schema.setdefault("required", [])
        if "node" not in required:
            required.append("node")
    elif info.execution == "auto":
        schema.setdefault("properties", {}).setdefault("node", copy.deepcopy(_WHERE_PROPERTY))
    return schema


def argv_of(info: DeclaredSchemas, script: str) -> tuple[Entry, ...]:
    """The command line `script`'s schema declares (store/commandline.py); () for none."""
    declared = info.script_schemas.get(script, info.parameters_schema)
    if declared is None:
        return ()
    try:
        return entries(declared)
    except CommandLineError:
        return ()  # never for a stored skill: its schema was checked when it was saved


def scripts_of(root: Path) -> list[str]:
    """The runnable scripts of the skill at `root`: regular files under scripts/, sorted."""
    scripts: list[str] = []
    base = root / SCRIPTS_DIR
    if base.is_symlink() or not base.is_dir():
        return scripts
    for directory, _dirs, files in os.walk(base):
        for name in files:
            path = Path(directory, name)
            if path.suffix.lower() in SCRIPT_SUFFIXES and stat.S_ISREG(path.lstat().st_mode):
                scripts.append(path.relative_to(root).as_posix())
    return sorted(scripts)


def check_parameters_schema(
    value: object, problems: list[str]
) -> tuple[dict[str, Any] | None, dict[str, dict[str, Any]]]:
    """Read a parameters_schema value, adding a sentence to `problems` for each fault.

    Returns (one schema for every script or None, a map script path -> schema).
    """
    parsed = _schema_value(value, problems)
    if parsed is None:
        return None, {}
    if not parsed or "type" in parsed or _SCHEMA_KEYWORDS.intersection(parsed):
        return (parsed if _schema_ok(parsed, "The parameters_schema", problems) else None), {}
    schemas: dict[str, dict[str, Any]] = {}
    for path, schema in parsed.items():
        if not _is_relative_path(path):
            problems.append(
                f"The parameters_schema names {_quote(path)}, which is not a relative path "
                'inside the skill such as "scripts/verify.py".'
            )
        elif _schema_ok(schema, f"The parameters_schema for {_quote(path)}", problems):
            schemas[path] = schema
    return None, schemas


def parse_schema_text(text: str) -> dict[str, Any]:
    """A parameters_schema sent as JSON text (tools take an object or its text), parsed.

    Raises SkillInvalid with the sentence a SKILL.md header holding that text would get.
    """
    problems: list[str] = []
    parsed = _schema_value(text, problems)
    if parsed is None:
        raise SkillInvalid(problems[0], errors=problems)
    return parsed


def _schema_value(value: object, problems: list[str]) -> dict[str, Any] | None:
    """Read parameters_schema from a YAML mapping or JSON text; None when absent or bad."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            problems.append(
                f"The parameters_schema is not valid JSON: {e.msg} "
                f"(line {e.lineno}, column {e.colno})."
            )
            return None
        except RecursionError:
            problems.append("The parameters_schema is nested too deeply.")
            return None
    if not isinstance(value, dict):
        problems.append(
            "The parameters_schema must be a JSON Schema object or a map from script path "
            f"to schema, not {_json_kind(value)}."
        )
        return None
    shape = _json_shape_problem(value)
    if shape is not None:
        problems.append(f"The parameters_schema {shape}.")
        return None
    return value


def _schema_ok(schema: object, label: str, problems: list[str]) -> bool:
    if not isinstance(schema, dict):
        problems.append(f"{label} must be a JSON Schema object, not {_json_kind(schema)}.")
        return False
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as e:
        where = f" at {'/'.join(str(part) for part in e.path)}" if e.path else ""
        problems.append(f"{label} is not a valid JSON Schema{where}: {_clip(e.message)}.")
        return False
    if schema.get("type") != "object":
        found = f", not {json.dumps(schema['type'])}" if "type" in schema else ""
        problems.append(f'{label} must have "type": "object"{found}.')
        return False
    before = len(problems)
    check_argv(schema, label, problems)
    return len(problems) == before


def _json_shape_problem(value: object) -> str | None:
    """Why `value` can't be a JSON document of bounded size, or None when it can."""
    stack: list[tuple[object, int]] = [(value, 0)]
    seen = 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > _MAX_SCHEMA_NODES or depth > _MAX_SCHEMA_DEPTH:
            return "is too large or nested too deeply"
        if isinstance(item, dict):
            if not all(isinstance(key, str) for key in item):
                return "has a key that is not a string; quote it"
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
        elif item is not None and not isinstance(item, str | int | float):
            return f"holds a {type(item).__name__} value, which JSON has no form for"
    return None


def _is_relative_path(path: str) -> bool:
    return (
        bool(path)
        and "\\" not in path
        and not path.startswith("/")
        and all(part not in ("", ".", "..") for part in path.split("/"))
    )


def _json_kind(value: object) -> str:
    kinds = {list: "a list", str: "a string", bool: "a boolean", int: "a number"}
    return kinds.get(type(value), "a number" if isinstance(value, float) else "null")


def _quote(text: str) -> str:
    quoted = json.dumps(text, ensure_ascii=False)
    return quoted if len(quoted) <= 80 else quoted[:78] + '…"'


def _clip(text: str) -> str:
    text = " ".join(text.split()).rstrip(".")
    return text if len(text) <= 200 else text[:199] + "…"

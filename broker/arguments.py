"""Reads a script call's arguments once, before any runner (seed 000, SkillArguments.Normalize).

Whatever is refused raises ArgumentError with a message that starts with HOST:, so a model can
tell it from a script's own ERROR: lines.
"""

import json
from dataclasses import dataclass
from enum import Enum
from typing import Any

import structlog

from broker.errors import ArgumentError
from broker.metrics import ARGUMENTS_COERCED
from store.limits import MAX_ARGUMENT_TEXT

ARRAY = 'HOST: arguments was an array; send an object with a "node" key.'
NUMBER = "HOST: arguments was a number; send a JSON object."
NOT_JSON = (
    "HOST: arguments was a string that isn't valid JSON; send a JSON object, not a quoted string."
)
DISAGREE = (
    "HOST: arguments.node ({inner}) and node ({outer}) disagree; "
    "name the server once, inside arguments."
)
NODE_NOT_TEXT = (
    "HOST: arguments.node must be the server's name as a string, as list_nodes names it "
    '(or "spark" or "sandbox").'
)
NO_NODE = (
    'HOST: arguments has no "node" key; add the server to run on, as list_nodes names it: '
    '{"node": "<node>", ...}.'
)
TOO_LONG = "HOST: arguments text is over 32 KiB; send a smaller JSON object."
NOT_AN_OBJECT = 'HOST: arguments must be a JSON object, such as {"node": "<node>", ...}.'

log = structlog.get_logger(__name__)


class _Missing(Enum):
    MISSING = "missing"


MISSING = _Missing.MISSING
"""Stands for "no top-level node was sent", as distinct from any value."""


@dataclass(frozen=True, slots=True)
class Normalized:
    """A call's arguments as the runner gets them, and which repairs were made."""

    arguments: dict[str, Any]
    coerced: bool
    injected_node: bool


def normalize(
    arguments: object,
    top_level_node: object = MISSING,
    execution: str = "node",
    *,
    skill: str = "",
    script: str = "",
) -> Normalized:
    """Read `arguments` (and a `node` sent next to them) into one object, or raise ArgumentError.

    The node is required only for node execution.
    """
    fields, coerced = _as_object(arguments)
    fields, injected = _place_node(fields, top_level_node)
    if execution == "node" and "node" not in fields:
        raise ArgumentError(NO_NODE)
    if coerced or injected:
        _record_repair(skill, script, coerced, injected)
    return Normalized(fields, coerced, injected)


def _as_object(arguments: object) -> tuple[dict[str, Any], bool]:
    """The arguments as a dict, and whether they came as JSON text."""
    if isinstance(arguments, str):
        if len(arguments.encode("utf-8", "surrogatepass")) > MAX_ARGUMENT_TEXT:
            raise ArgumentError(TOO_LONG)
        try:
            parsed = json.loads(arguments)
        except (ValueError, RecursionError) as e:
            raise ArgumentError(NOT_JSON) from e
        if isinstance(parsed, str):
            raise ArgumentError(NOT_JSON)
        fields = _value_as_object(parsed)
        return fields, isinstance(parsed, dict)
    return _value_as_object(arguments), False


def _value_as_object(value: object) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    if isinstance(value, list | tuple):
        raise ArgumentError(ARRAY)
    if isinstance(value, int | float):  # bool is an int, and has the same message
        raise ArgumentError(NUMBER)
    raise ArgumentError(NOT_AN_OBJECT)


def _place_node(fields: dict[str, Any], top_level_node: object) -> tuple[dict[str, Any], bool]:
    """Move a top-level node inside the arguments; refuse a node that isn't a name."""
    outer = None if top_level_node is MISSING else top_level_node
    inner = fields.get("node")
    if "node" in fields:
        _check_node(inner)
    if outer is None:
        return fields, False
    _check_node(outer)
    if "node" not in fields:
        return {**fields, "node": outer}, True
    if inner != outer:
        names = {"inner": _quoted(inner), "outer": _quoted(outer)}
        raise ArgumentError(DISAGREE.format(**names))
    return fields, False


def _check_node(node: object) -> None:
    if not isinstance(node, str) or not node.strip():
        raise ArgumentError(NODE_NOT_TEXT)


def _quoted(name: object) -> str:
    return json.dumps(name, ensure_ascii=False)


def _record_repair(skill: str, script: str, coerced: bool, injected: bool) -> None:
    # Names and flags only: the arguments' content is never logged.
    log.info(
        "skill arguments coerced",
        skill=skill,
        script=script,
        coerced=coerced,
        injected_node=injected,
    )
    if coerced:
        ARGUMENTS_COERCED.labels(kind="string").inc()
    if injected:
        ARGUMENTS_COERCED.labels(kind="node").inc()

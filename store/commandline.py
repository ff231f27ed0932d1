"""A script's command line: which of its arguments it gets as argv, as its schema declares.

Skills written for other agents read `sys.argv`, not SKILLFLEET_ARGS. A script's schema says
which arguments go on its command line with `argv`, a list read in order:

    "pdf"                                        the value of the property pdf, as one argument
                                                 (an array: one argument per item)
    {"option": "--pages", "property": "pages"}   "--pages" and the value, when pages is given
                                                 (an array: the pair once per item)
    {"flag": "--verbose", "property": "verbose"} "--verbose" when verbose is true
    "--"                                         the end of options, passed as it is

The runner passes the result after the script's path, each value one argument, never through
a shell; SKILLFLEET_ARGS still holds every argument. A value that begins with "-" would be read
as an option (`-rf`, `--output=/etc/x`), so it is refused, except a positional after "--": the
author writes "--" when the script's parser reads what follows it as values.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from store.limits import MAX_ARGUMENT_TEXT

ARGV_KEY = "argv"
END_OF_OPTIONS = "--"
POSITIONAL, OPTION, FLAG, END = "positional", "option", "flag", "end"
VALUE_TYPES = ("string", "integer", "number")
# A value not taken for an option (before "--"), and any value: argv strings end at a NUL.
NOT_AN_OPTION = "^(?!-)[^\\u0000]*$"
NO_NUL = "^[^\\u0000]*$"
# Properties that never reach the script: `node` names the server to run on.
NOT_PASSED = frozenset({"node"})

_OPTION_NAME = re.compile(r"--?[A-Za-z0-9][A-Za-z0-9_.-]*", re.ASCII)
_SHAPES = '"--", a property name, {"option": …, "property": …} or {"flag": …, "property": …}'


class CommandLineError(ValueError):
    """Raised when a declaration, or a call's values, can't make a safe command line."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Entry:
    """One item of a declared command line: a positional, an option, a flag or "--"."""

    kind: str
    property: str = ""
    name: str = ""  # the option or flag as the script reads it


def check_argv(schema: Mapping[str, Any], label: str, problems: list[str]) -> None:
    """Add a sentence to `problems` when the schema's `argv` can't be read; `label` names it."""
    try:
        entries(schema)
    except CommandLineError as e:
        problems.append(f"{label} {e.message}.")


def entries(schema: Mapping[str, Any]) -> tuple[Entry, ...]:
    """The command line `schema` declares, in order; () when it declares none.

    Raises CommandLineError with a predicate ("puts … on the command line, but …") that
    follows the schema's name in a problem sentence.
    """
    declared = schema.get(ARGV_KEY)
    if declared is None:
        return ()
    if not isinstance(declared, list):
        raise CommandLineError(f"has an argv that is {_kind(declared)}, not a list of {_SHAPES}")
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    found: list[Entry] = []
    for item in declared:
        entry = _entry(item)
        _check_entry(entry, properties, found)
        found.append(entry)
    return tuple(found)


def constrain(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` (changed in place) made to refuse, when a call is checked, any value that can't
    go on its command line: a value taken for an option, a NUL, a value past the length limit.

    The same rules hold again when the command line is built (`command_line`); checking them
    with the schema refuses such a call before anyone is asked to approve it.
    """
    try:
        declared = entries(schema)
    except CommandLineError:
        return schema  # a stored skill's schema was checked; nothing to add to a broken one
    after_end = False
    for entry in declared:
        if entry.kind == END:
            after_end = True
        elif entry.kind in (POSITIONAL, OPTION):
            value = schema["properties"][entry.property]
            target = value["items"] if value.get("type") == "array" else value
            may_begin_with_dash = after_end and entry.kind == POSITIONAL
            _constrain_value(target, may_begin_with_dash)
    return schema


def command_line(declared: tuple[Entry, ...], arguments: Mapping[str, Any]) -> list[str]:
    """The arguments after the script's path, built from the call's `arguments`.

    Raises CommandLineError with a HOST: sentence naming the argument at fault.
    """
    argv: list[str] = []
    after_end = False
    left_out: str | None = None  # a positional not given: no later one may be
    for entry in declared:
        if entry.kind == END:
            argv.append(END_OF_OPTIONS)
            after_end = True
            continue
        value = arguments.get(entry.property)
        if entry.kind == FLAG:
            argv.extend(_flag(entry, value))
            continue
        if value is None:
            if entry.kind == POSITIONAL and left_out is None:
                left_out = entry.property
            continue
        if entry.kind == POSITIONAL and left_out is not None:
            raise CommandLineError(
                f"HOST: arguments give {_quote(entry.property)} without {_quote(left_out)}, "
                "which comes before it on the command line; give both."
            )
        items = value if isinstance(value, list) else [value]
        dash = after_end and entry.kind == POSITIONAL
        for item in items:
            text = _text(entry.property, item, dash)
            argv.extend([entry.name, text] if entry.kind == OPTION else [text])
    _check_size(argv)
    return argv


# -- reading a declaration ---------------------------------------------------------------


def _entry(item: object) -> Entry:
    if item == END_OF_OPTIONS:
        return Entry(END)
    if isinstance(item, str) and item:
        return Entry(POSITIONAL, item)
    if isinstance(item, dict) and set(item) in ({"option", "property"}, {"flag", "property"}):
        kind = OPTION if "option" in item else FLAG
        name, prop = item[kind], item["property"]
        if isinstance(name, str) and isinstance(prop, str) and prop:
            if not _OPTION_NAME.fullmatch(name):
                raise CommandLineError(
                    f"has the {kind} {_quote(name)} in its argv, which is not an option name "
                    'such as "--pages" or "-p"'
                )
            return Entry(kind, prop, name)
    raise CommandLineError(f"has an argv entry {_shown(item)} that is not {_SHAPES}")


def _check_entry(entry: Entry, properties: dict[str, Any], before: list[Entry]) -> None:
    if entry.kind == END:
        if any(earlier.kind == END for earlier in before):
            raise CommandLineError('has "--" twice in its argv')
        return
    prop = _quote(entry.property)
    if entry.kind != POSITIONAL and any(earlier.kind == END for earlier in before):
        raise CommandLineError(
            f'has the {entry.kind} {_quote(entry.name)} after "--" in its argv, where the '
            "script would read it as a value"
        )
    if entry.property in NOT_PASSED:
        raise CommandLineError(
            f"puts {prop} on the command line, but node names the server to run on and is "
            "never passed to the script"
        )
    if any(earlier.property == entry.property for earlier in before):
        raise CommandLineError(f"puts {prop} on the command line twice")
    if entry.property not in properties:
        raise CommandLineError(
            f"puts {prop} on the command line, but its properties do not declare it"
        )
    kind = _category(properties[entry.property])
    if entry.kind == FLAG and kind != "boolean":
        raise CommandLineError(
            f'uses {prop} as the flag {_quote(entry.name)}, so its "type" must be "boolean"; '
            f"{_declared(properties[entry.property])}"
        )
    if entry.kind != FLAG and kind not in (*VALUE_TYPES, "values"):
        raise CommandLineError(
            f'puts {prop} on the command line, so its "type" must be "string", "integer", '
            f'"number" or "array" with "items" of one of those; '
            f"{_declared(properties[entry.property])}"
        )


def _category(value: object) -> str:
    """A property's declared type, "values" for an array of strings or numbers."""
    declared = value.get("type") if isinstance(value, dict) else None
    if declared == "array":
        items = value.get("items") if isinstance(value, dict) else None
        is_values = isinstance(items, dict) and items.get("type") in VALUE_TYPES
        return "values" if is_values else "array"
    return declared if isinstance(declared, str) else ""


def _declared(value: object) -> str:
    """What a property declares as its type, as the end of a problem sentence."""
    if not isinstance(value, dict) or "type" not in value:
        return "it declares none"
    if value["type"] == "array":
        return 'it is "array" with other items'
    return f"it is {_shown(value['type'])}"


def _constrain_value(target: dict[str, Any], may_begin_with_dash: bool) -> None:
    if target.get("type") == "string":
        _tighten(target, "pattern", NO_NUL if may_begin_with_dash else NOT_AN_OPTION)
        _tighten(target, "maxLength", MAX_ARGUMENT_TEXT)
    elif not may_begin_with_dash:  # a number: "-5" would be read as an option
        _tighten(target, "minimum", 0)


def _tighten(target: dict[str, Any], keyword: str, value: object) -> None:
    """Add `keyword: value` to `target`, beside (in allOf) whatever the author wrote for it."""
    if keyword not in target:
        target[keyword] = value
    elif target[keyword] != value:
        target.setdefault("allOf", []).append({keyword: value})


# -- building a command line ---------------------------------------------------------------


def _flag(entry: Entry, value: object) -> list[str]:
    if value is None or value is False:
        return []
    if value is True:
        return [entry.name]
    raise CommandLineError(
        f"HOST: arguments.{entry.property} must be true or false: it says whether to pass "
        f"{entry.name}."
    )


def _text(prop: str, value: object, may_begin_with_dash: bool) -> str:
    """One argument's text; refuses what can't be one argument or would be read as an option."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise CommandLineError(
            f"HOST: arguments.{prop} goes on the command line, so it must be a string or a "
            f"number (or an array of them), not {_kind(value)}."
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise CommandLineError(f"HOST: arguments.{prop} must be a finite number.")
    text = value if isinstance(value, str) else json.dumps(value)
    if "\x00" in text:
        raise CommandLineError(
            f"HOST: arguments.{prop} holds a NUL character, which no command line can carry."
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise CommandLineError(
            f"HOST: arguments.{prop} is not valid text: it holds a lone surrogate."
        ) from None
    if text.startswith("-") and not may_begin_with_dash:
        if not isinstance(value, str):
            raise CommandLineError(
                f"HOST: arguments.{prop} is negative, so the script would take it for an "
                "option; send 0 or more."
            )
        raise CommandLineError(
            f'HOST: arguments.{prop} begins with "-", so the script would take it for an '
            'option; send a value that does not (a file as "./-name").'
        )
    return text


def _check_size(argv: list[str]) -> None:
    size = sum(len(arg.encode("utf-8")) + 1 for arg in argv)  # each ends with a NUL
    if size > MAX_ARGUMENT_TEXT:
        raise CommandLineError(
            f"HOST: the command line would hold {size:,} bytes; the arguments on it may hold "
            f"{MAX_ARGUMENT_TEXT // 1024} KiB together."
        )


def _kind(value: object) -> str:
    if value is None:
        return "null"
    kinds = {bool: "a boolean", str: "a string", list: "an array", dict: "an object"}
    return kinds.get(type(value), "a number")


def _quote(text: str) -> str:
    quoted = json.dumps(text, ensure_ascii=False)
    return quoted if len(quoted) <= 80 else quoted[:78] + '…"'


def _shown(value: object) -> str:
    try:
        shown = json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        shown = repr(value)
    return shown if len(shown) <= 80 else shown[:78] + "…"

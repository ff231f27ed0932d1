"""JSON text for the database's JSON columns, the API's answers and tool results.

orjson writes a 200-skill listing in 20 µs where the standard library takes 300 µs, and a call's
result is written three times (the result's checks, its row, the answer). So orjson writes
them, and the standard library takes over wherever orjson would refuse a value or write it
differently: keys that are not strings, integers past 64 bits, lone surrogates, nesting past
orjson's depth, and types the standard library itself refuses (dataclasses, datetimes), which
are handed to the caller's `default` as the standard library would hand them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import orjson

# orjson writes dataclasses and datetimes itself; passed through, they reach `default` as they
# do in the standard library, and the text is the same.
_PASSTHROUGH = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


def encode(value: Any) -> str:
    """`value` as JSON text (what the database's JSON columns store), as the standard library
    writes it: NaN and Infinity too (see `_fast`)."""
    text = _fast(value)
    return text.decode() if text is not None else json.dumps(value)


# Reasons of the JSONDecodeError raised where the standard library raises something else; the
# error's `doc` is the reason too, as no text is at fault at a position.
TOO_DEEP = "it nests too deep to be read"
TOO_LONG = "it holds an integer of more than {digits:,} digits"


def decode(text: str | bytes | bytearray | memoryview) -> Any:
    """The value of JSON text; NaN and Infinity, which orjson refuses, are read as Python reads
    them. Text nested deeper than either reads, or holding an integer longer than Python reads
    from text (4,300 digits), raises JSONDecodeError, as bad JSON does."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        try:
            return json.loads(bytes(text) if isinstance(text, memoryview) else text)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise
        except RecursionError as e:
            raise json.JSONDecodeError(TOO_DEEP, TOO_DEEP, 0) from e
        except ValueError as e:  # int() refuses the digits: Python's guard against slow parsing
            message = TOO_LONG.format(digits=sys.get_int_max_str_digits())
            raise json.JSONDecodeError(message, message, 0) from e


def compact(value: Any) -> bytes | None:
    """`value` as compact UTF-8 JSON when it is plain JSON, else None (a type JSON lacks, a
    float that is not finite, a lone surrogate)."""
    text = _fast(value)
    if text is not None:
        return text
    try:
        plain = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return plain.encode("utf-8")
    except (TypeError, ValueError, RecursionError):
        return None


def response_body(value: Any, default: Callable[[Any], Any]) -> bytes:
    """The compact JSON of an API answer, `default` turning what JSON lacks into what it has.

    A float that is not finite is written as null: valid JSON, where the standard library
    writes NaN, which JSON lacks.
    """
    try:
        return orjson.dumps(value, default=default, option=_PASSTHROUGH)
    except TypeError:
        return json.dumps(value, default=default, separators=(",", ":")).encode()


def _fast(value: Any) -> bytes | None:
    """orjson's compact text of `value`, or None where it refuses the value or would write a
    non-finite float as null (text with a null in it: the caller asks the standard library)."""
    try:
        text = orjson.dumps(value, option=_PASSTHROUGH)
    except TypeError:  # orjson.JSONEncodeError is one
        return None
    return text if b"null" not in text else None

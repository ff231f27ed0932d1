"""JSON text written by orjson, and by the standard library wherever orjson would refuse or
differ: the values read back are the same either way."""

from __future__ import annotations

import dataclasses
import datetime
import json
import math

import pytest

from store import jsoncodec


@dataclasses.dataclass
class Point:
    x: int


PLAIN = {"skills": [{"name": "a", "enabled": True, "tier": "read"}], "count": 1, "ratio": 0.5}
# Values orjson refuses (or writes otherwise) that the standard library writes.
ONLY_STDLIB = [
    {1: "an int key", None: "a None key"},
    {"big": 2**70},
    {"lone": "\ud800"},
    {"nan": math.nan},
]


def test_plain_values_round_trip_and_compact_is_utf8_without_spaces():
    assert jsoncodec.decode(jsoncodec.encode(PLAIN)) == PLAIN
    assert jsoncodec.compact({"name": "café", "n": 1}) == '{"name":"café","n":1}'.encode()


@pytest.mark.parametrize("value", ONLY_STDLIB, ids=["keys", "big-int", "surrogate", "nan"])
def test_what_orjson_refuses_is_written_as_the_standard_library_writes_it(value):
    assert jsoncodec.encode(value) == json.dumps(value)


def test_text_orjson_refuses_to_read_is_read_as_python_reads_it():
    assert math.isnan(jsoncodec.decode('{"x": NaN}')["x"])
    assert jsoncodec.decode('"\\ud800"') == "\ud800"
    assert jsoncodec.decode(memoryview(b'{"x": Infinity}')) == {"x": math.inf}


@pytest.mark.parametrize(
    "value",
    [{"nan": math.nan}, {"inf": [1.0, math.inf]}, {"when": datetime.datetime(2026, 1, 1)},
     {"point": Point(1)}, {"set": {1, 2}}],
    ids=["nan", "infinity", "datetime", "dataclass", "set"],
)  # fmt: skip
def test_compact_is_none_for_what_is_not_plain_json(value):
    assert jsoncodec.compact(value) is None


def test_compact_keeps_nulls_of_plain_json():
    assert jsoncodec.compact({"node": None, "n": [None]}) == b'{"node":null,"n":[null]}'


def test_an_answer_hands_what_json_lacks_to_default_as_the_standard_library_does():
    def default(value: object) -> object:
        if isinstance(value, datetime.date):
            return value.isoformat()
        if dataclasses.is_dataclass(value):
            return {"point": True}
        raise TypeError(type(value).__name__)

    value = {"when": datetime.date(2026, 12, 2), "p": Point(1), "big": 2**70}
    body = jsoncodec.response_body(value, default)
    assert json.loads(body) == {"when": "2026-12-02", "p": {"point": True}, "big": 2**70}
    with pytest.raises(TypeError):
        jsoncodec.response_body({"s": {1}}, default)

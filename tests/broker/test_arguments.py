"""Script arguments are read once, by the table in seed 000 ("Script arguments")."""

import json
from collections.abc import Iterator, MutableMapping
from typing import Any

import pytest
import structlog
from prometheus_client import REGISTRY

from broker.arguments import MISSING, Normalized, normalize
from broker.errors import ArgumentError
from store.limits import MAX_ARGUMENT_TEXT

ARRAY = 'HOST: arguments was an array; send an object with a "node" key.'
NUMBER = "HOST: arguments was a number; send a JSON object."
NOT_JSON = (
    "HOST: arguments was a string that isn't valid JSON; send a JSON object, not a quoted string."
)
NODE_NOT_TEXT = (
    "HOST: arguments.node must be the server's name as a string, as list_nodes names it "
    '(or "spark" or "sandbox").'
)
NO_NODE = (
    'HOST: arguments has no "node" key; add the server to run on, as list_nodes names it: '
    '{"node": "<node>", ...}.'
)
Logs = list[MutableMapping[str, Any]]
TOO_LONG = "HOST: arguments text is over 32 KiB; send a smaller JSON object."


def refusal(arguments: object, top_level_node: object = MISSING) -> str:
    with pytest.raises(ArgumentError) as caught:
        normalize(arguments, top_level_node)
    assert caught.value.code == "invalid_arguments"
    assert caught.value.status == 400
    return caught.value.message


def coerced_count(kind: str) -> float:
    value = REGISTRY.get_sample_value("skillfleet_skill_arguments_coerced_total", {"kind": kind})
    return value or 0.0


@pytest.fixture
def logs() -> Iterator[Logs]:
    with structlog.testing.capture_logs() as captured:
        yield captured


def test_an_object_with_a_node_runs_unchanged(logs: Logs) -> None:
    arguments = {"node": "lucialab01", "verbose": True}

    assert normalize(arguments) == Normalized(arguments, coerced=False, injected_node=False)
    assert logs == []


def test_text_holding_an_object_runs_and_the_repair_is_logged_and_counted(
    logs: Logs,
) -> None:
    before = coerced_count("string")

    result = normalize('{"node": "lucialab01", "path": "/srv"}', skill="disk", script="s/du.py")

    assert result == Normalized({"node": "lucialab01", "path": "/srv"}, True, False)
    assert coerced_count("string") == before + 1
    assert logs == [
        {
            "event": "skill arguments coerced",
            "log_level": "info",
            "skill": "disk",
            "script": "s/du.py",
            "coerced": True,
            "injected_node": False,
        }
    ]


@pytest.mark.parametrize("arguments", [["lucialab01"], '["lucialab01", "-v"]', " [] "])
def test_text_or_a_value_that_is_an_array_is_refused(arguments: object) -> None:
    assert refusal(arguments) == ARRAY


@pytest.mark.parametrize("arguments", [3, 2.5, True, False, "42", "true", "-1e3"])
def test_a_number_or_a_boolean_is_refused_as_a_number(arguments: object) -> None:
    assert refusal(arguments) == NUMBER


@pytest.mark.parametrize("arguments", [None, "null"])
def test_null_is_treated_as_an_empty_object(arguments: object) -> None:
    assert normalize(arguments, execution="spark").arguments == {}


def test_no_arguments_for_a_node_skill_get_the_no_node_key_message() -> None:
    assert refusal(None) == NO_NODE


@pytest.mark.parametrize("arguments", ["node=lucialab01", "{node: 1}", "", "{'a': 1}"])
def test_text_that_isnt_json_is_refused(arguments: str) -> None:
    assert refusal(arguments) == NOT_JSON


def test_text_holding_a_quoted_string_is_refused_as_not_json() -> None:
    assert refusal(json.dumps('{"node": "lucialab01"}')) == NOT_JSON


def test_a_top_level_node_is_moved_inside_an_object_without_one(
    logs: Logs,
) -> None:
    before = coerced_count("node")
    arguments = {"path": "/srv"}

    result = normalize(arguments, "lucialab01", skill="disk", script="scripts/du.py")

    assert result == Normalized({"path": "/srv", "node": "lucialab01"}, False, True)
    assert arguments == {"path": "/srv"}
    assert coerced_count("node") == before + 1
    assert [(entry["coerced"], entry["injected_node"]) for entry in logs] == [(False, True)]


def test_text_and_a_top_level_node_together_count_once_for_each_kind() -> None:
    before = coerced_count("string"), coerced_count("node")

    result = normalize('{"path": "/srv"}', "lucialab01")

    assert result == Normalized({"path": "/srv", "node": "lucialab01"}, True, True)
    assert (coerced_count("string"), coerced_count("node")) == (before[0] + 1, before[1] + 1)


def test_the_same_node_inside_and_outside_is_not_a_repair() -> None:
    result = normalize({"node": "lucialab01"}, "lucialab01")

    assert result == Normalized({"node": "lucialab01"}, False, False)


def test_two_different_nodes_are_refused_naming_both() -> None:
    message = refusal({"node": "a"}, "b")

    assert message == (
        'HOST: arguments.node ("a") and node ("b") disagree; '
        "name the server once, inside arguments."
    )


@pytest.mark.parametrize(
    ("arguments", "top_level_node"),
    [({"node": 7}, None), ({"node": ["a"]}, None), ({"node": ""}, None), ({}, 7), ({}, True)],
)
def test_a_node_that_isnt_text_is_refused(arguments: object, top_level_node: object) -> None:
    assert refusal(arguments, top_level_node) == NODE_NOT_TEXT


def test_a_node_skill_without_a_node_is_refused() -> None:
    assert refusal({"path": "/srv"}) == NO_NODE


@pytest.mark.parametrize("execution", ["spark", "sandbox"])
def test_only_node_skills_need_a_node(execution: str) -> None:
    assert normalize({"path": "/srv"}, execution=execution).arguments == {"path": "/srv"}


def test_a_null_top_level_node_is_the_same_as_none() -> None:
    assert refusal({"path": "/srv"}, None) == NO_NODE


def test_text_of_exactly_32_kib_is_read_and_one_byte_more_is_refused() -> None:
    prefix, suffix = '{"node": "n", "pad": "', '"}'
    text = prefix + "x" * (MAX_ARGUMENT_TEXT - len(prefix) - len(suffix)) + suffix
    assert len(text.encode()) == MAX_ARGUMENT_TEXT

    assert normalize(text).coerced
    assert refusal(text + " ") == TOO_LONG


def test_text_over_32_kib_is_refused_counting_bytes_not_characters() -> None:
    # 16,385 two-byte characters are fewer than 32 Ki characters but more than 32 KiB.
    text = '{"pad": "' + "é" * (MAX_ARGUMENT_TEXT // 2) + '"}'
    assert len(text) < MAX_ARGUMENT_TEXT < len(text.encode())

    assert refusal(text) == TOO_LONG


def test_the_log_line_never_holds_the_arguments_content(logs: Logs) -> None:
    normalize('{"node": "lucialab01", "password": "hunter2-s3cret"}', skill="db", script="x.py")
    normalize({"query": "DROP TABLE private_stuff"}, "lucialab01")

    text = repr(logs)
    assert len(logs) == 2
    for content in ("hunter2-s3cret", "password", "DROP TABLE", "lucialab01"):
        assert content not in text


def test_every_refusal_starts_with_host() -> None:
    for arguments in ([1], 1, "x", {"node": 1}, {}):
        assert refusal(arguments).startswith("HOST: ")

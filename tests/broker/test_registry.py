"""The tools' definitions the model is sent, and their JSON kept for counting a turn's tokens."""

from __future__ import annotations

import json
from dataclasses import replace

from broker.registry import Registry, Tool
from broker.tiers import Tier


def tool(name: str, implemented: bool = True) -> Tool:
    parameters = {"type": "object", "properties": {}}
    return Tool(name, Tier.READ, f"The {name} tool.", parameters, lambda _c, _a: None,
                implemented=implemented)  # fmt: skip


def test_the_definitions_json_is_the_definitions_and_follows_the_tools():
    registry = Registry()
    registry.add(tool("first"))
    registry.add(tool("later", implemented=False))
    assert json.loads(registry.definitions_json()) == registry.definitions()
    assert [d["function"]["name"] for d in registry.definitions()] == ["first"]

    registry.add(tool("second"))
    registry.add(replace(tool("first"), description="Another text."))
    listed = json.loads(registry.definitions_json())
    assert listed == registry.definitions()
    assert [d["function"]["name"] for d in listed] == ["first", "second"]
    assert listed[0]["function"]["description"] == "Another text."

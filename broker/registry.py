"""Every tool an agent can call: name, tier, description and JSON Schema parameters."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from broker.errors import UnknownTool
from broker.tiers import Tier

if TYPE_CHECKING:
    from broker.context import ToolContext

Handler = Callable[["ToolContext", dict[str, Any]], Any]


@dataclass(frozen=True)
class Tool:
    """One tool an agent can call, with the tier the policy sees."""

    name: str
    tier: Tier
    description: str
    parameters: dict[str, Any]
    handler: Handler
    aliases: tuple[str, ...] = ()
    implemented: bool = True  # a tool not built yet is never listed and fails at once

    def function_definitions(self) -> list[dict[str, Any]]:
        """OpenAI-style function definitions, one for the tool and one per alias."""
        return [
            {
                "type": "function",
                "function": {
                    "name": name,
                    "description": self.description,
                    "parameters": self.parameters,
                },
            }
            for name in (self.name, *self.aliases)
        ]


@dataclass
class Registry:
    """Tools by name and alias."""

    tools: dict[str, Tool] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    # The definitions' JSON, made on first use after the last `add` (tools are frozen).
    _json: str | None = field(default=None, repr=False, compare=False)

    def add(self, tool: Tool) -> None:
        self._json = None
        self.tools[tool.name] = tool
        for name in (tool.name, *tool.aliases):
            self.names[name] = tool.name

    def get(self, name: str) -> Tool:
        try:
            return self.tools[self.names[name]]
        except KeyError:
            raise UnknownTool(f"There is no tool named '{name}'.") from None

    def __iter__(self) -> Iterator[Tool]:
        return iter(self.tools.values())

    def definitions(self) -> list[dict[str, Any]]:
        """Function definitions of the tools that work in this release."""
        return [
            d
            for tool in self.tools.values()
            if tool.implemented
            for d in tool.function_definitions()
        ]

    def definitions_json(self) -> str:
        """`definitions()` as JSON, made again only after a tool was added: every turn counts
        the tokens they take of the model's window."""
        if self._json is None:
            self._json = json.dumps(self.definitions())
        return self._json

"""YAML that people write (SKILL.md headers, policies, the config file), read within bounds.

PyYAML's SafeLoader builds only plain values, but it recurses once per nesting level, and its
aliases let one value stand in many places: a few hundred bytes of anchors nested nine deep
stand for a billion values, which whatever walks the result (the lenient import, JSON, an error
message) would expand. This loader counts every value as it composes the document, each alias
as the whole value it stands for, and refuses a document that would nest deeper than
MAX_YAML_DEPTH or hold more than MAX_YAML_VALUES values once its aliases are written out, or
whose alias stands inside its own anchor. Nothing is built from a refused document.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, SequenceNode

from store.limits import MAX_YAML_DEPTH, MAX_YAML_VALUES


class YamlTooLarge(yaml.composer.ComposerError):
    """Raised when YAML nests too deep or holds too many values, counting what aliases repeat."""


class BoundedSafeLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader refusing documents past MAX_YAML_DEPTH or MAX_YAML_VALUES."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0
        # Per composed node (by id): (values it stands for, levels it nests), aliases expanded.
        self.extent: dict[int, tuple[int, int]] = {}

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if self.depth >= MAX_YAML_DEPTH:
            raise _refusal(_too_deep(), event.start_mark)
        if isinstance(event, AliasEvent):
            target = self.anchors.get(event.anchor)
            if target is not None and id(target) not in self.extent:
                problem = f"the alias *{event.anchor} repeats the value it stands in, endlessly"
                raise _refusal(problem, event.start_mark)
        self.depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self.depth -= 1
        assert node is not None, "an event was peeked, so a node is composed"
        if id(node) not in self.extent:
            self.extent[id(node)] = self._measure(node)
        return node

    def _measure(self, node: Node) -> tuple[int, int]:
        """The values `node` holds and the levels it nests, its children already measured."""
        children: list[Node] = []
        if isinstance(node, SequenceNode):
            children = list(node.value)
        elif isinstance(node, MappingNode):
            children = [child for pair in node.value for child in pair]
        values, levels = 1, 1
        for child in children:
            child_values, child_levels = self.extent[id(child)]
            values += child_values
            levels = max(levels, child_levels + 1)
        if values > MAX_YAML_VALUES:
            problem = f"with its aliases written out it holds more than {MAX_YAML_VALUES:,} values"
            raise _refusal(problem, node.start_mark)
        if levels > MAX_YAML_DEPTH:
            raise _refusal(_too_deep(aliases=True), node.start_mark)
        return values, levels


def load_yaml(text: str) -> Any:
    """`yaml.safe_load` within the bounds; raises yaml.YAMLError (YamlTooLarge past them)."""
    return yaml.load(text, Loader=BoundedSafeLoader)  # noqa: S506 - a SafeLoader


def _refusal(problem: str, mark: Any) -> YamlTooLarge:
    """The refusal, marked where the value that crossed a bound starts (pure or C mark)."""
    return YamlTooLarge(None, None, problem, mark)


def _too_deep(aliases: bool = False) -> str:
    written = "with its aliases written out " if aliases else ""
    return f"{written}it nests deeper than {MAX_YAML_DEPTH} levels"

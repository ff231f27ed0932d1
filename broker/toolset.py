"""The tools skillfleet offers agents, gathered into one registry."""

from __future__ import annotations

from broker import chatreview, skilltools
from broker.registry import Registry


def build_registry() -> Registry:
    """The tools of DESIGN.md section 4."""
    registry = Registry()
    for tool in (*skilltools.TOOLS, *chatreview.TOOLS):
        registry.add(tool)
    return registry

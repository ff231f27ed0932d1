"""The tools skillfleet offers agents, gathered into one registry."""

from __future__ import annotations

from broker import chatreview, fleettools, ownertools, skilltools, webtools
from broker.ownertools import OwnerDesk
from broker.registry import Registry
from store.egress import Egress


def build_registry(egress: Egress | None = None) -> Registry:
    """The tools of DESIGN.md section 4; the web tools reach public hosts and those `egress`
    allows (SKILLFLEET_EGRESS_ALLOW)."""
    registry = Registry()
    for tool in (*skilltools.TOOLS, *chatreview.TOOLS, *webtools.tools(egress), *fleettools.TOOLS):
        registry.add(tool)
    for tool in ownertools.tools(OwnerDesk()):  # wiring gives them the settings' limits
        registry.add(tool)
    return registry

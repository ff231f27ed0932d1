"""Tool tiers: how much a call can change, which decides what the policy does with it."""

from enum import StrEnum


class Tier(StrEnum):
    """The tier of a tool call."""

    READ = "read"
    WEB = "web"
    REGISTRY = "registry"
    CHANGE = "change"
    DESTRUCTIVE = "destructive"
    SECRET = "secret"
    DRAFT = "draft"
    SKILL_EDIT = "skill-edit"


# The tiers a skill may declare in skillfleet.tier for its scripts.
SCRIPT_TIERS: frozenset[Tier] = frozenset({Tier.READ, Tier.CHANGE, Tier.DESTRUCTIVE})

"""Which tools a grant may name: the owner's settings take change tools, a job change and
destructive ones. run_skill_script is never named: it takes each skill's tier and key, so a
skill (`skill:<name>@<hash>`) is granted instead."""

from __future__ import annotations

from broker.classify import RUN
from broker.registry import Tool
from broker.tiers import Tier

JOB_TIERS = (Tier.CHANGE, Tier.DESTRUCTIVE)


def owner_may_allow(tool: Tool) -> bool:
    """Whether the owner's settings can let `tool` run without asking."""
    return tool.tier == Tier.CHANGE and tool.name != RUN


def job_may_grant(tool: Tool) -> bool:
    """Whether a job's grants can name `tool`."""
    return tool.tier in JOB_TIERS and tool.name != RUN

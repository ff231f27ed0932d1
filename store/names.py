"""The one name grammar: skill names and node names are folder names, queue names and keys.

1 to 64 characters of lowercase a-z, digits and hyphens; no hyphen at either end and never two
in a row (the Agent Skills specification). Every layer checks names with this module.
"""

from __future__ import annotations

import re

from store.limits import MAX_NAME_CHARS

NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*", re.ASCII)
HASH = re.compile(r"[0-9a-f]{64}", re.ASCII)

# Where a skill's scripts may run (`skillfleet.execution`, or the owner's choice).
EXECUTIONS = ("node", "spark", "sandbox")
# Neither SKILL.md nor the owner says: the Spark when a Spark worker serves, else a node the
# call names (broker/placement.py decides at each call).
AUTO = "auto"
# Node names that name a shared runner, not a node (relay.naming's queues of the same names).
RUNNERS = ("spark", "sandbox")


def is_valid_name(name: object) -> bool:
    """Whether `name` is a valid skill or node name."""
    return isinstance(name, str) and len(name) <= MAX_NAME_CHARS and bool(NAME.fullmatch(name))


def is_valid_hash(value: object) -> bool:
    """Whether `value` is a full content hash: 64 lowercase hex digits."""
    return isinstance(value, str) and bool(HASH.fullmatch(value))

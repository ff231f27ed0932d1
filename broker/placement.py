"""Where one run_skill_script call runs: the skill's execution and the call's `node`.

A skill's execution is its owner's choice (`PUT /api/skills/<name>/execution`), else what its
SKILL.md declares (`skillfleet.execution`), else `auto`. The call's `node` names one of the
owner's nodes or a shared runner (`spark`, `sandbox`):

| execution | node left out | `"spark"` | `"sandbox"` | one of the owner's nodes |
| --- | --- | --- | --- | --- |
| `node` | refused, naming the live nodes | refused | refused | that node |
| `spark` | the Spark | the Spark | refused | refused |
| `sandbox` | the sandbox | refused | the sandbox | refused |
| `auto` | the Spark if a Spark worker serves, else refused | the Spark | the sandbox | that node |

`auto` is for skills written for a container, as public skills are: the Spark when it serves,
else the node the call names. Whether a Spark worker serves is read from the heartbeats when
the call is made. The call's arguments then name where it runs (`"node": "spark"`), so the
approval the owner answers, and the call an approval resumes, runs there or nowhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

from broker.errors import ArgumentError, NodeNotFound
from broker.fleet import describe_nodes, live_nodes, nodes_hint, usable_node
from relay import heartbeat, naming
from relay.errors import BackendUnavailable
from store.db import SessionFactory
from store.models import Skill
from store.names import AUTO

RUNNERS = (naming.SPARK, naming.SANDBOX)
_RUNNER_NAMES = {naming.SPARK: "the Spark", naming.SANDBOX: "the sandbox"}
NO_NODE = (
    'HOST: arguments has no "node" key; add the server to run on, such as '
    '{{"node": "{example}", ...}}; {hint}.'
)


@dataclass(frozen=True)
class Placement:
    """Where a call runs: `node` with the node's name, or `spark` or `sandbox`."""

    execution: str
    node: str | None = None

    @property
    def target(self) -> str:
        """What the call's `node` says of it: the node's name, or the runner's."""
        return self.node if self.node is not None else self.execution


def place(
    sessions: SessionFactory,
    client: redis.Redis | None,
    owner_id: int,
    skill: Skill,
    node: object,
) -> Placement:
    """Where the call naming `node` (None when left out) runs `skill`'s script, or a
    refusal that says where it may run."""
    named = node if isinstance(node, str) else None
    execution = skill.execution
    if execution in RUNNERS:
        if named not in (None, execution):
            raise NodeNotFound(_runs_on_runner(skill, named))
        return Placement(execution)
    if named in RUNNERS:
        if execution != AUTO:
            raise NodeNotFound(_runs_on_nodes(sessions, client, owner_id, skill, named))
        return Placement(named)
    if named is None:
        if execution == AUTO and _spark_serves(client):
            return Placement(naming.SPARK)
        raise ArgumentError(_no_node(sessions, client, owner_id, execution))
    usable_node(sessions, client, owner_id, named)
    return Placement("node", named)


def with_target(arguments: dict[str, Any], placement: Placement) -> dict[str, Any]:
    """The call's arguments naming where it runs, as the owner's approval shows them."""
    return {**arguments, "node": placement.target}


def _spark_serves(client: redis.Redis | None) -> bool:
    if client is None:
        return False
    try:
        return bool(heartbeat.live_workers(client, naming.SPARK))
    except redis.RedisError as e:
        raise BackendUnavailable("Redis can't be reached to see whether the Spark runs.") from e


def _no_node(
    sessions: SessionFactory, client: redis.Redis | None, owner_id: int, execution: str
) -> str:
    found = live_nodes(sessions, client, owner_id)
    hint = describe_nodes(found)
    if execution == AUTO:
        return (
            "HOST: no Spark worker is running, so name the node to run this on in "
            f'arguments.node (or "sandbox" for a micro-VM); {hint}.'
        )
    example = (found.live or found.first or ["<node>"])[0]
    return NO_NODE.format(example=example, hint=hint)


def _runs_on_runner(skill: Skill, named: str) -> str:
    where = _RUNNER_NAMES[skill.execution]
    return (
        f"HOST: the skill '{skill.name}' runs on {where} only, not on {named[:64]!r}; leave "
        f'out node, or send "{skill.execution}".'
    )


def _runs_on_nodes(
    sessions: SessionFactory, client: redis.Redis | None, owner_id: int, skill: Skill, named: str
) -> str:
    hint = nodes_hint(sessions, client, owner_id)
    return (
        f"HOST: the skill '{skill.name}' runs on nodes only, not on {_RUNNER_NAMES[named]}; "
        f"{hint}. Its owner may let it run there: skillfleet skills execution {skill.name} "
        f"{named}."
    )

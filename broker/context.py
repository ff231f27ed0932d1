"""What a tool handler sees of the call it serves."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import redis

from store.db import SessionFactory
from store.models import Chat, ToolCall
from store.skills import SkillStore

if TYPE_CHECKING:
    from broker.classify import CallPlan


@dataclass(frozen=True)
class RunStarted:
    """A handler's answer when it started a run: the call stays `running` until it ends."""

    run_id: str


class Dispatcher(Protocol):
    """Turns an allowed run_skill_script call into work for a runner."""

    def dispatch(self, context: ToolContext) -> dict[str, Any] | RunStarted: ...


@dataclass(frozen=True)
class ToolContext:
    call_id: str
    owner_id: int
    store: SkillStore
    sessions: SessionFactory
    plan: CallPlan
    dispatcher: Dispatcher
    call: ToolCall
    chat: Chat | None = None
    job_run_id: str | None = None
    turn_id: str | None = None
    mode: str = "execute"
    # Commands (a decision's count) for the Redis round trip that announces a started run.
    riders: Sequence[Callable[[Any], object]] = ()
    # The fleet's heartbeats (list_nodes); None where the broker has no Redis.
    redis: redis.Redis | None = None
    # load_skill answers with the content even when the chat loaded it (broker/loaded.py).
    full_loads: bool = False


class RecordingDispatcher:
    """Dry-run mode (SKILLFLEET_DRY_RUN): records what a run would dispatch, runs nothing.

    Lets an operator try a policy against real agents before any runner is connected.
    """

    def dispatch(self, context: ToolContext) -> dict[str, Any]:
        plan = context.plan
        if plan.command is not None:
            return {
                "dispatched": False,
                "note": "Dry-run mode: the command was not run; this is what would run.",
                "would_dispatch": {"node": plan.node, "command": list(plan.command.argv)},
            }
        assert plan.skill is not None
        return {
            "dispatched": False,
            "note": "Dry-run mode: the script was not run; this is what would run.",
            "would_dispatch": {
                "skill": plan.skill.name,
                "hash": plan.skill.hash,
                "script": plan.script,
                "execution": plan.execution or plan.skill.execution,
                "node": plan.node,
                "arguments": plan.script_arguments,
                "args": list(plan.argv),
                "files": plan.files,
            },
        }

"""What a tool handler sees of the call it serves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from store.db import SessionFactory
from store.models import Chat
from store.skills import SkillStore

if TYPE_CHECKING:
    from broker.classify import CallPlan


class Dispatcher(Protocol):
    """Turns an allowed run_skill_script call into work for a runner."""

    def dispatch(self, context: ToolContext) -> dict[str, Any]: ...


@dataclass(frozen=True)
class ToolContext:
    call_id: str
    owner_id: int
    store: SkillStore
    sessions: SessionFactory
    plan: CallPlan
    dispatcher: Dispatcher
    chat: Chat | None = None
    job_run_id: str | None = None
    turn_id: str | None = None
    mode: str = "execute"


class RecordingDispatcher:
    """Records what a run would dispatch, for deployments without runners."""

    def dispatch(self, context: ToolContext) -> dict[str, Any]:
        plan = context.plan
        assert plan.skill is not None
        return {
            "dispatched": False,
            "note": "No runner is configured, so the script was not run; this is what would run.",
            "would_dispatch": {
                "skill": plan.skill.name,
                "hash": plan.skill.hash,
                "script": plan.script,
                "execution": plan.skill.execution,
                "node": plan.node,
                "arguments": plan.script_arguments,
            },
        }

"""What a tool handler sees of the call it serves."""

from __future__ import annotations

from dataclasses import dataclass

from store.db import SessionFactory
from store.models import Chat
from store.skills import SkillStore


@dataclass(frozen=True)
class ToolContext:
    call_id: str
    owner_id: int
    store: SkillStore
    sessions: SessionFactory
    chat: Chat | None = None
    job_run_id: str | None = None
    turn_id: str | None = None
    mode: str = "execute"

"""Grants: keys that let matching calls run without asking, per chat, per job or for the owner."""

from __future__ import annotations

from dataclasses import dataclass, replace

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from store.models import Grant

CHAT = "chat"
JOB = "job"
OWNER = "owner"
SCOPES = (CHAT, JOB, OWNER)
OWNER_SUBJECT = "settings"
HOST = "host:"


@dataclass(frozen=True)
class GrantSet:
    """The keys that apply to one call, by scope."""

    chat: frozenset[str] = frozenset()
    job: frozenset[str] = frozenset()
    owner: frozenset[str] = frozenset()

    def with_chat(self, keys: frozenset[str]) -> GrantSet:
        """These grants with `keys` added to the chat's."""
        return replace(self, chat=self.chat | keys) if keys else self


def tool_key(tool: str) -> str:
    return f"tool:{tool}"


def host_key(host: str) -> str:
    """The key of a host read_web_page may read (broker/webtools.py says how a host is written)."""
    return f"{HOST}{host}"


def is_host_key(key: str) -> bool:
    return key.startswith(HOST)


def grants_for(
    session: Session, owner_id: int, chat_id: int | None, job_id: str | None
) -> GrantSet:
    """Every grant of the owner that a call in this chat or job may use (one query)."""
    rows = session.execute(
        select(Grant.scope, Grant.subject, Grant.key).where(Grant.owner_id == owner_id)
    )
    chat: set[str] = set()
    job: set[str] = set()
    owner: set[str] = set()
    for scope, subject, key in rows:
        if scope == CHAT and chat_id is not None and subject == str(chat_id):
            chat.add(key)
        elif scope == JOB and job_id is not None and subject == job_id:
            job.add(key)
        elif scope == OWNER:
            owner.add(key)
    return GrantSet(frozenset(chat), frozenset(job), frozenset(owner))


def add_grant(
    session: Session, owner_id: int, scope: str, subject: str, key: str, chat_id: int | None = None
) -> None:
    """Add a grant; adding one that exists changes nothing."""
    exists = session.scalar(
        select(Grant.id).where(
            Grant.owner_id == owner_id,
            Grant.scope == scope,
            Grant.subject == subject,
            Grant.key == key,
        )
    )
    if exists is None:
        try:
            with session.begin_nested():
                session.add(
                    Grant(owner_id=owner_id, scope=scope, subject=subject, key=key, chat_id=chat_id)
                )
        except IntegrityError:  # a concurrent answer added it first
            pass


def owner_keys(session: Session, owner_id: int) -> list[str]:
    query = select(Grant.key).where(Grant.owner_id == owner_id, Grant.scope == OWNER)
    return sorted(session.scalars(query))


def set_owner_keys(session: Session, owner_id: int, keys: list[str]) -> None:
    """Replace the owner's settings: the change tools that run without asking."""
    session.execute(delete(Grant).where(Grant.owner_id == owner_id, Grant.scope == OWNER))
    for key in sorted(set(keys)):
        session.add(Grant(owner_id=owner_id, scope=OWNER, subject=OWNER_SUBJECT, key=key))

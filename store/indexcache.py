"""What calls read of the skills index, kept per process while the index is unchanged.

Every tool call that names a skill looks it up, and every list_skills reads 200 rows: the same
answers, call after call, until a skill changes. The index has a generation, a counter kept
outside the database (Redis, see `api.services`) and bumped after every commit that changed a
skill row, in any process (`watch`). A request reads it once, with its token check, and sets it
in `SEEN` for the store; a read under the same generation, at most SECONDS old, is answered
from memory. Without a generation (outside a request, or Redis away) every read goes to the
database.

A request that commits a skill change reads the database from then on (its `SEEN` is cleared),
so it reads what it wrote; other requests do from the bump on. If a bump is lost (Redis away at
that moment), the other processes hold what they read for SECONDS at most.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from contextvars import ContextVar
from typing import Any, TypeVar

import structlog
from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

from store.models import Skill

log = structlog.get_logger(__name__)

# The index generation the current request read (bytes as Redis holds it), or None.
SEEN: ContextVar[bytes | None] = ContextVar("skillfleet_index_generation", default=None)
_CHANGED = "skillfleet.skills_changed"
_Value = TypeVar("_Value")


class IndexCache:
    """Answers kept by key, each with the generation it was read under."""

    SECONDS = 5.0
    SIZE = 4096

    def __init__(self) -> None:
        self._kept: dict[Hashable, tuple[bytes, float, Any]] = {}
        self._lock = threading.Lock()

    def read(self, key: Hashable, load: Callable[[], _Value]) -> _Value:
        """The answer for `key` read under the request's generation, else `load()`'s."""
        generation = SEEN.get()
        if generation is None:
            return load()
        now = time.monotonic()
        kept = self._kept.get(key)
        if kept is not None and kept[0] == generation and kept[1] > now:
            value: _Value = kept[2]
            return value
        value = load()
        with self._lock:
            if len(self._kept) >= self.SIZE:
                self._kept.clear()
            self._kept[key] = (generation, now + self.SECONDS, value)
        return value

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()


def watch(sessions: sessionmaker[Session], cache: IndexCache, bump: Callable[[], object]) -> None:
    """After each commit of `sessions` that added, changed or removed a skill row: forget this
    process's answers, read the database for the rest of the request, and `bump()` the
    generation so every other process does too (best effort: a lost bump is logged)."""

    @event.listens_for(sessions, "after_flush")
    def note(session: Session, _context: Any) -> None:
        touched = (*session.new, *session.dirty, *session.deleted)
        if any(isinstance(row, Skill) for row in touched):
            session.info[_CHANGED] = True

    @event.listens_for(sessions, "after_commit")
    def announce(session: Session) -> None:
        if not session.info.pop(_CHANGED, False):
            return
        cache.clear()
        SEEN.set(None)
        try:
            bump()
        except Exception as e:  # noqa: BLE001 - the change stands; other processes catch up
            log.warning("skills index generation not bumped", error_type=type(e).__name__)

    @event.listens_for(sessions, "after_soft_rollback")
    def forget(session: Session, _transaction: Any) -> None:
        session.info.pop(_CHANGED, None)

"""The owner's secrets (request_secret, /api/secrets): sealed at rest, listed by name only.

A secret belongs to its owner and, when `skill` is named, to that skill alone ("" stands for
none in the table, so the unique key holds). Values leave here only unsealed for a run's
environment; nothing else ever reads them.
"""

from __future__ import annotations

from sqlalchemy import Select, delete, select
from sqlalchemy.orm import Session

from store.models import OwnerSecret, utcnow
from store.secrets import Sealer


def put(
    session: Session, sealer: Sealer, owner_id: int, name: str, value: str, skill: str | None
) -> OwnerSecret:
    """Store or replace the owner's secret `name` (of `skill`, when given)."""
    row = session.scalar(_one(owner_id, name, skill))
    if row is None:
        row = OwnerSecret(owner_id=owner_id, name=name, skill_name=skill or "")
        session.add(row)
    row.value = sealer.seal(value)
    row.updated_at = utcnow()
    session.flush()
    return row


def listed(session: Session, owner_id: int) -> list[OwnerSecret]:
    """The owner's secrets, by skill then name (their values stay sealed)."""
    query = select(OwnerSecret).where(OwnerSecret.owner_id == owner_id)
    return list(session.scalars(query.order_by(OwnerSecret.skill_name, OwnerSecret.name)))


def remove(session: Session, owner_id: int, name: str, skill: str | None) -> bool:
    """Delete one secret; False when there was none."""
    gone = session.execute(
        delete(OwnerSecret).where(
            OwnerSecret.owner_id == owner_id,
            OwnerSecret.name == name,
            OwnerSecret.skill_name == (skill or ""),
        )
    )
    return int(gone.rowcount) == 1  # type: ignore[attr-defined]


def _one(owner_id: int, name: str, skill: str | None) -> Select[OwnerSecret]:
    return select(OwnerSecret).where(
        OwnerSecret.owner_id == owner_id,
        OwnerSecret.name == name,
        OwnerSecret.skill_name == (skill or ""),
    )

"""Owners and bearer tokens. A token is shown once; only its SHA-256 is stored."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, joinedload

from store.models import ApiToken, Owner, utcnow

TOKEN_PREFIX = "sf_"


@dataclass(frozen=True)
class Principal:
    """Who a request acts for: an owner, or a node agent limited to its own node."""

    kind: str
    owner_id: int | None = None
    owner_name: str | None = None
    node_name: str | None = None


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def ensure_owner(session: Session, name: str) -> Owner:
    owner = session.scalar(select(Owner).where(Owner.name == name))
    if owner is None:
        owner = Owner(name=name)
        session.add(owner)
        session.flush()
    return owner


def create_owner_token(
    session: Session, owner_name: str, token: str | None = None, label: str | None = None
) -> str:
    """Create (or reuse) the owner and store a new token for it; returns the token text."""
    owner = ensure_owner(session, owner_name)
    token = token or new_token()
    digest = token_digest(token)
    existing = session.scalar(select(ApiToken).where(ApiToken.token_hash == digest))
    if existing is None:
        session.add(ApiToken(token_hash=digest, kind="owner", owner_id=owner.id, label=label))
    elif existing.owner_id != owner.id:
        raise ValueError("That token already belongs to another owner.")
    return token


def create_node_token(session: Session, node_name: str) -> str:
    token = new_token()
    session.add(ApiToken(token_hash=token_digest(token), kind="node", node_name=node_name))
    return token


def authenticate(session: Session, token: str) -> Principal | None:
    """The principal a bearer token stands for, or None for an unknown token."""
    query = (
        select(ApiToken)
        .options(joinedload(ApiToken.owner))
        .where(ApiToken.token_hash == token_digest(token))
    )
    row = session.scalar(query)
    if row is None:
        return None
    now = utcnow()
    last = row.last_used_at
    # Record use at most once a minute, so reads don't turn into writes.
    if last is None or (now - last).total_seconds() > 60:
        row.last_used_at = now
    if row.kind == "node":
        return Principal(kind="node", node_name=row.node_name)
    owner = row.owner
    return Principal(kind="owner", owner_id=row.owner_id, owner_name=owner.name if owner else None)

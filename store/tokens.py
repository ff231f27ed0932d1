"""Owners and bearer tokens. A token is shown once; only its SHA-256 is stored.

An owner's token has a role: `owner` does everything of that owner, `agent` calls tools and
reads (so an agent can never answer the approvals its own calls asked for). Node agents hold
node tokens, which have no role.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, joinedload

from store.errors import InvalidTokenLabel, InvalidTokenRole, TokenNotFound, TooManyTokens
from store.limits import MAX_OWNER_TOKENS, MAX_TOKEN_LABEL_CHARS
from store.models import ApiToken, Owner, utcnow

TOKEN_PREFIX = "sf_"
OWNER_KIND = "owner"
NODE_KIND = "node"


class Role(StrEnum):
    """What an owner's token may do."""

    OWNER = "owner"
    AGENT = "agent"


@dataclass(frozen=True)
class Principal:
    """Who a request acts for: an owner (by its own or an agent token), or a node agent."""

    kind: str
    role: Role | None = None
    owner_id: int | None = None
    owner_name: str | None = None
    node_name: str | None = None
    # An OAuth agent token's resource (the /mcp URL it is bound to); None: any route.
    resource: str | None = None
    token_id: int | None = None
    expires_at: datetime | None = None


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


def create_token(
    session: Session,
    owner_name: str,
    role: Role | str,
    label: str | None = None,
    token: str | None = None,
) -> str:
    """Create (or reuse) the owner and store a new token of `role`; returns the token text.

    A given `token` already stored for that owner and role is kept as it is (a bootstrap token
    registered again at every start).
    """
    role = check_role(role)
    owner = ensure_owner(session, owner_name)
    token = token or new_token()
    existing = session.scalar(select(ApiToken).where(ApiToken.token_hash == token_digest(token)))
    if existing is None:
        issue_token(session, owner.id, role, label, token)
    elif existing.owner_id != owner.id or existing.role != role:
        raise ValueError("That token is already stored for another owner or role.")
    return token


def create_owner_token(
    session: Session, owner_name: str, token: str | None = None, label: str | None = None
) -> str:
    """An owner token (role `owner`) for `owner_name`; see `create_token`."""
    return create_token(session, owner_name, Role.OWNER, label, token)


def issue_token(
    session: Session,
    owner_id: int,
    role: Any,
    label: Any,
    token: str | None = None,
    expires_at: datetime | None = None,
) -> tuple[ApiToken, str]:
    """Store a new token of the owner after checking role, label and the owner's token count
    (its expired tokens are deleted first: they count for nothing; an MCP host's OAuth token
    stays, since its refresh token brings it back)."""
    checked_role = check_role(role)
    checked_label = check_label(label)
    session.execute(
        delete(ApiToken).where(
            ApiToken.owner_id == owner_id,
            ApiToken.expires_at <= utcnow(),
            ApiToken.resource.is_(None),
        )
    )
    held = session.scalar(select(func.count()).where(ApiToken.owner_id == owner_id)) or 0
    if held >= MAX_OWNER_TOKENS:
        raise TooManyTokens(
            f"An owner holds at most {MAX_OWNER_TOKENS} tokens; delete one you no longer use."
        )
    token = token or new_token()
    row = ApiToken(
        token_hash=token_digest(token),
        kind=OWNER_KIND,
        role=checked_role.value,
        owner_id=owner_id,
        label=checked_label,
        expires_at=expires_at,
    )
    session.add(row)
    session.flush()
    return row, token


def check_role(role: Any) -> Role:
    if not isinstance(role, str):
        raise InvalidTokenRole("Give the token a role: the string 'owner' or 'agent'.")
    try:
        return Role(role)
    except ValueError:
        raise InvalidTokenRole(f"A token's role is 'owner' or 'agent', not {role!r}.") from None


def check_label(label: Any) -> str | None:
    if label is None or label == "":
        return None
    if not isinstance(label, str):
        raise InvalidTokenLabel("The label must be a string.")
    if len(label) > MAX_TOKEN_LABEL_CHARS:
        raise InvalidTokenLabel(
            f"The label has {len(label)} characters; at most {MAX_TOKEN_LABEL_CHARS} are allowed."
        )
    if any(ord(char) < 32 or ord(char) == 127 for char in label):
        raise InvalidTokenLabel("The label may not hold line breaks or other control characters.")
    return label


def owner_tokens(session: Session, owner_id: int) -> list[ApiToken]:
    """The owner's tokens (owner and agent), oldest first."""
    query = select(ApiToken).where(ApiToken.owner_id == owner_id).order_by(ApiToken.id)
    return list(session.scalars(query))


def revoke_token(session: Session, owner_id: int, token_id: int) -> None:
    """Delete one of the owner's tokens; another owner's id is answered as unknown."""
    # An id past what the column holds can't name a token (and would overflow the driver).
    row = session.get(ApiToken, token_id) if 0 < token_id < 2**31 else None
    if row is None or row.kind != OWNER_KIND or row.owner_id != owner_id:
        raise TokenNotFound(f"You have no token with id {token_id}.")
    session.delete(row)


def create_node_token(session: Session, node_name: str) -> str:
    token = new_token()
    session.add(ApiToken(token_hash=token_digest(token), kind=NODE_KIND, node_name=node_name))
    return token


def authenticate(session: Session, token: str) -> Principal | None:
    """The principal a bearer token stands for, or None for an unknown token."""
    query = (
        select(ApiToken)
        .options(joinedload(ApiToken.owner))
        .where(ApiToken.token_hash == token_digest(token))
    )
    row = session.scalar(query)
    now = utcnow()
    if row is None or (row.expires_at is not None and row.expires_at <= now):
        return None  # an OAuth access token past its time (the host refreshes it), a sign-in's
    last = row.last_used_at
    # Record use at most once a minute, so reads don't turn into writes.
    if last is None or (now - last).total_seconds() > 60:
        row.last_used_at = now
    if row.kind == NODE_KIND:
        return Principal(kind=NODE_KIND, node_name=row.node_name)
    owner = row.owner
    return Principal(
        kind=OWNER_KIND,
        # The schema forbids an owner token without a role; were one there, it gets the least.
        role=Role(row.role) if row.role else Role.AGENT,
        owner_id=row.owner_id,
        owner_name=owner.name if owner else None,
        resource=row.resource,
        token_id=row.id,
        expires_at=row.expires_at,
    )

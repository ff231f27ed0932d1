"""OAuth grants for MCP hosts: an authorization request, the owner's answer, its code, and the
tokens the code is exchanged for.

    opened --owner signs in--> signed in --Allow--> code issued --exchanged--> used
                                         \\--Deny--> (grant deleted)

The access token a host gets is an agent token of the owner who allowed it (store/tokens.py),
labelled with the client's name and bound to the resource it was asked for (the /mcp URL,
RFC 8707): the owner's token list shows it, deleting it ends the host's access. A refresh token
rotates at each use, and the agent token's secret with it (the token keeps its id and label);
a refresh token used a second time, or a code presented again, deletes the agent token and with
it every refresh token of it. Secrets (request ids, sessions, codes, refresh tokens) are stored
as their SHA-256 only.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from store.errors import StoreError
from store.limits import (
    OAUTH_ACCESS_SECONDS,
    OAUTH_CODE_SECONDS,
    OAUTH_CONSENT_SECONDS,
    OAUTH_REFRESH_SECONDS,
)
from store.models import ApiToken, OAuthGrant, OAuthRefreshToken, utcnow
from store.tokens import Role, issue_token, new_token, token_digest

REFRESH_PREFIX = "sfr_"


class GrantRefused(StoreError):
    """Raised when an authorization request can't be answered as asked; `code` says why."""

    code = "authorization_refused"
    status = 400


class GrantNotFound(GrantRefused):
    """Raised when no open authorization request has that id (unknown, expired or answered)."""

    code = "authorization_not_found"
    status = 404


class RefreshReused(GrantRefused):
    """Raised when a refresh token is used a second time: its family is to be revoked."""

    code = "invalid_grant"

    def __init__(self, message: str, token_id: int) -> None:
        super().__init__(message)
        self.token_id = token_id


class AnotherOwner(GrantRefused):
    """Raised when an owner answers an authorization another owner signed in to."""

    code = "another_owners_authorization"
    status = 403


class NotSignedIn(GrantRefused):
    """Raised when the answer comes without this authorization's sign-in (or its CSRF token)."""

    code = "not_signed_in"
    status = 403


@dataclass(frozen=True)
class Issued:
    """Tokens given to a host: the agent token's secret, its lifetime and its refresh token."""

    access_token: str
    expires_in: int
    refresh_token: str
    token_id: int


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def csrf_token(key: str, request_id: str) -> str:
    """The form token of an authorization's page: derived from its sign-in session (or, on
    the sign-in form, from nothing the page's visitor lacks), never stored."""
    return hmac.new(key.encode(), request_id.encode(), hashlib.sha256).hexdigest()


def open_grant(
    session: Session,
    client_id: str,
    redirect_uri: str,
    redirect_uri_explicit: bool,
    code_challenge: str,
    state: str | None,
    scopes: list[str],
    resource: str,
) -> str:
    """Store an authorization request; returns its id (shown in the consent page's URL)."""
    session.execute(delete(OAuthGrant).where(OAuthGrant.expires_at < utcnow()))
    request_id = secrets.token_urlsafe(32)
    session.add(
        OAuthGrant(
            request_hash=digest(request_id),
            client_id=client_id,
            redirect_uri=redirect_uri,
            redirect_uri_explicit=redirect_uri_explicit,
            code_challenge=code_challenge,
            state=state,
            scopes=" ".join(scopes),
            resource=resource,
            expires_at=utcnow() + timedelta(seconds=OAUTH_CONSENT_SECONDS),
        )
    )
    session.flush()
    return request_id


def pending_grant(session: Session, request_id: str) -> OAuthGrant:
    """The authorization request `request_id` while it waits for the owner's answer."""
    row = session.scalar(select(OAuthGrant).where(OAuthGrant.request_hash == digest(request_id)))
    if row is None or row.expires_at < utcnow() or row.decided_at is not None:
        raise GrantNotFound(
            "This authorization request is unknown, was answered or has expired; "
            "start again from the MCP host."
        )
    return row


def sign_in(session: Session, request_id: str, owner_id: int) -> str:
    """Bind the request to the owner who signed in on its page; returns the sign-in session
    (a cookie). Another owner may not take over a request one owner signed in to."""
    row = pending_grant(session, request_id)
    if row.owner_id is not None and row.owner_id != owner_id:
        raise AnotherOwner("Another owner signed in to this authorization request.")
    signed = secrets.token_urlsafe(32)
    row.owner_id = owner_id
    row.session_hash = digest(signed)
    return signed


def signed_in_grant(session: Session, request_id: str, signed: str, csrf: str) -> OAuthGrant:
    """The request, when `signed` is its sign-in session and `csrf` the form token of it."""
    row = pending_grant(session, request_id)
    if row.session_hash is None or not hmac.compare_digest(row.session_hash, digest(signed)):
        raise NotSignedIn(
            "Sign in on this authorization's page first: this browser is not signed in to it."
        )
    if not hmac.compare_digest(csrf, csrf_token(signed, request_id)):
        raise NotSignedIn("The form's CSRF token does not match this sign-in; reload the page.")
    return row


def allow(session: Session, row: OAuthGrant) -> str:
    """The owner's Allow: a code for the host (one use, OAUTH_CODE_SECONDS)."""
    code = secrets.token_urlsafe(32)
    now = utcnow()
    row.code_hash = digest(code)
    row.decided_at = now
    row.expires_at = now + timedelta(seconds=OAUTH_CODE_SECONDS)
    return code


def deny(session: Session, row: OAuthGrant) -> None:
    session.delete(row)


def find_code(session: Session, client_id: str, code: str) -> tuple[OAuthGrant | None, bool]:
    """The grant `code` was issued for, unused and of `client_id`, and whether a token was
    revoked: a code presented again deletes the agent token it was exchanged for (OAuth 2.1
    §4.1.3)."""
    row = session.scalar(select(OAuthGrant).where(OAuthGrant.code_hash == digest(code)))
    if row is None or row.client_id != client_id:
        return None, False
    if row.used_at is not None:
        if row.token_id is not None:
            revoke_family(session, row.token_id)
            return None, True
        return None, False
    return row, False


def exchange_code(session: Session, row: OAuthGrant, label: str) -> Issued:
    """Tokens for a grant's code: marked used first, so a racing second exchange gets none."""
    now = utcnow()
    taken = session.execute(
        update(OAuthGrant)
        .where(OAuthGrant.id == row.id, OAuthGrant.used_at.is_(None))
        .values(used_at=now)
    )
    if taken.rowcount != 1 or row.owner_id is None:  # type: ignore[attr-defined]
        raise GrantRefused("This code was already used.")
    token_row, access = issue_token(session, row.owner_id, Role.AGENT.value, label)
    token_row.resource = row.resource
    token_row.expires_at = now + timedelta(seconds=OAUTH_ACCESS_SECONDS)
    row.token_id = token_row.id
    refresh = _new_refresh(session, token_row.id, row.client_id, row.scopes)
    return Issued(access, OAUTH_ACCESS_SECONDS, refresh, token_row.id)


def find_refresh(
    session: Session, client_id: str, token: str
) -> tuple[OAuthRefreshToken | None, bool]:
    """The refresh token, unused and unexpired, of `client_id`, and whether a token was
    revoked: one used before revokes its whole family (the agent token and all its refresh
    tokens) and is answered as unknown."""
    row = session.scalar(
        select(OAuthRefreshToken).where(OAuthRefreshToken.token_hash == digest(token))
    )
    if row is None or row.client_id != client_id:
        return None, False
    if row.used_at is not None:
        revoke_family(session, row.token_id)
        return None, True
    return (None if row.expires_at < utcnow() else row), False


def refresh_row(session: Session, client_id: str, token: str) -> OAuthRefreshToken | None:
    """The refresh token of `client_id`, used or not (rotate() refuses a used one), or None
    when unknown or expired."""
    row = session.scalar(
        select(OAuthRefreshToken).where(OAuthRefreshToken.token_hash == digest(token))
    )
    if row is None or row.client_id != client_id or row.expires_at < utcnow():
        return None
    return row


def rotate(session: Session, row: OAuthRefreshToken) -> Issued:
    """Use a refresh token: a new one, and a new secret for its agent token (same id, label
    and resource; the old secret is refused from now on)."""
    now = utcnow()
    taken = session.execute(
        update(OAuthRefreshToken)
        .where(OAuthRefreshToken.id == row.id, OAuthRefreshToken.used_at.is_(None))
        .values(used_at=now)
    )
    if taken.rowcount != 1:  # type: ignore[attr-defined]
        raise RefreshReused(
            "This refresh token was already used; the host's access is revoked.", row.token_id
        )
    token_row = session.get(ApiToken, row.token_id)
    if token_row is None:
        raise GrantRefused("The agent token of this refresh token was deleted.")
    access = new_token()
    token_row.token_hash = token_digest(access)
    token_row.expires_at = now + timedelta(seconds=OAUTH_ACCESS_SECONDS)
    refresh = _new_refresh(session, token_row.id, row.client_id, row.scopes)
    return Issued(access, OAUTH_ACCESS_SECONDS, refresh, token_row.id)


def revoke_family(session: Session, token_id: int) -> None:
    """Delete an OAuth agent token and its refresh tokens (the caller announces it)."""
    session.execute(delete(OAuthRefreshToken).where(OAuthRefreshToken.token_id == token_id))
    session.execute(delete(ApiToken).where(ApiToken.id == token_id, ApiToken.resource.is_not(None)))


def access_client(session: Session, token: str) -> tuple[str, ApiToken] | None:
    """The client an OAuth access token was issued to, with its agent token; None for any
    other token."""
    access = session.scalar(select(ApiToken).where(ApiToken.token_hash == token_digest(token)))
    if access is None or access.resource is None:
        return None
    issued = session.scalar(select(OAuthGrant).where(OAuthGrant.token_id == access.id))
    return None if issued is None else (issued.client_id, access)


def family_of(session: Session, client_id: str, token: str) -> int | None:
    """The agent token an access or refresh token of `client_id` belongs to (RFC 7009)."""
    refresh = session.scalar(
        select(OAuthRefreshToken).where(OAuthRefreshToken.token_hash == digest(token))
    )
    if refresh is not None:
        return refresh.token_id if refresh.client_id == client_id else None
    found = access_client(session, token)
    return found[1].id if found is not None and found[0] == client_id else None


def expires(at: datetime) -> float:
    return at.timestamp()


def _new_refresh(session: Session, token_id: int, client_id: str, scopes: str) -> str:
    # Used ones are kept while they could still be presented (reuse is detected by them).
    session.execute(delete(OAuthRefreshToken).where(OAuthRefreshToken.expires_at < utcnow()))
    refresh = REFRESH_PREFIX + secrets.token_urlsafe(32)
    session.add(
        OAuthRefreshToken(
            token_hash=digest(refresh),
            token_id=token_id,
            client_id=client_id,
            scopes=scopes,
            expires_at=utcnow() + timedelta(seconds=OAUTH_REFRESH_SECONDS),
        )
    )
    session.flush()
    return refresh

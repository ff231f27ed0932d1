"""The OAuth clients MCP hosts sign in as: named by the URL of their metadata document (CIMD,
fetched and kept here), or registered by the host itself (RFC 7591 dynamic registration).

A CIMD client's `client_id` is an https URL whose JSON document describes it (its name, its
redirect URIs). The document is fetched through the same egress checks as a webhook
(store/egress.py): never from a private address (unless the operator listed the host in
SKILLFLEET_EGRESS_ALLOW, which then may also be plain http), within CLIENT_DOCUMENT_SECONDS,
at most MAX_CLIENT_DOCUMENT_BYTES; its `client_id` must be its own URL. A fetched document is
kept for CLIENT_DOCUMENT_TTL seconds, then fetched again.

A registered client's name is its own claim: the consent page says so, and shows where the
owner's answer will be sent.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
import pydantic
from mcp.shared.auth import OAuthClientInformationFull
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from store.deadlines import Deadline
from store.egress import Egress, read_at_most
from store.errors import StoreError
from store.limits import (
    CLIENT_DOCUMENT_SECONDS,
    CLIENT_DOCUMENT_TTL,
    MAX_CLIENT_DOCUMENT_BYTES,
    MAX_CLIENT_URL_CHARS,
    MAX_OAUTH_CLIENTS,
    MAX_TOKEN_LABEL_CHARS,
)
from store.models import OAuthClient, utcnow

# Schemes a redirect may never use: the browser would run or read them, not return to a host.
REFUSED_SCHEMES = ("javascript", "data", "file", "vbscript", "blob", "about")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


class ClientRefused(StoreError):
    """Raised when a client's metadata (registered or fetched) can't be used."""

    code = "invalid_client_metadata"
    status = 400


def is_document_url(client_id: str) -> bool:
    """Whether `client_id` names a metadata document (CIMD) rather than a registered client."""
    return client_id.startswith(("https://", "http://"))


def find_client(session: Session, client_id: str) -> OAuthClient | None:
    """The client stored as `client_id`, fresh enough to use (a document fetched within the
    TTL); None otherwise."""
    row = session.scalar(select(OAuthClient).where(OAuthClient.client_id == client_id))
    if row is None:
        return None
    stale = utcnow() - row.fetched_at > timedelta(seconds=CLIENT_DOCUMENT_TTL)
    return None if row.document_url is not None and stale else row


def register_client(session: Session, info: dict[str, Any]) -> OAuthClient:
    """Store a client that registered itself; `info` is its RFC 7591 metadata as answered."""
    _check_room(session)
    for uri in info.get("redirect_uris") or []:
        check_redirect_uri(str(uri))
    row = OAuthClient(
        client_id=info["client_id"], name=display_name(info), document_url=None, info=info
    )
    session.add(row)
    session.flush()
    return row


def fetch_document(url: str, egress: Egress) -> dict[str, Any]:
    """The client metadata document at `url`, checked; ClientRefused (or EgressRefused) says
    why it can't be used."""
    check_document_url(url, egress)
    deadline = Deadline.after(CLIENT_DOCUMENT_SECONDS)
    try:
        with (
            egress.client(deadline, follow_redirects=False) as client,
            client.stream("GET", url, headers={"Accept": "application/json"}) as response,
        ):
            if response.status_code != 200:
                raise ClientRefused(
                    f"The client's metadata document at {url} answered {response.status_code}."
                )
            body = read_at_most(response, MAX_CLIENT_DOCUMENT_BYTES)
    except httpx.HTTPError as e:
        raise ClientRefused(f"The client's metadata document at {url} can't be read: {e}.") from e
    if body is None:
        raise ClientRefused(
            f"The client's metadata document at {url} is over "
            f"{MAX_CLIENT_DOCUMENT_BYTES} bytes, the most one may hold."
        )
    return _document(url, body)


def save_document(session: Session, url: str, document: dict[str, Any]) -> OAuthClient:
    """Keep (or refresh) the client a fetched document describes."""
    row = session.scalar(select(OAuthClient).where(OAuthClient.client_id == url))
    if row is None:
        _check_room(session)
        row = OAuthClient(client_id=url, document_url=url)
        session.add(row)
    row.name = display_name(document)
    row.info = document
    row.fetched_at = utcnow()
    session.flush()
    return row


def check_document_url(url: str, egress: Egress) -> None:
    """Refuse a CIMD client_id that is no https URL with a path (http only for hosts the
    operator allowed), or whose host may not be reached."""
    if len(url) > MAX_CLIENT_URL_CHARS:
        raise ClientRefused(f"A client_id URL has at most {MAX_CLIENT_URL_CHARS} characters.")
    try:
        parts = urlsplit(url)
    except ValueError as e:
        raise ClientRefused(f"The client_id '{url}' is not a URL: {e}.") from e
    if parts.scheme != "https" and not (
        parts.scheme == "http" and egress.allows_host(parts.hostname or "")
    ):
        raise ClientRefused("A client_id URL must be https (its metadata document, CIMD).")
    if parts.path in ("", "/") or parts.fragment or parts.username or parts.password:
        raise ClientRefused(
            "A client_id URL names its metadata document: a path, no fragment, no user."
        )
    egress.check_url(url)


def check_redirect_uri(uri: str) -> None:
    """Refuse a redirect URI a browser would not return to a host through: a script or data
    scheme, or plain http to anything but this machine."""
    parts = urlsplit(uri)
    scheme = parts.scheme.lower()
    if not scheme or scheme in REFUSED_SCHEMES or parts.fragment:
        raise ClientRefused(f"'{uri}' can't be a redirect URI.")
    if scheme == "http" and (parts.hostname or "") not in LOOPBACK_HOSTS:
        raise ClientRefused(f"'{uri}': a redirect URI is https, or http to a loopback address.")


def display_name(info: dict[str, Any]) -> str:
    """The client's name as the owner sees it (and its token's label): one line, bounded."""
    name = info.get("client_name")
    text = name if isinstance(name, str) and name.strip() else str(info.get("client_id"))
    flat = "".join(char if char.isprintable() else " " for char in text).strip()
    return flat[:MAX_TOKEN_LABEL_CHARS] or "MCP host"


def _document(url: str, body: bytes) -> dict[str, Any]:
    try:
        document = json.loads(body)
    except ValueError as e:
        raise ClientRefused(f"The client's metadata document at {url} is not JSON.") from e
    if not isinstance(document, dict):
        raise ClientRefused(f"The client's metadata document at {url} is not a JSON object.")
    if document.get("client_id") != url:
        raise ClientRefused(
            f"The client's metadata document at {url} names another client_id; "
            "a document's client_id is its own URL."
        )
    if document.get("token_endpoint_auth_method", "none") != "none":
        raise ClientRefused("A client named by its metadata document authenticates with none.")
    if document.get("client_secret") is not None:
        raise ClientRefused("A client's metadata document may not hold a client_secret.")
    uris = document.get("redirect_uris")
    if not isinstance(uris, list) or not uris:
        raise ClientRefused(f"The client's metadata document at {url} lists no redirect_uris.")
    for uri in uris:
        check_redirect_uri(str(uri))
    try:
        OAuthClientInformationFull.model_validate(
            {**document, "token_endpoint_auth_method": "none"}
        )
    except pydantic.ValidationError as e:
        raise ClientRefused(f"The client's metadata document at {url} is not valid: {e}.") from e
    return {**document, "token_endpoint_auth_method": "none"}


def _check_room(session: Session) -> None:
    held = session.scalar(select(func.count()).select_from(OAuthClient)) or 0
    if held >= MAX_OAUTH_CLIENTS:
        raise ClientRefused(
            f"This server already knows {MAX_OAUTH_CLIENTS} OAuth clients, the most it keeps."
        )

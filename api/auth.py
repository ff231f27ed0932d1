"""Bearer-token authentication for every /api route but the health check and the docs."""

from __future__ import annotations

import threading
import time

from flask import Flask, g, request

from api.errors import ApiError
from api.services import services
from store.tokens import Principal, authenticate, token_digest

PUBLIC_PATHS = ("/api/health", "/api/openapi.json", "/api/docs")


def install_auth(app: Flask) -> None:
    @app.before_request
    def require_token() -> None:
        path = request.path
        if (
            not path.startswith("/api")
            or path.startswith(PUBLIC_PATHS)
            or request.method == "OPTIONS"
        ):
            return
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _unauthorized("Send 'Authorization: Bearer <token>'; this route needs a token.")
        principal = _cached_principal(token.strip())
        if principal is None:
            raise _unauthorized("The bearer token is not valid.")
        g.principal = principal


# Tokens seen recently, by digest: a deleted token keeps working for at most CACHE_SECONDS.
CACHE_SECONDS = 5.0
CACHE_SIZE = 1024
_seen: dict[str, tuple[Principal, float]] = {}
_seen_lock = threading.Lock()


def _cached_principal(token: str) -> Principal | None:
    digest = token_digest(token)
    now = time.monotonic()
    with _seen_lock:
        hit = _seen.get(digest)
    if hit is not None and hit[1] > now:
        return hit[0]
    with services().sessions() as session, session.begin():
        found = authenticate(session, token)
    if found is not None:
        with _seen_lock:
            if len(_seen) >= CACHE_SIZE:
                _seen.clear()
            _seen[digest] = (found, now + CACHE_SECONDS)
    return found


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message, headers={"WWW-Authenticate": "Bearer"})


def principal() -> Principal:
    found: Principal = g.principal
    return found


def owner() -> Principal:
    """The calling owner; node tokens reach only their node's routes."""
    found = principal()
    if found.kind != "owner" or found.owner_id is None:
        raise ApiError(403, "forbidden", "This route needs an owner's token, not a node token.")
    return found


def owner_id() -> int:
    """The calling owner's id (node tokens get 403)."""
    found = owner().owner_id
    assert found is not None
    return found


def node_or_owner(node: str) -> Principal:
    """An owner, or the node agent of exactly `node`; another node's token gets 404."""
    found = principal()
    if found.kind == "owner" and found.owner_id is not None:
        return found
    if found.kind == "node" and found.node_name == node:
        return found
    # 404 rather than 403, so a node token can't learn which other nodes exist.
    raise ApiError(404, "node_not_found", f"No node is named '{node}'.")

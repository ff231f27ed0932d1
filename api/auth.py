"""Bearer-token authentication, and the one place that decides what each kind of token may do.

Every /api route but the health check and the docs needs a token. Routes then ask for the
caller they accept:

- `owner_only()`: the owner's own token (role `owner`); an agent token gets 403 `owner_only`.
- `owner_or_agent()`: the owner's token or one of its agent tokens (calling tools, reading
  calls, runs, approvals and skills).
- `node_or_owner(node)`: the owner, or the node agent of exactly that node.

Node tokens get 403 `forbidden` on owner routes.
"""

from __future__ import annotations

import hmac
import threading
import time

from flask import Flask, current_app, g, request

from api.errors import ApiError
from api.services import services
from relay import generations, naming
from store import indexcache
from store.tokens import OWNER_KIND, Principal, Role, authenticate, token_digest

PUBLIC_PATHS = ("/api/health", "/api/openapi.json", "/api/docs")
CACHE_EXTENSION = "skillfleet.tokens"
OWNER_ONLY_MESSAGE = (
    "Only the owner's own token can do this; an agent token may call tools and read calls, "
    "runs, approvals and skills."
)


def install_auth(app: Flask) -> None:
    app.extensions[CACHE_EXTENSION] = TokenCache()

    @app.before_request
    def require_token() -> None:
        path = request.path
        if (
            not path.startswith("/api")
            or path.startswith(PUBLIC_PATHS)
            or request.method == "OPTIONS"
        ):
            return
        g.principal = _principal_of(_bearer_token())


def _bearer_token() -> str:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise _unauthorized("Send 'Authorization: Bearer <token>'; this route needs a token.")
    return token.strip()


def _principal_of(token: str) -> Principal:
    cache: TokenCache = current_app.extensions[CACHE_EXTENSION]
    found = cache.lookup(token)
    if found is None:
        raise _unauthorized("The bearer token is not valid.")
    return found


class TokenCache:
    """Tokens verified recently, by digest, so most requests skip the database.

    Each entry remembers the revocation generation (a counter in Redis, bumped whenever a token
    is deleted) it was read under. Every hit compares it with the current one, so a deleted
    token is refused on the very next request by every API process. Without Redis, every
    request reads the database.
    """

    SECONDS = 5.0
    SIZE = 1024

    def __init__(self) -> None:
        self._seen: dict[str, tuple[Principal, float, bytes]] = {}
        self._lock = threading.Lock()

    def lookup(self, token: str) -> Principal | None:
        digest = token_digest(token)
        # Read the generation before the database, so a deletion in between is never missed.
        generation = _generation()
        now = time.monotonic()
        with self._lock:
            hit = self._seen.get(digest)
        if hit is not None and generation is not None and hit[1] > now and hit[2] == generation:
            return hit[0]
        with services().sessions() as session, session.begin():
            found = authenticate(session, token)
        with self._lock:
            if found is None or generation is None:
                self._seen.pop(digest, None)
            else:
                if len(self._seen) >= self.SIZE:
                    self._seen.clear()
                self._seen[digest] = (found, now + self.SECONDS, generation)
        return found

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()


def _generation() -> bytes | None:
    """The current revocation generation; None when Redis can't be asked (then: no cache).

    The skills index generation comes with it, for the store to answer this request's lookups
    from what it read under it (store/indexcache.py). Both come from the process's watch,
    without a round trip while it is live (relay/generations.py).
    """
    values = services().generations.read()
    if values is None:
        indexcache.SEEN.set(None)
        return None
    tokens, skills = values
    indexcache.SEEN.set(skills)
    return tokens


def bump_token_generation() -> None:
    """Make every API process forget the tokens it cached: call around deleting a token."""
    current_app.extensions[CACHE_EXTENSION].clear()
    generations.bump(services().redis, naming.tokens_generation())


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message, headers={"WWW-Authenticate": "Bearer"})


def principal() -> Principal:
    found: Principal = g.principal
    return found


def _owner_principal() -> Principal:
    found = principal()
    if found.kind != OWNER_KIND or found.owner_id is None:
        raise ApiError(403, "forbidden", "This route needs an owner's token, not a node token.")
    return found


def owner_only() -> int:
    """The calling owner's id, for what only the owner's own token may do (403 for agents)."""
    found = _owner_principal()
    if found.role != Role.OWNER:
        raise ApiError(403, "owner_only", OWNER_ONLY_MESSAGE)
    assert found.owner_id is not None
    return found.owner_id


def owner_or_agent() -> int:
    """The id of the owner a request acts for: by the owner's token or one of its agent tokens."""
    owner_id = _owner_principal().owner_id
    assert owner_id is not None
    return owner_id


def node_or_owner(node: str) -> Principal:
    """The owner, or the node agent of exactly `node`; another node's token gets 404."""
    found = principal()
    if found.kind == OWNER_KIND:
        owner_only()
        return found
    if found.kind == "node" and found.node_name == node:
        return found
    # 404 rather than 403, so a node token can't learn which other nodes exist.
    raise ApiError(404, "node_not_found", f"No node is named '{node}'.")


def require_metrics_access() -> None:
    """/metrics: open when the API listens on loopback only or the operator made it public;
    otherwise the metrics token (SKILLFLEET_METRICS_TOKEN) or an owner's token."""
    settings = services().settings
    if settings.metrics_open:
        return
    token = _bearer_token()
    expected = settings.metrics_token
    if expected and hmac.compare_digest(token.encode(), expected.encode()):
        return
    g.principal = _principal_of(token)
    owner_only()

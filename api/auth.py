"""Bearer-token authentication, and the one place that decides what each kind of token may do.

Every /api route but the health check and the docs needs a token. Routes then ask for the
caller they accept:

- `owner_only()`: the owner's own token (role `owner`); an agent token gets 403 `owner_only`.
- `owner_or_agent()`: the owner's token or one of its agent tokens (calling tools, reading
  calls, runs, approvals and skills).
- `node_or_owner(node)`: the owner, or the node agent of exactly that node.

Node tokens get 403 `forbidden` on owner routes.

Wrong tokens are limited per client address (relay/lockouts.py): past SKILLFLEET_AUTH_FAILURES
in SKILLFLEET_AUTH_FAILURE_WINDOW seconds, every request from that address gets 429
`too_many_failed_logins` before its token is checked, until the window ends. The check reads
only memory, so a valid token pays nothing for it.
"""

from __future__ import annotations

import hmac
import math
import threading
import time
from datetime import UTC, datetime
from typing import Any

import redis
import structlog
from flask import Flask, current_app, g, request

from api.errors import ApiError
from api.services import services
from relay import generations, lockouts, naming
from store import indexcache
from store.tokens import OWNER_KIND, Principal, Role, authenticate, token_digest

log = structlog.get_logger(__name__)

PUBLIC_PATHS = ("/api/health", "/api/openapi.json", "/api/docs")
# Signing in with GitHub begins without a token (api/signin.py); its refresh needs one.
PUBLIC_ROUTES = frozenset(
    ("/api/signin/github", "/api/signin/github/start", "/api/signin/github/poll")
)
CACHE_EXTENSION = "skillfleet.tokens"
LOCKOUTS_EXTENSION = "skillfleet.lockouts"
# The resource a request of /mcp serves (its /mcp URL), put in the ASGI scope of the API
# requests the gateway makes for it (api/mcp/inprocess.py). An OAuth token is bound to one
# resource and accepted only for requests made for it.
RESOURCE_SCOPE_KEY = "skillfleet.resource"
OWNER_ONLY_MESSAGE = (
    "Only the owner's own token can do this; an agent token may call tools and read calls, "
    "runs, approvals and skills."
)


def install_auth(app: Flask) -> None:
    app.extensions[CACHE_EXTENSION] = TokenCache()
    app.extensions[LOCKOUTS_EXTENSION] = lockouts.Lockouts()

    @app.before_request
    def require_token() -> None:
        path = request.path
        if (
            not path.startswith("/api")
            or path.startswith(PUBLIC_PATHS)
            or path in PUBLIC_ROUTES
            or request.method == "OPTIONS"
        ):
            return
        generation = _admitted()
        g.principal = _principal_of(_bearer_token(), generation)


def _bearer_token() -> str:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise _unauthorized("Send 'Authorization: Bearer <token>'; this route needs a token.")
    return token.strip()


def _admitted() -> bytes | None:
    """Refuse a request from a locked-out address (429), before its token is checked; the
    tokens generation for the token cache (None when Redis can't be asked: no cache)."""
    values = _generations()
    if values is None:
        return None
    tokens, locked = values
    address = _limited_address()
    if address is not None:
        known: lockouts.Lockouts = current_app.extensions[LOCKOUTS_EXTENSION]
        left = math.ceil(known.seconds_left(services().redis, address, locked))
        if left > 0:
            raise ApiError(
                429,
                "too_many_failed_logins",
                "Too many requests from your address had a wrong token; "
                f"try again in {left} seconds.",
                headers={"Retry-After": str(left)},
            )
    return tokens


def signed_in_owner(token: str) -> Principal:
    """Who a token pasted into a sign-in form stands for, checked as a bearer token is (the
    failed-login limit included); the owner's own token only."""
    found = _principal_of(token.strip(), _admitted())
    if found.kind != OWNER_KIND or found.role != Role.OWNER:
        raise ApiError(
            403, "owner_only", "Sign in with the owner's own token, not an agent or node token."
        )
    return found


def _principal_of(token: str, generation: bytes | None) -> Principal:
    cache: TokenCache = current_app.extensions[CACHE_EXTENSION]
    found = cache.lookup(token, generation)
    if found is None:
        _count_failure()
        raise _unauthorized("The bearer token is not valid.")
    if found.resource is not None and found.resource != _resource():
        raise ApiError(
            401,
            "wrong_resource",
            f"This token was issued for {found.resource} (an MCP host's OAuth token) and is "
            "accepted there only.",
            headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
        )
    return found


def _resource() -> str | None:
    scope = request.environ.get("asgi.scope")
    found = scope.get(RESOURCE_SCOPE_KEY) if isinstance(scope, dict) else None
    return found if isinstance(found, str) else None


def _count_failure() -> None:
    """Count a wrong token against the client's address; never fails the request for Redis."""
    settings = services().settings
    address = _limited_address()
    if address is None:
        return
    try:
        locked = lockouts.record_failure(
            services().redis, address, settings.auth_failures, settings.auth_failure_window
        )
    except redis.RedisError as e:
        log.warning("failed token not counted", error_type=type(e).__name__)
        return
    if locked:
        log.warning(
            "address locked out after wrong tokens",
            address=address,
            failures=settings.auth_failures,
            seconds=math.ceil(locked),
        )


def _limited_address() -> str | None:
    """What this request's wrong tokens count against; None when they don't count (the limit
    is off, or the client is on this host)."""
    settings = services().settings
    if not settings.auth_failures:
        return None
    return lockouts.counted_as(client_address(request.environ, settings.trusted_proxies))


def client_address(environ: dict[str, Any], trusted_proxies: int) -> str:
    """The client's address: the peer's, or behind `trusted_proxies` proxies the one the
    outermost of them saw (X-Forwarded-For read from the right, as werkzeug's ProxyFix does)."""
    address = str(environ.get("REMOTE_ADDR") or "")
    hops = str(environ.get("HTTP_X_FORWARDED_FOR", "")).split(",")
    forwarded = [hop.strip() for hop in hops if hop.strip()]
    if trusted_proxies and len(forwarded) >= trusted_proxies:
        address = forwarded[-trusted_proxies]
    return address


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

    def lookup(self, token: str, generation: bytes | None) -> Principal | None:
        """The token's principal; `generation` is the tokens generation read before this call,
        so that a deletion in between is never missed (None: read the database)."""
        digest = token_digest(token)
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
                self._seen[digest] = (found, now + _cached_for(found), generation)
        return found

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()


def _cached_for(found: Principal) -> float:
    """Seconds a token may be answered from the cache: never past its expiry."""
    if found.expires_at is None:
        return TokenCache.SECONDS
    left = (found.expires_at - datetime.now(UTC)).total_seconds()
    return max(0.0, min(TokenCache.SECONDS, left))


def _generations() -> tuple[bytes, bytes] | None:
    """The current revocation and lockouts generations; None when Redis can't be asked (then:
    no token cache, no lockouts).

    The skills index generation comes with them, for the store to answer this request's lookups
    from what it read under it (store/indexcache.py). All come from the process's watch,
    without a round trip while it is live (relay/generations.py).
    """
    values = services().generations.read()
    if values is None:
        indexcache.SEEN.set(None)
        return None
    tokens, skills, locked = values
    indexcache.SEEN.set(skills)
    return tokens, locked


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


def actor() -> str:
    """Who the request acts as, as the audit trail names it: `owner:<token id>` or
    `agent:<token id>` (a token is shown by its id, never by itself)."""
    found = principal()
    role = found.role or found.kind
    return f"{role}:{found.token_id}" if found.token_id is not None else str(role)


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
    generation = _admitted()
    token = _bearer_token()
    expected = settings.metrics_token
    if expected and hmac.compare_digest(token.encode(), expected.encode()):
        return
    g.principal = _principal_of(token, generation)
    owner_only()

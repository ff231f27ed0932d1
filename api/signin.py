"""Owners sign in to the console with GitHub's device flow; the result is an owner token.

1. `POST /api/signin/github/start` (no token): skillfleet asks GitHub for a device code and
   answers the `user_code` to show, the `verification_uri` to open and a `signin` id. The
   device code itself stays here, in Redis, until the sign-in ends.
2. `POST /api/signin/github/poll` with that id, every `interval` seconds: `pending` until the
   person has entered the code on GitHub, then `signed_in` with an owner token (shown once)
   for the owner SKILLFLEET_GITHUB_SIGNIN maps that GitHub user (by id) or organisation to.
   A poll sooner than GitHub allows answers `pending` without asking GitHub; GitHub's
   `slow_down` lengthens the interval. A denied or expired code, or a user on no rule, ends
   the sign-in with an error and grants nothing.
3. `POST /api/signin/github/refresh` with that token, before `expires_at`: skillfleet refreshes
   the GitHub token, checks the person's access again, and moves the expiry on.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import structlog
from flask import request

from api.auth import bump_token_generation, client_address, owner_only, principal
from api.blueprint import Blueprint
from api.errors import ApiError
from api.schemas import (
    GitHubSignInInfoSchema,
    SignInCodeSchema,
    SignInPollSchema,
    SignInResultSchema,
)
from api.services import services
from relay import naming
from store import githubsessions
from store.db import transaction
from store.errors import (
    GitHubSessionEnded,
    GitHubSignInError,
    GitHubSignInOff,
    GitHubUnavailable,
    GitHubUserNotAllowed,
    SignInNotFound,
)
from store.githubdevice import DeviceFlow, Grant, Pending
from store.limits import GITHUB_SIGNIN_STARTS, GITHUB_SIGNIN_WINDOW_SECONDS
from store.models import ApiToken
from store.secrets import Sealer
from store.settings import Settings

log = structlog.get_logger(__name__)

blp = Blueprint("signin", __name__, url_prefix="/api/signin", description="Sign-in")

PUBLIC_PREFIX = "/api/signin/github/"
# Longest a poll may hold the sign-in's lock (GitHub's answer and two API calls).
POLL_LOCK_SECONDS = 40
UNKNOWN = "No GitHub sign-in with that id is under way (it ended, or never began); start again."


def _flow(settings: Settings) -> DeviceFlow:
    if not settings.github_client_id:
        raise GitHubSignInOff(
            "Signing in with GitHub is off here: the operator sets SKILLFLEET_GITHUB_CLIENT_ID "
            "and SKILLFLEET_GITHUB_SIGNIN to turn it on. Paste an owner token instead."
        )
    return DeviceFlow(
        settings.github_url,
        settings.github_api_url,
        settings.github_client_id,
        settings.github_client_secret,
    )


@blp.route("/github", methods=["GET"])
@blp.doc(security=[])
@blp.response(200, GitHubSignInInfoSchema)
def github_info() -> dict[str, Any]:
    """Whether owners may sign in with GitHub here (no token needed)"""
    return {"enabled": bool(services().settings.github_client_id)}


@blp.route("/github/start", methods=["POST"])
@blp.doc(security=[])
@blp.response(200, SignInCodeSchema)
def github_start() -> dict[str, Any]:
    """Begin a GitHub sign-in: the code to enter on GitHub (no token needed)"""
    found = services()
    flow = _flow(found.settings)
    _count_start(found.settings)
    code = flow.start(githubsessions.scope_for(found.settings.github_signin))
    signin = secrets.token_urlsafe(24)
    key = naming.github_signin(signin)
    now = time.time()
    pipe = found.redis.pipeline()
    pipe.hset(
        key,
        mapping={
            "device_code": code.device_code,
            "interval": code.interval,
            "next_poll": now + code.interval,
        },
    )
    pipe.expire(key, code.expires_in + 60)  # GitHub says when the code expired; then it goes
    pipe.execute()
    return {
        "signin": signin,
        "user_code": code.user_code,
        "verification_uri": code.verification_uri,
        "expires_in": code.expires_in,
        "interval": code.interval,
    }


def _count_start(settings: Settings) -> None:
    key = naming.github_signin_starts(client_address(request.environ, settings.trusted_proxies))
    pipe = services().redis.pipeline()
    pipe.set(key, 0, ex=GITHUB_SIGNIN_WINDOW_SECONDS, nx=True)  # the window opens
    pipe.incr(key)
    _, started = pipe.execute()
    if int(started) > GITHUB_SIGNIN_STARTS:
        raise ApiError(
            429,
            "too_many_signins",
            f"Your address began {GITHUB_SIGNIN_STARTS} GitHub sign-ins in the last "
            f"{GITHUB_SIGNIN_WINDOW_SECONDS // 60} minutes; finish one or try again later.",
            headers={"Retry-After": str(GITHUB_SIGNIN_WINDOW_SECONDS)},
        )


@blp.route("/github/poll", methods=["POST"])
@blp.doc(security=[])
@blp.arguments(SignInPollSchema())
@blp.response(200, SignInResultSchema)
def github_poll(body: dict[str, Any]) -> dict[str, Any]:
    """Ask whether the code was entered: `pending`, or `signed_in` with an owner token"""
    found = services()
    flow = _flow(found.settings)
    key = naming.github_signin(body["signin"])
    state = found.redis.hgetall(key)
    if not state:
        raise SignInNotFound(UNKNOWN)
    interval = int(state[b"interval"])
    now = time.time()
    if now < float(state[b"next_poll"]):
        return {"status": "pending", "interval": interval}
    lock = naming.github_signin_lock(body["signin"])
    if not found.redis.set(lock, b"1", nx=True, ex=POLL_LOCK_SECONDS):
        return {"status": "pending", "interval": interval}  # another poll is asking GitHub
    try:
        return _poll_once(flow, key, _text(state[b"device_code"]), interval)
    finally:
        found.redis.delete(lock)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _poll_once(flow: DeviceFlow, key: str, device_code: str, interval: int) -> dict[str, Any]:
    found = services()
    if not found.redis.exists(key):
        raise SignInNotFound(UNKNOWN)  # a poll that held the lock just before ended it
    try:
        answer = flow.poll(device_code, interval)
        if isinstance(answer, Pending):
            # Counted from GitHub's answer, so two polls are never closer than it asked.
            wait = answer.interval
            found.redis.hset(key, mapping={"interval": wait, "next_poll": time.time() + wait})
            return {"status": "pending", "interval": answer.interval}
        found.redis.delete(key)
        return _signed_in(flow, answer)
    except GitHubUnavailable:
        raise  # the code may still be good: the next poll asks again
    except GitHubSignInError:
        found.redis.delete(key)  # denied, expired, refused: this code is spent
        raise


def _signed_in(flow: DeviceFlow, grant: Grant) -> dict[str, Any]:
    found = services()
    settings = found.settings
    user = flow.user(grant.access_token)
    owner = githubsessions.owner_for(
        settings.github_signin,
        user,
        lambda org: flow.is_member(grant.access_token, org, user.login),
    )
    with transaction(found.sessions) as session:
        row, token = githubsessions.open_session(
            session,
            Sealer(settings.keys_dir),
            owner,
            user,
            grant,
            settings.github_session_seconds,
        )
        expires_at, token_id = row.expires_at, row.id
    log.info("owner signed in with github", owner=owner, github_user_id=user.id)
    return {
        "status": "signed_in",
        "token": token,
        "token_id": token_id,
        "owner": owner,
        "github_login": user.login,
        "expires_at": expires_at,
    }


@blp.route("/github/refresh", methods=["POST"])
@blp.response(200, SignInResultSchema)
def github_refresh() -> dict[str, Any]:
    """Renew this GitHub sign-in before it expires: GitHub is asked again, access re-checked"""
    owner_only()
    found = services()
    flow = _flow(found.settings)
    token_id = principal().token_id
    assert token_id is not None
    lock = naming.github_refresh_lock(token_id)
    if not found.redis.set(lock, b"1", nx=True, ex=POLL_LOCK_SECONDS):
        raise ApiError(409, "refresh_in_progress", "This sign-in is being refreshed already.")
    try:
        return _refresh(flow, token_id)
    finally:
        found.redis.delete(lock)


def _refresh(flow: DeviceFlow, token_id: int) -> dict[str, Any]:
    found = services()
    settings = found.settings
    sealer = Sealer(settings.keys_dir)
    with found.sessions() as session:
        github, token = githubsessions.session_of(session, token_id)
        refresh = githubsessions.refresh_token(sealer, github)
        # A token that never expires (an OAuth app's) is kept, and checked with GitHub again.
        grant = Grant(
            githubsessions.access_token(sealer, github),
            None,
            github.access_expires_at,
            github.refresh_expires_at,
        )
        user_id, signed_in_as = github.github_user_id, token.owner.name if token.owner else None
    try:
        if refresh:
            grant = flow.refresh(refresh)
        user = flow.user(grant.access_token)
        owner = githubsessions.owner_for(
            settings.github_signin,
            user,
            lambda org: flow.is_member(grant.access_token, org, user.login),
        )
        if user.id != user_id or owner != signed_in_as:
            raise GitHubSessionEnded(
                "GitHub's token or the sign-in rules now name another user or owner; sign in again."
            )
    except GitHubUnavailable:
        raise  # GitHub said nothing about this sign-in: it stays, the console tries again
    except GitHubSignInError as e:
        _end(token_id)
        if isinstance(e, GitHubSessionEnded | GitHubUserNotAllowed):
            raise
        raise GitHubSessionEnded(f"GitHub refused to renew this sign-in: {e.message}") from e
    with transaction(found.sessions) as session:
        github, token = githubsessions.session_of(session, token_id)
        githubsessions.renew(sealer, github, token, user, grant, settings.github_session_seconds)
        expires_at = token.expires_at
    log.info("github sign-in refreshed", owner=owner, github_user_id=user.id)
    return {
        "status": "signed_in",
        "token_id": token_id,
        "owner": owner,
        "github_login": user.login,
        "expires_at": expires_at,
    }


def _end(token_id: int) -> None:
    """Delete the sign-in's token: GitHub no longer vouches for it."""
    with transaction(services().sessions) as session:
        row = session.get(ApiToken, token_id)
        if row is not None:
            session.delete(row)
            bump_token_generation()
    log.info("github sign-in ended", token_id=token_id)

"""GitHub's OAuth device flow, as a client: ask for a code, poll for the token, refresh it, and
ask who the token belongs to.

https://docs.github.com/en/apps/oauth-apps/building-oauth-apps/authorizing-oauth-apps#device-flow
and, for a GitHub App's expiring user tokens, "Refreshing user access tokens". GitHub answers
the token endpoint with 200 and an `error` field while the person has not finished; those
answers are `Pending` here, the final ones raise.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx

from store.errors import (
    GitHubAccessDenied,
    GitHubCodeExpired,
    GitHubSignInError,
    GitHubUnavailable,
)
from store.models import utcnow

TIMEOUT_SECONDS = 10.0
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
# GitHub's documented step when it answers slow_down without a new interval.
SLOW_DOWN_STEP = 5
USER_AGENT = "skillfleet"


@dataclass(frozen=True)
class DeviceCode:
    """What GitHub gave for one sign-in: the code the person types, where, and for how long."""

    device_code: str
    user_code: str
    verification_uri: str
    expires_in: int
    interval: int


@dataclass(frozen=True)
class Pending:
    """The person has not finished on GitHub yet; poll again after `interval` seconds."""

    interval: int


@dataclass(frozen=True)
class Grant:
    """A GitHub user access token; the expiries are None for a token that does not expire."""

    access_token: str
    refresh_token: str | None
    access_expires_at: datetime | None
    refresh_expires_at: datetime | None


@dataclass(frozen=True)
class GitHubUser:
    id: int
    login: str


class DeviceFlow:
    """The device flow against one GitHub (`web_url` for the login endpoints, `api_url` for
    the REST API), for the app `client_id`."""

    def __init__(
        self, web_url: str, api_url: str, client_id: str, client_secret: str | None = None
    ) -> None:
        self.web_url = web_url.rstrip("/")
        self.api_url = api_url.rstrip("/")
        self.client_id = client_id
        self.client_secret = client_secret

    def start(self, scope: str) -> DeviceCode:
        """POST /login/device/code: a new code for the person to enter."""
        body = self._login("/login/device/code", {"client_id": self.client_id, "scope": scope})
        try:
            return DeviceCode(
                device_code=_text(body, "device_code"),
                user_code=_text(body, "user_code"),
                verification_uri=_text(body, "verification_uri"),
                expires_in=_number(body, "expires_in"),
                interval=_number(body, "interval"),
            )
        except (KeyError, TypeError, ValueError):
            raise _failed(body, "GitHub gave no device code") from None

    def poll(self, device_code: str, interval: int) -> Grant | Pending:
        """POST /login/oauth/access_token once: the token, or Pending with the interval to keep."""
        fields = {
            "client_id": self.client_id,
            "device_code": device_code,
            "grant_type": DEVICE_GRANT,
        }
        body = self._login("/login/oauth/access_token", fields)
        error = body.get("error")
        if error == "authorization_pending":
            return Pending(interval)
        if error == "slow_down":
            given = body.get("interval")
            if isinstance(given, int) and given > interval:
                return Pending(given)
            return Pending(interval + SLOW_DOWN_STEP)
        if error == "expired_token":
            raise GitHubCodeExpired(
                "The code expired before it was entered on GitHub; start the sign-in again."
            )
        if error == "access_denied":
            raise GitHubAccessDenied("The sign-in was cancelled on GitHub; nothing was granted.")
        return _grant(body)

    def refresh(self, refresh_token: str) -> Grant:
        """POST /login/oauth/access_token with grant_type=refresh_token: a new pair of tokens."""
        fields = {
            "client_id": self.client_id,
            "grant_type": "refresh_token",
            "refresh_token": refresh_token,
        }
        if self.client_secret:
            fields["client_secret"] = self.client_secret
        return _grant(self._login("/login/oauth/access_token", fields))

    def user(self, access_token: str) -> GitHubUser:
        """GET /user: who the token belongs to (by id, which a rename doesn't change)."""
        response = self._api("/user", access_token)
        if response.status_code == 401:
            raise GitHubSignInError("GitHub no longer accepts this sign-in's token.")
        body = _json(response, "GET /user")
        user_id, login = body.get("id"), body.get("login")
        if not isinstance(user_id, int) or isinstance(user_id, bool) or not isinstance(login, str):
            raise _failed(body, "GitHub's GET /user named no user")
        return GitHubUser(user_id, login)

    def is_member(self, access_token: str, org: str, login: str) -> bool:
        """GET /orgs/<org>/members/<login>: 204 for a member (public or, with read:org, not)."""
        response = self._api(f"/orgs/{org}/members/{login}", access_token)
        if response.status_code == 204:
            return True
        if response.status_code in (302, 404):
            return False
        raise GitHubUnavailable(
            f"GitHub answered {response.status_code} when asked whether {login} is a member "
            f"of {org}; try again later."
        )

    def _login(self, path: str, fields: dict[str, str]) -> dict[str, Any]:
        try:
            response = httpx.post(
                self.web_url + path,
                data=fields,
                headers={"Accept": "application/json", "User-Agent": USER_AGENT},
                timeout=TIMEOUT_SECONDS,
            )
        except httpx.HTTPError as e:
            raise _unreachable(e) from e
        return _json(response, f"POST {path}")

    def _api(self, path: str, access_token: str) -> httpx.Response:
        headers = {
            "Accept": "application/vnd.github+json",
            "Authorization": f"Bearer {access_token}",
            "User-Agent": USER_AGENT,
            "X-GitHub-Api-Version": "2022-11-28",
        }
        try:
            return httpx.get(self.api_url + path, headers=headers, timeout=TIMEOUT_SECONDS)
        except httpx.HTTPError as e:
            raise _unreachable(e) from e


def _json(response: httpx.Response, what: str) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.status_code >= 400 or not isinstance(body, dict):
        status = response.status_code
        raise GitHubUnavailable(f"GitHub answered {what} with {status}; try again later.")
    return body


def _unreachable(e: httpx.HTTPError) -> GitHubSignInError:
    return GitHubUnavailable(f"GitHub can't be reached ({type(e).__name__}); try again.")


def _grant(body: dict[str, Any]) -> Grant:
    token = body.get("access_token")
    if not isinstance(token, str) or not token:
        raise _failed(body, "GitHub gave no token")
    now = utcnow()
    refresh = body.get("refresh_token")
    return Grant(
        access_token=token,
        refresh_token=refresh if isinstance(refresh, str) and refresh else None,
        access_expires_at=_after(now, body.get("expires_in")),
        refresh_expires_at=_after(now, body.get("refresh_token_expires_in")),
    )


def _after(now: datetime, seconds: object) -> datetime | None:
    if isinstance(seconds, int) and not isinstance(seconds, bool) and seconds > 0:
        return now + timedelta(seconds=seconds)
    return None


def _text(body: dict[str, Any], key: str) -> str:
    value = body[key]
    if not isinstance(value, str) or not value:
        raise ValueError(key)
    return value


def _number(body: dict[str, Any], key: str) -> int:
    value = body[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(key)
    return value


def _failed(body: dict[str, Any], what: str) -> GitHubSignInError:
    """GitHub's own error (`incorrect_client_credentials`, `device_flow_disabled`, ...) named."""
    error, description = body.get("error"), body.get("error_description")
    if isinstance(error, str):
        detail = description if isinstance(description, str) else error
        return GitHubSignInError(f"{what}: {error} ({detail[:200]}).")
    return GitHubUnavailable(f"{what}; try again later.")

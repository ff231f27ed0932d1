"""The REST routes the gateway uses, for one caller: tools, calls, approvals, runs and skills.

Every MCP request becomes requests to these routes with the caller's token, so the API decides
them exactly as it decides any agent's: the gateway holds no rule of its own.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

from store.limits import MAX_PAGE_SIZE

# A long-poll waits at most 60 s and a run's stream sends a keep-alive every 15 s: a read that
# takes longer than this means the API is gone.
READ_SECONDS = 90.0
LONGEST_WAIT = 60.0  # the most `?wait=` a route accepts
CLIENT_TIMEOUT = httpx.Timeout(READ_SECONDS, connect=10.0)


class RestError(Exception):
    """Raised when the API refuses a request or can't be reached; carries its stable code."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.http_status = status
        self.code = code
        self.message = message


@dataclass(frozen=True)
class RunEvent:
    """One event of a run's stream: `stdout`, `stderr`, `status` or `exit`."""

    id: str
    kind: str
    data: dict[str, Any]


def make_client(
    base_url: str, transport: httpx.AsyncBaseTransport | None = None
) -> httpx.AsyncClient:
    """The gateway's HTTP client: to `base_url` over the network, or through `transport`."""
    return httpx.AsyncClient(base_url=base_url, transport=transport, timeout=CLIENT_TIMEOUT)


@dataclass
class TokenVerdict:
    """What the API's answers so far said of the caller's token.

    `accepted` once a request succeeded (it passed the API's authentication); `refused`, the
    API's error, once one was refused for its token (not valid, or a node's). Any other error
    says nothing of the token: a route may refuse a request before authenticating it (a body
    too large, a locked-out address)."""

    accepted: bool = False
    refused: RestError | None = None

    def hear(self, response: httpx.Response) -> None:
        if response.status_code < 400:
            self.accepted = True


@dataclass
class Rest:
    """The API's routes as one caller sees them (its token in `headers`); `verdict` gathers
    what its answers said of the token."""

    http: httpx.AsyncClient
    headers: Mapping[str, str] = field(default_factory=dict)
    extensions: Mapping[str, Any] = field(default_factory=dict)
    verdict: TokenVerdict = field(default_factory=TokenVerdict)

    async def tools(self) -> list[dict[str, Any]]:
        """Every tool as GET /api/tools lists it (one page holds them all)."""
        found = await self._json("GET", "/api/tools", params={"page_size": MAX_PAGE_SIZE})
        return list(found)

    async def check_token(self) -> None:
        """Raise RestError unless the API accepts the token: the cheapest route that checks it
        as every route does (one tool definition, not all of them)."""
        await self._json("GET", "/api/tools", params={"page_size": 1})

    async def is_owner_token(self) -> bool:
        """Whether the token is an owner's: one of the routes only an owner's token may read
        (GET /api/tokens) answers it; an agent's gets 403."""
        try:
            await self._json("GET", "/api/tokens", params={"page_size": 1})
        except RestError as e:
            if e.http_status == 403:
                return False
            raise
        return True

    async def call(self, tool: str, body: dict[str, Any], wait: float = 0) -> dict[str, Any]:
        """The envelope of one call of `tool` (ToolCallSchema's `body`)."""
        path = f"/api/tools/{quote(tool, safe='')}"
        params = {"wait": min(wait, LONGEST_WAIT)} if wait > 0 else {}
        found: dict[str, Any] = await self._json("POST", path, json=body, params=params)
        return found

    async def get_call(
        self, call_id: str, wait: float = 0, keep_pending: bool = False
    ) -> dict[str, Any]:
        """A call as GET /api/calls/<id> shows it, waiting up to `wait` s for its end; leaving
        while it waits for approval withdraws the approval unless `keep_pending`."""
        params: dict[str, Any] = {"wait": min(wait, LONGEST_WAIT)} if wait > 0 else {}
        if keep_pending and params:
            params["keep_pending"] = "true"
        found: dict[str, Any] = await self._json(
            "GET", f"/api/calls/{quote(call_id, safe='')}", params=params
        )
        return found

    async def withdraw(self, call_id: str) -> dict[str, Any]:
        """Withdraw the call's pending approval (POST /api/calls/<id>/withdraw)."""
        found: dict[str, Any] = await self._json(
            "POST", f"/api/calls/{quote(call_id, safe='')}/withdraw"
        )
        return found

    async def approval(self, approval_id: str) -> dict[str, Any]:
        found: dict[str, Any] = await self._json(
            "GET", f"/api/approvals/{quote(approval_id, safe='')}"
        )
        return found

    async def skills(self) -> list[dict[str, Any]]:
        """The enabled skills the caller may use, owned and shared (GET /api/skills)."""
        params = {"enabled": "true", "page_size": MAX_PAGE_SIZE}
        found = await self._json("GET", "/api/skills", params=params)
        return list(found)

    async def skill(self, name: str) -> dict[str, Any]:
        """One skill with its files and sizes (GET /api/skills/<name>)."""
        found: dict[str, Any] = await self._json("GET", f"/api/skills/{quote(name, safe='')}")
        return found

    async def skill_file(self, name: str, path: str) -> bytes:
        """The bytes of one file of a skill (GET /api/skills/<name>/files/<path>), confined to
        the skill's folder by the API as a `read_skill_resource` call is."""
        url = f"/api/skills/{quote(name, safe='')}/files/{quote(path, safe='/')}"
        response = await self._send(self._request("GET", url))
        if response.status_code >= 400:
            raise self._error(response)
        return response.content

    async def file(self, file_id: str) -> bytes:
        """The bytes of one of the caller's files (GET /api/files/<id>)."""
        response = await self._send(self._request("GET", f"/api/files/{quote(file_id, safe='')}"))
        if response.status_code >= 400:
            raise self._error(response)
        return response.content

    async def cancel_run(self, run_id: str) -> dict[str, Any]:
        found: dict[str, Any] = await self._json(
            "POST", f"/api/runs/{quote(run_id, safe='')}/cancel"
        )
        return found

    async def run_events(self, run_id: str) -> AsyncIterator[RunEvent]:
        """A run's events from its start until its exit event (GET /api/runs/<id>/events)."""
        path = f"/api/runs/{quote(run_id, safe='')}/events"
        request = self._request("GET", path, headers={"Accept": "text/event-stream"})
        response = await self._send(request, stream=True)
        try:
            if response.status_code >= 400:
                await response.aread()
                raise self._error(response)
            async for event in _events(response.aiter_lines()):
                yield event
                if event.kind == "exit":
                    return
        finally:
            await response.aclose()

    async def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = await self._send(self._request(method, path, **kwargs))
        if response.status_code >= 400:
            raise self._error(response)
        return response.json()

    def _request(
        self, method: str, path: str, headers: Mapping[str, str] | None = None, **kwargs: Any
    ) -> httpx.Request:
        request = self.http.build_request(
            method, path, headers={**self.headers, **(headers or {})}, **kwargs
        )
        request.extensions.update(self.extensions)
        return request

    async def _send(self, request: httpx.Request, stream: bool = False) -> httpx.Response:
        try:
            response = await self.http.send(request, stream=stream)
        except httpx.HTTPError as e:
            raise RestError(
                503, "api_unreachable", f"The skillfleet API can't be reached: {e}."
            ) from e
        self.verdict.hear(response)
        return response

    def _error(self, response: httpx.Response) -> RestError:
        error = _error(response)
        if _refuses_token(error):
            self.verdict.refused = error
        return error


def _refuses_token(error: RestError) -> bool:
    """Whether the API refused the token itself: not valid (401), or not an owner's or an
    agent's (a node token: 403 `forbidden`)."""
    return error.http_status == 401 or (error.http_status == 403 and error.code == "forbidden")


def _error(response: httpx.Response) -> RestError:
    """The API's error (its one shape: code, status, message) as a RestError."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return RestError(response.status_code, str(body.get("code", "error")), body["message"])
    return RestError(
        response.status_code, "error", f"The API answered HTTP {response.status_code}."
    )


async def _events(lines: AsyncIterator[str]) -> AsyncIterator[RunEvent]:
    """The events of an SSE body (keep-alive comments skipped)."""
    fields: dict[str, str] = {}
    async for line in lines:
        if line:
            name, _, value = line.partition(":")
            if name:  # a line starting with ':' is a comment
                fields[name] = value.removeprefix(" ")
            continue
        if "event" in fields and "data" in fields:
            data = json.loads(fields["data"])
            yield RunEvent(
                fields.get("id", ""), fields["event"], data if isinstance(data, dict) else {}
            )
        fields = {}

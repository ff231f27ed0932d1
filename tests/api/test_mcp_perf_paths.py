"""/mcp's short path: a `tools/call` or `tools/list` is checked by the API call it makes, with
no request of its own to check the token, and a refused token still gets the HTTP 401; the
in-process client keeps nothing between callers."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import flask
import httpx
import httpx2
import pytest
from conftest import TLS
from fleet import Fleet, fleet, sqlite_settings
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcpclients import mcp_client, new_tokens, using

from api.mcp.inprocess import InProcessClient
from api.mcp.rest import CLIENT_TIMEOUT

pytestmark = pytest.mark.fleet


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    with fleet(sqlite_settings(tmp_path_factory.mktemp("mcp-paths"), sqlite_template)) as running:
        yield running


class Requests:
    """Every request the API's Flask app serves meanwhile, as `METHOD /path`."""

    def __init__(self, app: flask.Flask) -> None:
        self.app = app
        self.seen: list[str] = []
        self.lock = threading.Lock()

    def heard(self, sender: flask.Flask, **extra: Any) -> None:
        with self.lock:
            self.seen.append(f"{flask.request.method} {flask.request.path}")

    def __enter__(self) -> Requests:
        flask.request_started.connect(self.heard, self.app)
        return self

    def __exit__(self, *exc: object) -> None:
        flask.request_started.disconnect(self.heard, self.app)


def sent_call(running: Fleet, token: str) -> tuple[dict[str, str], dict[str, Any]]:
    """The headers and body of a `tools/call list_skills` as the SDK's client sends it."""
    captured: list[httpx2.Request] = []

    async def keep(request: httpx2.Request) -> None:
        captured.append(request)

    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"},
        timeout=httpx2.Timeout(60.0),
        event_hooks={"request": [keep]},
    )

    async def call(client: Client) -> Any:
        return await client.call_tool("list_skills", {})

    using(Client(streamable_http_client(f"{running.url}/mcp", http_client=http)), call)
    for request in captured:
        body = json.loads(request.content or b"null")
        if isinstance(body, dict) and body.get("method") == "tools/call":
            return dict(request.headers), body
    raise AssertionError("the client sent no tools/call")


def post_raw(
    running: Fleet, headers: dict[str, str], body: dict[str, Any], token: str
) -> httpx.Response:
    kept = {
        name: value
        for name, value in headers.items()
        if name.lower() not in ("authorization", "content-length", "host")
    }
    with httpx.Client(verify=TLS, base_url=running.url, timeout=60) as client:
        return client.post("/mcp", json=body, headers={**kept, "Authorization": f"Bearer {token}"})


def test_a_tool_call_reaches_the_api_once(served):
    """On the 2026-07-28 protocol the SDK holds the answer's headers until the handler's
    result (or its first notification), so the call's own API request checks the token. (A
    handshake-era stream sends its headers first: its requests are checked before the call.)"""
    _owner, agent = new_tokens(served)

    async def calls(client: Client) -> list[str]:
        await client.call_tool("list_skills", {})  # the client lists the tools once, first
        with Requests(served.server.tier.flask) as requests:
            result = await client.call_tool("list_skills", {})
        assert not result.is_error, result.content
        return requests.seen

    seen = using(mcp_client(served, agent), calls)
    assert seen == ["POST /api/tools/list_skills"]


def test_a_wrong_token_on_a_tool_call_gets_the_api_401_not_a_tool_error(served):
    _owner, agent = new_tokens(served)
    headers, body = sent_call(served, agent)
    answer = post_raw(served, headers, body, "sf_not-a-token")
    assert answer.status_code == 401, answer.text
    assert answer.headers["WWW-Authenticate"] == "Bearer"
    assert answer.json()["message"].startswith("The bearer token is not valid. Send ")


def test_a_wrong_token_gets_401_even_when_the_sdk_refuses_the_call_before_the_api(served):
    _owner, agent = new_tokens(served)
    headers, body = sent_call(served, agent)
    broken = {**body, "params": {**body["params"], "name": 7}}  # refused before any handler
    assert post_raw(served, headers, broken, agent).status_code != 401
    answer = post_raw(served, headers, broken, "sf_not-a-token")
    assert answer.status_code == 401, answer.text
    assert answer.headers["WWW-Authenticate"] == "Bearer"


def test_a_deleted_token_gets_401_on_its_next_call(served):
    owner, _agent = new_tokens(served)
    with httpx.Client(
        verify=TLS, base_url=served.url, headers={"Authorization": f"Bearer {owner}"}
    ) as rest:
        made = rest.post("/api/tokens", json={"role": "agent", "label": "host"}).json()
        headers, body = sent_call(served, made["token"])
        assert post_raw(served, headers, body, made["token"]).status_code == 200
        assert rest.delete(f"/api/tokens/{made['id']}").status_code == 204
    answer = post_raw(served, headers, body, made["token"])
    assert answer.status_code == 401, answer.text
    assert answer.json()["code"] == "unauthorized"


def test_a_call_the_api_refuses_with_a_good_token_is_a_tool_error(served):
    _owner, agent = new_tokens(served)

    async def call(client: Client) -> Any:
        return await client.call_tool("no_such_tool", {})

    result = using(mcp_client(served, agent), call)
    assert result.is_error
    assert result.structured_content["error"]["code"] != "unauthorized"


def test_the_in_process_client_carries_nothing_from_one_caller_to_the_next():
    """One client serves every MCP caller of a process: a cookie one answer sets must not ride
    on the next caller's request."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        sent = dict(scope["headers"]).get(b"cookie", b"")
        headers = [(b"content-type", b"text/plain"), (b"set-cookie", b"caller=first; Path=/")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": sent})

    async def two_callers() -> list[bytes]:
        async with InProcessClient(app, "http://skillfleet.internal", CLIENT_TIMEOUT) as http:
            first = await http.get("/", headers={"Authorization": "Bearer first"})
            second = await http.get("/", headers={"Authorization": "Bearer second"})
            return [first.content, second.content]

    assert asyncio.run(two_callers()) == [b"", b""]

"""/mcp over streamable HTTP with the official SDK's client: tokens, origins, the tool list,
and calls decided and recorded as over REST."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fleet import Fleet, fleet, sqlite_settings
from mcp import Client
from mcpclients import mcp_client, new_tokens, using

pytestmark = pytest.mark.fleet

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "curl", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    with fleet(sqlite_settings(tmp_path_factory.mktemp("mcp"), sqlite_template)) as running:
        yield running


def post_mcp(running: Fleet, headers: dict[str, str], body: Any = INITIALIZE) -> httpx.Response:
    with httpx.Client(base_url=running.url, timeout=30) as client:
        return client.post("/mcp", json=body, headers={**MCP_HEADERS, **headers})


def test_without_a_token_mcp_answers_401_with_a_bearer_challenge(served):
    answer = post_mcp(served, {})
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"] == "Bearer"
    assert answer.json()["code"] == "unauthorized"


def test_a_wrong_token_gets_401_from_the_api_itself(served):
    answer = post_mcp(served, {"Authorization": "Bearer sf_not-a-token"})
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"] == "Bearer"
    assert answer.json()["message"] == "The bearer token is not valid."


def test_a_page_from_another_origin_is_refused_even_with_a_token(served):
    _owner, agent = new_tokens(served)
    for origin in ("http://evil.example", "http://127.0.0.1.evil.example:8750"):
        answer = post_mcp(served, {"Authorization": f"Bearer {agent}", "Origin": origin})
        assert answer.status_code == 403, origin
        assert answer.json()["code"] == "origin_not_allowed"
    local = post_mcp(
        served, {"Authorization": f"Bearer {agent}", "Origin": "http://localhost:3000"}
    )
    assert local.status_code == 200, local.text


def test_initialize_over_the_handshake_gives_a_session_named_by_the_client(served):
    _owner, agent = new_tokens(served)
    answer = post_mcp(served, {"Authorization": f"Bearer {agent}"})
    assert answer.status_code == 200, answer.text
    assert answer.headers["mcp-session-id"].startswith("curl-")


def test_tools_list_is_the_api_tool_list_with_tier_hints(served):
    _owner, agent = new_tokens(served)
    with served.http() as rest:
        definitions = [d["function"] for d in rest.get("/api/tools?page_size=100").json()]

    async def listed(client: Client) -> Any:
        return await client.list_tools()

    tools = {tool.name: tool for tool in using(mcp_client(served, agent), listed).tools}
    for function in definitions:
        tool = tools[function["name"]]
        assert tool.description == function["description"]
        assert tool.input_schema == function["parameters"]
    assert set(tools) == {f["name"] for f in definitions} | {"get_call_outcome"}
    assert tools["list_skills"].annotations.read_only_hint is True
    assert tools["load_skill"].annotations.read_only_hint is True
    assert tools["run_skill_script"].annotations.read_only_hint is False
    assert tools["run_skill_script"].annotations.destructive_hint is True
    assert tools["edit_skill"].annotations.destructive_hint is True


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_call_is_one_broker_call_recorded_in_the_chat_of_the_session(served, mode):
    owner, agent = new_tokens(served)

    async def calls(client: Client) -> Any:
        first = await client.call_tool("list_skills", {})
        second = await client.call_tool("list_skills", {"query": "nothing"})
        return first, second

    first, second = using(mcp_client(served, agent, name="Claude Code", mode=mode), calls)
    assert not first.is_error and not second.is_error
    assert "skills" in first.structured_content
    with httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {owner}"}) as rest:
        recorded = rest.get("/api/calls", params={"tool": "list_skills"}).json()
        chats = rest.get("/api/chats").json()
    assert [c["status"] for c in recorded] == ["done", "done"]
    names = [chat["chat_id"] for chat in chats]
    assert len(names) == 1 and names[0].startswith("mcp-claude-code-")
    # Each call names its chat, so the client's name shows with every call it made.
    assert {c["chat_id"] for c in recorded} == {names[0]}


def test_an_oversized_or_malformed_message_is_refused_and_records_nothing(served):
    owner, agent = new_tokens(served)
    auth = {"Authorization": f"Bearer {agent}"}
    with httpx.Client(base_url=served.url, timeout=30) as client:
        huge = client.post(
            "/mcp", content=b"{" + b" " * (5 * 1024 * 1024) + b"}", headers={**MCP_HEADERS, **auth}
        )
        json_type = {**MCP_HEADERS, **auth, "Content-Type": "application/json"}
        garbled = client.post("/mcp", content=b"{not json", headers=json_type)
        wrong_shape = client.post("/mcp", json=[1, "two"], headers={**MCP_HEADERS, **auth})
    assert huge.status_code == 413 and huge.json()["code"] == "body_too_large"
    assert garbled.status_code == 400, garbled.text
    assert wrong_shape.status_code == 400, wrong_shape.text
    with httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {owner}"}) as rest:
        assert rest.get("/api/calls").json() == []


def test_fifty_calls_at_once_are_fifty_recorded_calls_and_no_error(served):
    owner, agent = new_tokens(served)

    async def fifty(client: Client) -> list[Any]:
        calls = [
            client.call_tool("list_skills", {}, meta={"skillfleet/turn_id": f"t{i}"})
            for i in range(50)
        ]
        return list(await asyncio.gather(*calls))

    results = using(mcp_client(served, agent), fifty)
    assert [r.is_error for r in results] == [False] * 50
    with httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {owner}"}) as rest:
        recorded = rest.get("/api/calls", params={"tool": "list_skills", "page_size": 100}).json()
    assert len(recorded) == 50 and {c["status"] for c in recorded} == {"done"}

"""/mcp over streamable HTTP with the official SDK's client: tokens, origins, the tool list,
and calls decided and recorded as over REST."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import TLS
from fleet import Fleet, fleet, sqlite_settings
from mcp import Client
from mcpclients import mcp_client, new_tokens, using
from sqlalchemy import func, select

from api.mcp.http import WHAT_TO_SEND
from store.models import ToolCall

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
    with httpx.Client(verify=TLS, base_url=running.url, timeout=30) as client:
        return client.post("/mcp", json=body, headers={**MCP_HEADERS, **headers})


def test_without_a_token_mcp_answers_401_with_a_bearer_challenge(served):
    answer = post_mcp(served, {})
    assert answer.status_code == 401
    metadata = f"{served.url}/.well-known/oauth-protected-resource/mcp"
    assert answer.headers["WWW-Authenticate"] == f'Bearer resource_metadata="{metadata}"'
    assert answer.json()["code"] == "unauthorized"
    assert "Send 'Authorization: Bearer <agent token>'" in answer.json()["message"]


def test_a_wrong_token_gets_401_from_the_api_itself_saying_what_to_send(served):
    answer = post_mcp(served, {"Authorization": "Bearer sf_not-a-token"})
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"] == "Bearer"
    message = answer.json()["message"]
    assert message.startswith("The bearer token is not valid. Send 'Authorization: Bearer <agent")
    assert "skillfleet tokens create --owner <you> --role agent" in message


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
    with httpx.Client(
        verify=TLS, base_url=served.url, headers={"Authorization": f"Bearer {owner}"}
    ) as rest:
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
    with httpx.Client(verify=TLS, base_url=served.url, timeout=30) as client:
        huge = client.post(
            "/mcp", content=b"{" + b" " * (5 * 1024 * 1024) + b"}", headers={**MCP_HEADERS, **auth}
        )
        json_type = {**MCP_HEADERS, **auth, "Content-Type": "application/json"}
        garbled = client.post("/mcp", content=b"{not json", headers=json_type)
        wrong_shape = client.post("/mcp", json=[1, "two"], headers={**MCP_HEADERS, **auth})
    assert huge.status_code == 413 and huge.json()["code"] == "body_too_large"
    assert garbled.status_code == 400, garbled.text
    assert wrong_shape.status_code == 400, wrong_shape.text
    with httpx.Client(
        verify=TLS, base_url=served.url, headers={"Authorization": f"Bearer {owner}"}
    ) as rest:
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
    with httpx.Client(
        verify=TLS, base_url=served.url, headers={"Authorization": f"Bearer {owner}"}
    ) as rest:
        recorded = rest.get("/api/calls", params={"tool": "list_skills", "page_size": 100}).json()
    assert len(recorded) == 50 and {c["status"] for c in recorded} == {"done"}


# --- Refusals: one error shape, the token first, nothing recorded -------------------------------

DEEP = b"[" * 5000 + b"]" * 5000  # past what any JSON reader here nests
JSON_HEADERS = {**MCP_HEADERS, "Content-Type": "application/json"}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
NODE_REFUSED = {
    "code": "forbidden",
    "status": 403,
    "message": f"This is a node's token, which can't use /mcp. {WHAT_TO_SEND}",
}
# A tools/call of a 2026-07-28 client: its protocol's headers and envelope.
MODERN_HEADERS = {
    **MCP_HEADERS,
    "MCP-Protocol-Version": "2026-07-28",
    "Mcp-Method": "tools/call",
    "Mcp-Name": "list_skills",
}
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def recorded_calls(running: Fleet) -> int:
    with running.services.sessions() as session:
        return session.scalar(select(func.count()).select_from(ToolCall)) or 0


def test_a_message_nested_too_deep_is_read_only_after_its_token_and_never_answered_500(served):
    owner, agent = new_tokens(served)
    before = recorded_calls(served)
    with httpx.Client(verify=TLS, base_url=served.url, timeout=30) as client:
        wrong = client.post(
            "/mcp", content=DEEP, headers={**JSON_HEADERS, "Authorization": "Bearer sf_not-a-token"}
        )
        valid = client.post(
            "/mcp", content=DEEP, headers={**JSON_HEADERS, "Authorization": f"Bearer {agent}"}
        )

    assert wrong.status_code == 401 and wrong.headers["WWW-Authenticate"] == "Bearer"
    assert wrong.json() == {
        "code": "unauthorized",
        "status": 401,
        "message": f"The bearer token is not valid. {WHAT_TO_SEND}",
    }
    assert valid.status_code == 400 and valid.json()["code"] == "invalid_json"
    assert valid.json()["message"].startswith(
        "The request body is not valid JSON: recursion limit exceeded"
    )
    assert recorded_calls(served) == before


def test_a_request_state_nested_too_deep_is_a_tool_error_and_starts_no_call(served):
    _owner, agent = new_tokens(served)
    before = recorded_calls(served)
    call = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {
            "name": "list_skills",
            "arguments": {},
            "requestState": DEEP.decode(),
            "_meta": MODERN_META,
        },
    }

    answer = post_mcp(served, {**MODERN_HEADERS, "Authorization": f"Bearer {agent}"}, call)

    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert result["isError"] is True
    assert result["structuredContent"]["error"] == {
        "code": "request_state_invalid",
        "message": "The requestState is not one this server gave; call the tool again.",
    }
    assert recorded_calls(served) == before


@pytest.mark.parametrize("message", [INITIALIZE, TOOLS_LIST], ids=["initialize", "tools/list"])
def test_a_node_token_is_refused_403_forbidden_which_clients_do_not_retry(served, message):
    node_token = served.node_env("mcp-refused-node")["SKILLFLEET_NODE_TOKEN"]
    before = recorded_calls(served)

    answer = post_mcp(served, {"Authorization": f"Bearer {node_token}"}, message)

    assert answer.status_code == 403
    assert answer.json() == NODE_REFUSED
    assert "mcp-session-id" not in answer.headers
    assert recorded_calls(served) == before


@pytest.mark.parametrize("method", ["DELETE", "PUT", "PATCH", "OPTIONS", "TRACE"])
def test_a_method_mcp_does_not_take_is_405_with_allow_whatever_the_token(served, method):
    _owner, agent = new_tokens(served)
    with httpx.Client(verify=TLS, base_url=served.url, timeout=30) as client:
        answers = [
            client.request(method, "/mcp", headers={**JSON_HEADERS, **auth}, json=INITIALIZE)
            for auth in ({"Authorization": f"Bearer {agent}"}, {})
        ]

    for answer in answers:
        assert answer.status_code == 405
        assert answer.headers["Allow"] == "GET, POST"
        assert answer.json() == {
            "code": "method_not_allowed",
            "status": 405,
            "message": f"/mcp does not take {method}; it takes GET, POST.",
        }


def test_a_get_without_a_session_is_405_with_allow_as_mcp_says(served):
    _owner, agent = new_tokens(served)
    with httpx.Client(verify=TLS, base_url=served.url, timeout=30) as client:
        answer = client.get(
            "/mcp", headers={"Authorization": f"Bearer {agent}", "Accept": "text/event-stream"}
        )

    assert answer.status_code == 405 and answer.headers["Allow"] == "GET, POST"
    assert answer.json()["code"] == "method_not_allowed"


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({"Content-Type": "text/plain"}, 415, "unsupported_media_type"),
        ({"Content-Type": "application/json", "Accept": "application/json"}, 406, "not_acceptable"),
    ],
    ids=["not JSON", "no event stream accepted"],
)
def test_a_post_that_cant_carry_an_mcp_message_is_refused_in_the_one_error_shape(
    served, headers, status, code
):
    _owner, agent = new_tokens(served)
    before = recorded_calls(served)
    sent = {"Accept": "application/json, text/event-stream", **headers}
    with httpx.Client(verify=TLS, base_url=served.url, timeout=30) as client:
        answer = client.post(
            "/mcp",
            content=json.dumps(TOOLS_LIST),
            headers={**sent, "Authorization": f"Bearer {agent}"},
        )

    assert answer.status_code == status
    assert set(answer.json()) == {"code", "status", "message"}
    assert answer.json()["code"] == code and answer.json()["status"] == status
    assert recorded_calls(served) == before

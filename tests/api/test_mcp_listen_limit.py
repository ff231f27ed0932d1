"""One token holds at most SKILLFLEET_MCP_LISTEN_LIMIT `subscriptions/listen` streams of /mcp
open at once: past it a listen is refused with a JSON-RPC error at HTTP 429, counted in Redis
across API processes, and a stream that ends gives its slot back."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest
from conftest import TLS
from fleet import Fleet, fleet, sqlite_settings, wait_until
from mcp.shared.exceptions import MCPError
from mcpclients import McpOwner, mcp_client, using

from relay import naming
from store.settings import DEFAULT_STREAM_LIMIT, Settings
from store.tokens import token_digest

pytestmark = pytest.mark.fleet

LIMIT = 2


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    folder = tmp_path_factory.mktemp("mcp-listens")
    with fleet(sqlite_settings(folder, sqlite_template, mcp_listen_limit=LIMIT)) as running:
        yield running


def held(running: Fleet, token: str) -> int:
    """The listen slots the token holds now."""
    return int(running.services.redis.zcard(naming.listen_slots(token_digest(token))))


def test_a_listen_past_the_tokens_limit_is_refused_until_one_closes(served):
    owner = McpOwner.create(served)

    async def scenario(client: Any) -> Any:
        async with contextlib.AsyncExitStack() as stack:
            for _ in range(LIMIT):
                await stack.enter_async_context(client.listen(resources_list_changed=True))
            assert await anyio.to_thread.run_sync(held, served, owner.agent) == LIMIT
            with pytest.raises(MCPError) as refused:
                async with client.listen(resources_list_changed=True):
                    pass
        # Every stream of the stack closed: their slots come back once the server saw it.
        await anyio.to_thread.run_sync(
            lambda: wait_until(lambda: held(served, owner.agent) == 0, 30, "the slots back")
        )
        async with client.listen(resources_list_changed=True) as again:
            return refused.value, again.honored

    refused, honored = using(mcp_client(served, owner.agent), scenario)
    assert refused.code == -32029
    assert f"already holds {LIMIT} open subscriptions/listen streams" in refused.message
    assert refused.data == {"code": "too_many_streams", "status": 429, "limit": LIMIT}
    assert honored.resources_list_changed is True


def test_a_refused_listen_is_answered_429_with_its_json_rpc_id_and_other_tokens_still_listen(
    served,
):
    owner, other = McpOwner.create(served), McpOwner.create(served)
    listen = {"jsonrpc": "2.0", "id": 7, "method": "subscriptions/listen", "params": {
        "filter": {"resourcesListChanged": True},
        "_meta": {types.PROTOCOL_VERSION_META_KEY: "2026-07-28",
                  types.CLIENT_INFO_META_KEY: {"name": "raw", "version": "1"}},
    }}  # fmt: skip
    served.services.redis.delete(naming.listen_slots(token_digest(owner.agent)))
    for number in range(LIMIT):  # as streams another API process holds
        served.services.redis.zadd(
            naming.listen_slots(token_digest(owner.agent)), {f"elsewhere-{number}": 2e12}
        )
    headers = {
        "Authorization": f"Bearer {owner.agent}",
        "Accept": "application/json, text/event-stream",
    }
    with httpx.Client(verify=TLS, timeout=30) as http:
        refused = http.post(f"{served.url}/mcp", headers=headers, json=listen)
    assert refused.status_code == 429
    assert refused.headers["content-type"].startswith("application/json")
    body = json.loads(refused.text)
    assert body["id"] == 7 and body["error"]["data"]["code"] == "too_many_streams"
    assert held(served, owner.agent) == LIMIT  # the refusal took nothing

    async def scenario(client: Any) -> Any:
        async with client.listen(resources_list_changed=True) as subscription:
            return subscription.honored

    assert using(mcp_client(served, other.agent), scenario).resources_list_changed is True


def test_the_listen_limit_defaults_to_the_stream_limit_and_may_be_set_apart():
    assert Settings().mcp_listen_limit == DEFAULT_STREAM_LIMIT
    assert Settings.from_env({"SKILLFLEET_STREAM_LIMIT": "50"}).mcp_listen_limit == 50
    both = {"SKILLFLEET_STREAM_LIMIT": "50", "SKILLFLEET_MCP_LISTEN_LIMIT": "5"}
    assert Settings.from_env(both).mcp_listen_limit == 5

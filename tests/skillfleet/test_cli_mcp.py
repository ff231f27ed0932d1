"""`skillfleet mcp`: the gateway over stdio, started as a host starts it, a client of the API."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import TLS
from fleet import Fleet, fleet, sqlite_settings
from mcp import Client
from mcpclients import new_tokens, stdio_client, stdio_env, using

pytestmark = pytest.mark.fleet


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    with fleet(sqlite_settings(tmp_path_factory.mktemp("mcp"), sqlite_template)) as running:
        yield running


def test_the_stdio_server_lists_the_api_tools_and_records_calls_in_its_chat(served):
    owner, agent = new_tokens(served)

    async def scenario(client: Client) -> Any:
        tools = await client.list_tools()
        called = await client.call_tool("list_skills", {})
        return tools, called

    tools, called = using(stdio_client(served, agent), scenario)
    with served.http() as rest:
        definitions = {d["function"]["name"] for d in rest.get("/api/tools?page_size=100").json()}
    assert {tool.name for tool in tools.tools} == definitions | {"get_call_outcome"}
    assert not called.is_error and "skills" in called.structured_content
    with httpx.Client(
        verify=TLS, base_url=served.url, headers={"Authorization": f"Bearer {owner}"}
    ) as rest:
        chats = [chat["chat_id"] for chat in rest.get("/api/chats").json()]
        recorded = rest.get("/api/calls").json()
    assert len(chats) == 1 and chats[0].startswith("mcp-claude-desktop-")
    assert [call["tool"] for call in recorded] == ["list_skills"]


@pytest.mark.parametrize(
    ("token", "message"),
    [(None, "No token: give it an agent token"), ("sf_wrong", "The bearer token is not valid.")],
)
def test_without_a_valid_token_it_exits_saying_why(served, token, message):
    finished = subprocess.run(
        [sys.executable, "-m", "skillfleet", "mcp"],
        env=stdio_env(served, token),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert finished.returncode == 1
    assert message in finished.stderr
    assert "SKILLFLEET_TOKEN=$SKILLFLEET_AGENT_TOKEN" in finished.stderr
    assert "--role agent" in finished.stderr


def test_an_owner_token_is_served_with_a_warning_to_give_an_agent_token(served):
    owner, agent = new_tokens(served)

    def started(token: str) -> str:
        with subprocess.Popen(
            [sys.executable, "-m", "skillfleet", "mcp"],
            env=stdio_env(served, token),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        ) as process:
            try:
                _, errors = process.communicate("", timeout=60)  # the host leaves at once
            finally:
                process.kill()
        return errors

    assert "SKILLFLEET_TOKEN is an owner token" in started(owner)
    assert "--role agent" in started(owner)
    assert "owner token" not in started(agent)


def test_other_commands_do_not_import_the_mcp_sdk_or_the_api():
    """Every `skillfleet` command starts by importing the CLI: the gateway's second of imports
    is paid only by `skillfleet mcp`."""
    probe = "import sys, skillfleet.cli; print(sorted({'mcp', 'api', 'flask'} & set(sys.modules)))"
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert loaded.stdout.strip() == "[]"

"""ask_owner over /mcp: the call waits, its progress says how the owner answers, and the
client gets the answer as the tool's result."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fleet import Fleet, fleet, sqlite_settings
from mcp import Client
from mcpclients import McpOwner, mcp_client, using

pytestmark = pytest.mark.fleet


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    with fleet(sqlite_settings(tmp_path_factory.mktemp("mcp-q"), sqlite_template)) as running:
        yield running


def test_ask_owner_over_mcp_waits_and_returns_the_owners_answer(served):
    owner = McpOwner.create(served)
    told: list[str] = []

    async def noted(done: float, total: float | None, message: str | None) -> None:
        if message and not told:
            told.append(message)
            with owner.rest() as rest:
                [question] = rest.get("/api/questions", params={"status": "pending"}).json()
                assert question["id"] in message
                reply = rest.post(f"/api/questions/{question['id']}", json={"answer": "blue"})
            assert reply.status_code == 200, reply.text

    async def scenario(client: Client) -> Any:
        arguments = {"question": "Which colour?", "choices": ["red", "blue"]}
        return await client.call_tool("ask_owner", arguments, progress_callback=noted)

    result = using(mcp_client(served, owner.agent), scenario)
    assert told and "skillfleet questions answer" in told[0] and "#/questions" in told[0]
    assert not result.is_error, result.content
    assert result.structured_content == {"answer": "blue"}

"""URL elicitation over /mcp: a call waiting for the owner points a client that can open URLs
at the console's approvals page, and what the client answers approves nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from fleet import Fleet, fleet, sqlite_settings
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcpclients import McpOwner, mcp_client, stdio_client, using

pytestmark = pytest.mark.fleet

WIPE_NODE = {"skillfleet.tier": "destructive", "skillfleet.execution": "node"}
WIPER = "print('wiped', flush=True)\n"
RUN = {"skill_name": "wiper", "script": "scripts/s.py", "arguments": {}, "node": "elicit-node"}


class Owner(McpOwner):
    def pending(self) -> list[dict[str, Any]]:
        with self.rest() as rest:
            return list(rest.get("/api/approvals", params={"status": "pending"}).json())

    def approve(self, approval_id: str) -> None:
        with self.rest() as rest:
            reply = rest.post(f"/api/approvals/{approval_id}", json={"decision": "approve"})
        assert reply.status_code == 200, reply.text


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    with fleet(sqlite_settings(tmp_path_factory.mktemp("elicit"), sqlite_template)) as running:
        running.start_node("elicit-node")
        yield running


@pytest.fixture
def owner(served: Fleet) -> Owner:
    found = Owner.create(served)
    owned = Fleet(**{**served.__dict__, "owner_token": found.token})
    owned.import_skill("wiper", WIPE_NODE, {"scripts/s.py": WIPER})
    return found


class Link:
    """An elicitation callback that notes each URL it is asked to open and answers `action`."""

    def __init__(self, action: str) -> None:
        self.action = action
        self.asked: list[types.ElicitRequestParams] = []

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        self.asked.append(params)
        return types.ElicitResult(action=self.action)  # type: ignore[arg-type]


def approve_when_waiting(owner: Owner, seen: list[list[dict[str, Any]]]) -> Any:
    """A progress callback that, once told the call waits, notes the pending approvals then
    approves the call's one."""

    async def noted(done: float, total: float | None, message: str | None) -> None:
        if message and "approval" in message and not seen:
            pending = await asyncio.to_thread(owner.pending)
            seen.append(pending)
            await asyncio.to_thread(owner.approve, pending[0]["id"])

    return noted


def test_a_client_that_opens_urls_gets_the_consoles_approvals_page_and_the_run_once_approved(
    owner,
):
    link = Link("accept")
    seen: list[list[dict[str, Any]]] = []
    noted = approve_when_waiting(owner, seen)

    async def scenario(client: Client) -> Any:
        return await client.call_tool("run_skill_script", RUN, progress_callback=noted)

    result = using(mcp_client(owner.running, owner.agent, elicitation_callback=link), scenario)
    assert not result.is_error, result.content
    assert result.structured_content["stdout"] == "wiped\n"
    [asked] = link.asked
    assert isinstance(asked, types.ElicitRequestURLParams)
    assert asked.url == f"{owner.running.url}/#/approvals"
    [[approval]] = seen  # after the link was accepted, the approval still waited for the owner
    assert approval["status"] == "pending" and approval["id"] in asked.message
    assert "scripts/s.py of the skill wiper" in asked.message  # what the owner is asked
    with owner.rest() as rest:
        calls = rest.get("/api/calls").json()
        approvals = rest.get("/api/approvals").json()
    assert [call["call_id"] for call in calls] == [approval["call_id"]]  # coming back: no new call
    assert [a["status"] for a in approvals] == ["approved"]


def test_a_declined_link_returns_the_pending_call_and_its_approval_still_waits(owner):
    link = Link("decline")

    async def scenario(client: Client) -> Any:
        return await client.call_tool("run_skill_script", RUN)

    result = using(mcp_client(owner.running, owner.agent, elicitation_callback=link), scenario)
    assert len(link.asked) == 1
    assert not result.is_error
    pending = result.structured_content
    assert pending["status"] == "pending_approval"
    assert [a["id"] for a in owner.pending()] == [pending["approval_id"]]
    with owner.rest() as rest:
        assert rest.get("/api/runs").json() == []


@pytest.mark.parametrize(
    ("mode", "link"),
    [("auto", None), ("legacy", Link("accept"))],
    ids=["no-elicitation-capability", "handshake-era-client"],
)
def test_a_client_that_cant_take_url_elicitations_just_waits_for_the_owner(owner, mode, link):
    seen: list[list[dict[str, Any]]] = []
    noted = approve_when_waiting(owner, seen)
    options = {"elicitation_callback": link} if link else {}

    async def scenario(client: Client) -> Any:
        return await client.call_tool("run_skill_script", RUN, progress_callback=noted)

    result = using(mcp_client(owner.running, owner.agent, mode=mode, **options), scenario)
    assert not result.is_error, result.content  # an elicitation it can't take would fail it
    assert result.structured_content["stdout"] == "wiped\n"
    assert link is None or link.asked == []


def test_a_handshake_era_client_over_stdio_is_shown_the_link_while_the_call_waits(owner):
    # stdio carries the server's own requests: the link comes as an elicitation/create beside
    # the wait, and the owner's answer, not the link's, lets the run go ahead.
    link = Link("accept")
    seen: list[list[dict[str, Any]]] = []
    noted = approve_when_waiting(owner, seen)

    async def scenario(client: Client) -> Any:
        return await client.call_tool("run_skill_script", RUN, progress_callback=noted)

    client = stdio_client(owner.running, owner.agent, mode="legacy", elicitation_callback=link)
    result = using(client, scenario)
    assert not result.is_error, result.content
    assert result.structured_content["stdout"] == "wiped\n"
    [asked] = link.asked
    assert isinstance(asked, types.ElicitRequestURLParams)
    assert asked.url == f"{owner.running.url}/#/approvals"
    [[approval]] = seen
    assert approval["id"] in asked.message


def test_a_link_declined_over_stdio_returns_the_pending_call_at_once(owner):
    link = Link("decline")

    async def scenario(client: Client) -> Any:
        return await client.call_tool("run_skill_script", RUN)

    client = stdio_client(owner.running, owner.agent, mode="legacy", elicitation_callback=link)
    result = using(client, scenario)
    assert len(link.asked) == 1
    pending = result.structured_content
    assert pending["status"] == "pending_approval"
    assert [a["id"] for a in owner.pending()] == [pending["approval_id"]]

"""Calls over /mcp that run scripts on a real node worker: output as progress, cancellation,
approvals the owner answers while the client waits, the turn limit and owners kept apart."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from fleet import Fleet, LiveServer, fleet, sqlite_settings, wait_until
from mcp import Client
from mcpclients import McpOwner, Recorded, http_client, mcp_client, new_tokens, using
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from api import create_app
from api.services import Services

pytestmark = pytest.mark.fleet

READ_NODE = {"skillfleet.tier": "read", "skillfleet.execution": "node"}
WIPE_NODE = {"skillfleet.tier": "destructive", "skillfleet.execution": "node"}
THREE_LINES = (
    "import sys\n"
    "for i in range(3):\n"
    "    print(f'line {i}', flush=True)\n"
    "print('oops', file=sys.stderr)\n"
)
SLEEPER = "import time\nprint('started', flush=True)\ntime.sleep(300)\n"
WIPER = "print('wiped', flush=True)\n"


class Owner(McpOwner):
    def import_skill(self, name: str, metadata: dict[str, str], script: str) -> None:
        owned = Fleet(**{**self.running.__dict__, "owner_token": self.token})
        owned.import_skill(name, metadata, {"scripts/s.py": script})


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    with fleet(sqlite_settings(tmp_path_factory.mktemp("mcp"), sqlite_template)) as running:
        running.start_node("mcp-node")
        yield running


@pytest.fixture
def owner(served: Fleet) -> Owner:
    return Owner.create(served)


def run_arguments(skill: str) -> dict[str, Any]:
    return {"skill_name": skill, "script": "scripts/s.py", "arguments": {}, "node": "mcp-node"}


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_run_sends_each_output_line_as_progress_then_its_exit_code_and_output(owner, mode):
    owner.import_skill("lines", READ_NODE, THREE_LINES)
    progress: list[str | None] = []

    async def noted(done: float, total: float | None, message: str | None) -> None:
        progress.append(message)

    async def scenario(client: Client) -> Any:
        result = await client.call_tool(
            "run_skill_script", run_arguments("lines"), progress_callback=noted
        )
        return result, list(progress)  # what had come when the result came

    result, before = using(mcp_client(owner.running, owner.agent, mode=mode), scenario)
    assert not result.is_error, result.content
    assert before == ["line 0", "line 1", "line 2", "oops"]
    structured = result.structured_content
    assert (structured["exit_code"], structured["status"]) == (0, "succeeded")
    assert structured["stdout"] == "line 0\nline 1\nline 2\n"
    assert structured["stderr"] == "oops\n"
    assert result.content[0].text.startswith("exit code 0 (succeeded)")


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_client_that_cancels_its_call_cancels_the_run_while_still_connected(owner, mode):
    owner.import_skill("sleeper", READ_NODE, SLEEPER)
    started = asyncio.Event()

    async def noted(done: float, total: float | None, message: str | None) -> None:
        if message == "started":
            started.set()

    def cancelled_run() -> dict[str, Any]:
        with owner.rest() as rest:
            runs = wait_until(
                lambda: [r for r in rest.get("/api/runs").json() if r["status"] == "cancelled"],
                60,
                "the run to be cancelled",
            )
            return dict(rest.get(f"/api/calls/{runs[0]['call_id']}").json())

    async def scenario(client: Client) -> dict[str, Any]:
        arguments = run_arguments("sleeper")
        call = asyncio.create_task(
            client.call_tool("run_skill_script", arguments, progress_callback=noted)
        )
        await started.wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        return await asyncio.to_thread(cancelled_run)  # the client has not left

    call = using(mcp_client(owner.running, owner.agent, mode=mode), scenario)
    assert call["status"] == "failed" and call["error_code"] == "cancelled"


def test_a_cancellation_that_reaches_another_api_process_still_cancels_the_run(owner, served):
    # A handshake-era client sends its cancellation in a request of its own, keeping the call's
    # stream open; behind a load balancer that request may reach another process, which relays
    # it through Redis to the one serving the call.
    owner.import_skill("sleeper", READ_NODE, SLEEPER)
    second = LiveServer(create_app(services=Services.build(served.settings)))
    recorded = Recorded()
    started = asyncio.Event()

    async def noted(done: float, total: float | None, message: str | None) -> None:
        if message == "started":
            started.set()

    async def cancel_at(url: str) -> None:
        headers, call = recorded.request("tools/call")
        cancel = types.CancelledNotification(
            params=types.CancelledNotificationParams(request_id=call["id"])
        )
        message = {"jsonrpc": "2.0", **cancel.model_dump(by_alias=True, mode="json")}
        kept = ("authorization", "mcp-session-id", "mcp-protocol-version", "accept")
        async with http_client(None, {k: headers[k] for k in kept if k in headers}) as client:
            sent = await client.post(f"{url}/mcp", json=message)
        assert sent.status_code == 202, sent.text

    async def scenario(client: Client) -> types.CallToolResult:
        call = asyncio.create_task(
            client.call_tool("run_skill_script", run_arguments("sleeper"), progress_callback=noted)
        )
        await started.wait()
        await cancel_at(second.url)
        return await asyncio.wait_for(call, 60)  # its stream stayed open: it hears the end

    try:
        via = mcp_client(owner.running, owner.agent, mode="legacy", via=recorded)
        result = using(via, scenario)
    finally:
        second.stop()
    with owner.rest() as rest:
        # The call is answered as the cancellation reaches it; the run's row follows once its
        # worker has stopped the script and recorded the end.
        runs = wait_until(
            lambda: [
                r
                for r in rest.get("/api/runs").json()
                if r["skill_name"] == "sleeper" and r["status"] != "running"
            ],
            60,
            "the run to end",
        )
        call = rest.get(f"/api/calls/{runs[0]['call_id']}").json()
    assert result.is_error and result.structured_content["error"]["code"] == "cancelled"
    assert runs[0]["status"] == "cancelled"
    assert call["status"] == "failed" and call["error_code"] == "cancelled"


def answer_when_asked(owner: Owner, decision: str) -> Any:
    """A progress callback that answers the call's approval, as the owner, once told of it."""
    answered: list[str] = []

    async def noted(done: float, total: float | None, message: str | None) -> None:
        if message and "approval" in message and not answered:
            with owner.rest() as rest:
                pending = rest.get("/api/approvals", params={"status": "pending"}).json()
            approval = pending[0]["id"]
            assert approval in message  # the waiting call names what it waits for
            answered.append(approval)
            with owner.rest() as rest:
                reply = rest.post(f"/api/approvals/{approval}", json={"decision": decision})
            assert reply.status_code == 200, reply.text

    return noted, answered


def test_a_destructive_call_waits_for_the_owner_and_runs_once_approved(owner):
    owner.import_skill("wiper", WIPE_NODE, WIPER)
    noted, answered = answer_when_asked(owner, "approve")

    async def scenario(client: Client) -> Any:
        return await client.call_tool(
            "run_skill_script", run_arguments("wiper"), progress_callback=noted
        )

    result = using(mcp_client(owner.running, owner.agent), scenario)
    assert answered, "no progress notification named the approval"
    assert not result.is_error, result.content
    assert result.structured_content["stdout"] == "wiped\n"


def test_a_denied_call_is_an_error_result_with_the_owners_no(owner):
    owner.import_skill("wiper", WIPE_NODE, WIPER)
    noted, answered = answer_when_asked(owner, "deny")

    async def scenario(client: Client) -> Any:
        return await client.call_tool(
            "run_skill_script", run_arguments("wiper"), progress_callback=noted
        )

    result = using(mcp_client(owner.running, owner.agent), scenario)
    assert answered and result.is_error
    assert result.structured_content["error"]["code"] == "owner_denied"
    with owner.rest() as rest:
        assert rest.get("/api/runs").json() == []


def test_an_edit_waits_for_the_owner_and_returns_the_new_hash_once_approved(owner):
    owner.import_skill("lister", READ_NODE, THREE_LINES)
    noted, answered = answer_when_asked(owner, "approve")
    body = "# Lister\n\nRun scripts/s.py; it prints three lines.\n"
    edit = {"skill_name": "lister", "changes": {"body": body}, "rationale": "Say what it prints."}

    async def scenario(client: Client) -> Any:
        return await client.call_tool("edit_skill", edit, progress_callback=noted)

    result = using(mcp_client(owner.running, owner.agent), scenario)
    assert answered, "no progress notification named the approval"
    assert not result.is_error, result.content
    with owner.rest() as rest:
        skill = rest.get("/api/skills/lister").json()
        header = rest.get("/api/skills/lister/files/SKILL.md").text
    assert result.structured_content["hash"] == skill["hash"]
    assert "it prints three lines" in header


def test_an_unanswered_call_names_its_approval_and_its_outcome_is_collected_later(owner):
    owner.import_skill("wiper", WIPE_NODE, WIPER)
    gateway = owner.running.server.tier.mcp.gateway
    was = gateway.approval_wait
    gateway.approval_wait = 0.5

    async def scenario(client: Client) -> Any:
        first = await client.call_tool("run_skill_script", run_arguments("wiper"))
        pending = first.structured_content
        with owner.rest() as rest:
            still = rest.get(f"/api/approvals/{pending['approval_id']}").json()
            rest.post(f"/api/approvals/{pending['approval_id']}", json={"decision": "approve"})
        gateway.approval_wait = 60.0
        later = await client.call_tool("get_call_outcome", {"call_id": pending["call_id"]})
        return first, still, later

    try:
        first, still, later = using(mcp_client(owner.running, owner.agent), scenario)
    finally:
        gateway.approval_wait = was
    assert not first.is_error and first.structured_content["status"] == "pending_approval"
    assert first.structured_content["approval_id"] in first.content[0].text
    assert "get_call_outcome" in first.content[0].text
    assert still["status"] == "pending"  # waiting over MCP answered nothing
    assert not later.is_error and later.structured_content["stdout"] == "wiped\n"


def test_no_tool_answers_an_approval(owner):
    async def scenario(client: Client) -> Any:
        return await client.list_tools()

    names = {tool.name for tool in using(mcp_client(owner.running, owner.token), scenario).tools}
    assert not [name for name in names if "approv" in name]


def test_the_51st_call_of_a_turn_is_refused_as_over_rest(owner):
    turn = {"skillfleet/turn_id": f"t-{uuid.uuid4().hex[:6]}"}

    async def scenario(client: Client) -> Any:
        results = [await client.call_tool("list_skills", {}, meta=turn) for _ in range(51)]
        return results

    results = using(mcp_client(owner.running, owner.agent), scenario)
    assert [r.is_error for r in results] == [False] * 50 + [True]
    assert "50 tool calls" in results[-1].content[0].text


def test_another_owners_agent_sees_neither_the_skills_nor_the_calls(owner, served):
    owner.import_skill("lines", READ_NODE, THREE_LINES)
    _, stranger = new_tokens(served)

    async def mine(client: Client) -> Any:
        return await client.call_tool("run_skill_script", run_arguments("lines"))

    ran = using(mcp_client(served, owner.agent), mine)

    async def theirs(client: Client) -> Any:
        listed = await client.call_tool("list_skills", {})
        loaded = await client.call_tool("load_skill", {"skill_name": "lines"})
        outcome = await client.call_tool(
            "get_call_outcome", {"call_id": ran.structured_content["run_id"]}
        )
        return listed, loaded, outcome

    listed, loaded, outcome = using(mcp_client(served, stranger), theirs)
    assert "lines" not in [s["name"] for s in listed.structured_content["skills"]]
    assert loaded.is_error and outcome.is_error


def test_a_pydantic_ai_agent_lists_loads_and_runs_a_skill_through_mcp(owner):
    owner.import_skill("lines", READ_NODE, THREE_LINES)
    steps = [
        ("list_skills", {}),
        ("load_skill", {"skill_name": "lines"}),
        ("run_skill_script", run_arguments("lines")),
    ]

    def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [
            part.content
            for message in messages
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, ToolReturnPart)
        ]
        if len(returns) < len(steps):
            name, arguments = steps[len(returns)]
            return ModelResponse(parts=[ToolCallPart(name, arguments)])
        return ModelResponse(parts=[TextPart(str(returns[-1]))])

    toolset = MCPToolset(
        f"{owner.running.url}/mcp", headers={"Authorization": f"Bearer {owner.agent}"}
    )
    agent = Agent(FunctionModel(scripted), toolsets=[toolset])
    answer = asyncio.run(agent.run("Run the lines skill.")).output
    assert "line 2" in answer
    with owner.rest() as rest:
        calls = [call["tool"] for call in rest.get("/api/calls").json()]
    assert calls == ["run_skill_script", "load_skill", "list_skills"]  # newest first

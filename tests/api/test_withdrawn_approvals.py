"""Calls whose agent stopped waiting for the owner: an MCP client that times out or cancels, a
REST `?wait=` whose connection drops, POST /api/calls/<id>/withdraw; and a chat skillfleet had
to guess, for which "approve for this chat" is not offered."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastmcp
import httpx
import mcp_types as types
import pytest
from conftest import TLS
from fleet import Fleet, LiveServer, fleet, sqlite_settings, wait_until
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcpclients import McpOwner, Recorded, http_client, mcp_client, new_tokens, using
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from api import create_app
from api.bodies import MAX_BODY_BYTES
from api.services import Services
from broker.grants import CHAT, add_grant
from store.db import transaction
from store.models import Approval
from store.tokens import create_node_token

pytestmark = pytest.mark.fleet

WIPE_NODE = {"skillfleet.tier": "destructive", "skillfleet.execution": "node"}
CHANGE_NODE = {"skillfleet.tier": "change", "skillfleet.execution": "node"}
WIPER = "print('wiped', flush=True)\n"


class Owner(McpOwner):
    def import_skill(self, name: str, metadata: dict[str, str], script: str) -> None:
        owned = Fleet(**{**self.running.__dict__, "owner_token": self.token})
        owned.import_skill(name, metadata, {"scripts/s.py": script})

    def agent_rest(self, url: str | None = None, timeout: float = 60) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.agent}"}
        return httpx.Client(
            verify=TLS, base_url=url or self.running.url, headers=headers, timeout=timeout
        )

    def approval_of(self, call_id: str) -> dict[str, Any]:
        with self.rest() as rest:
            call = rest.get(f"/api/calls/{call_id}").json()
            return dict(rest.get(f"/api/approvals/{call['approval_id']}").json())

    def runs(self) -> list[dict[str, Any]]:
        with self.rest() as rest:
            return list(rest.get("/api/runs").json())


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    with fleet(sqlite_settings(tmp_path_factory.mktemp("withdrawn"), sqlite_template)) as running:
        running.start_node("mcp-node")
        yield running


@pytest.fixture(scope="module")
def second(served: Fleet) -> Iterator[LiveServer]:
    """Another API process on the same database and Redis."""
    other = LiveServer(create_app(services=Services.build(served.settings)))
    yield other
    other.stop()


@pytest.fixture
def owner(served: Fleet) -> Owner:
    made = Owner.create(served)
    made.import_skill("wiper", WIPE_NODE, WIPER)
    made.import_skill("tidier", CHANGE_NODE, WIPER)
    return made


def run_arguments(skill: str = "wiper") -> dict[str, Any]:
    return {"skill_name": skill, "script": "scripts/s.py", "arguments": {}, "node": "mcp-node"}


def pending_call(owner: Owner) -> str:
    """A destructive call waiting for the owner's approval, made without waiting."""
    with owner.agent_rest() as rest:
        made = rest.post(
            "/api/tools/run_skill_script", json={"arguments": run_arguments(), "chat_id": "c1"}
        ).json()
    assert made["status"] == "pending_approval", made
    return str(made["call_id"])


def withdrawn(owner: Owner, call_id: str) -> dict[str, Any]:
    """The call's approval once withdrawn (waits for it)."""
    return dict(
        wait_until(
            lambda: (found := owner.approval_of(call_id))["status"] == "withdrawn" and found,
            30,
            "the approval to be withdrawn",
        )
    )


def assert_late_answer_runs_nothing(owner: Owner, call_id: str, url: str | None = None) -> None:
    approval = withdrawn(owner, call_id)
    assert approval["withdrawn_note"] and "stopped waiting" in approval["withdrawn_note"]
    headers = {"Authorization": f"Bearer {owner.token}"}
    with httpx.Client(
        verify=TLS, base_url=url or owner.running.url, headers=headers, timeout=60
    ) as rest:
        late = rest.post(f"/api/approvals/{approval['id']}", json={"decision": "approve"})
        call = rest.get(f"/api/calls/{call_id}").json()
    assert late.status_code == 409, late.text
    assert late.json()["code"] == "approval_withdrawn"
    assert (call["status"], call["error_code"]) == ("expired", "approval_withdrawn")
    assert owner.runs() == []  # nothing ran
    assert owner.approval_of(call_id)["status"] == "withdrawn"


# -- MCP ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_client_that_times_out_while_its_destructive_call_waits_withdraws_it(owner, mode):
    async def scenario(client: Client) -> BaseException | None:
        try:
            await client.call_tool("run_skill_script", run_arguments(), read_timeout_seconds=2)
        except MCPError as e:  # the SDK gives up, and tells the server it cancelled
            return e
        return None

    given_up = using(mcp_client(owner.running, owner.agent, mode=mode), scenario)
    assert given_up is not None, "the call should have timed out at the client"
    with owner.rest() as rest:
        calls = rest.get("/api/calls", params={"tool": "run_skill_script"}).json()
    assert_late_answer_runs_nothing(owner, calls[0]["call_id"])


def test_a_client_that_cancels_on_one_process_gets_its_late_answer_refused_on_another(
    owner, second
):
    started = asyncio.Event()

    async def noted(done: float, total: float | None, message: str | None) -> None:
        if message and "approval" in message:
            started.set()

    async def scenario(client: Client) -> None:
        call = asyncio.create_task(
            client.call_tool("run_skill_script", run_arguments(), progress_callback=noted)
        )
        await asyncio.wait_for(started.wait(), 30)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    using(mcp_client(owner.running, owner.agent), scenario)
    with owner.rest() as rest:
        calls = rest.get("/api/calls", params={"tool": "run_skill_script"}).json()
    assert_late_answer_runs_nothing(owner, calls[0]["call_id"], url=second.url)


def test_a_cancellation_sent_to_another_process_withdraws_the_approval_there(owner, second):
    # A handshake-era client sends its cancellation in a request of its own, which a load
    # balancer may give to another process: it is relayed to the one serving the call.
    recorded = Recorded()
    asked = asyncio.Event()

    async def noted(done: float, total: float | None, message: str | None) -> None:
        if message and "approval" in message:
            asked.set()

    async def scenario(client: Client) -> types.CallToolResult:
        call = asyncio.create_task(
            client.call_tool("run_skill_script", run_arguments(), progress_callback=noted)
        )
        await asyncio.wait_for(asked.wait(), 30)
        headers, sent = recorded.request("tools/call")
        cancel = types.CancelledNotification(
            params=types.CancelledNotificationParams(request_id=sent["id"])
        )
        message = {"jsonrpc": "2.0", **cancel.model_dump(by_alias=True, mode="json")}
        kept = ("authorization", "mcp-session-id", "mcp-protocol-version", "accept")
        async with http_client(None, {k: headers[k] for k in kept if k in headers}) as other:
            relayed = await other.post(f"{second.url}/mcp", json=message)
        assert relayed.status_code == 202, relayed.text
        return await asyncio.wait_for(call, 60)  # its stream stayed open: it hears the end

    via = mcp_client(owner.running, owner.agent, mode="legacy", via=recorded)
    result = using(via, scenario)
    assert result.is_error and result.structured_content["error"]["code"] == "cancelled"
    with owner.rest() as rest:
        calls = rest.get("/api/calls", params={"tool": "run_skill_script"}).json()
    assert_late_answer_runs_nothing(owner, calls[0]["call_id"], url=second.url)


def test_a_call_that_outlives_the_wait_stays_pending_and_collectable(owner):
    gateway = owner.running.server.tier.mcp.gateway
    was = gateway.approval_wait
    gateway.approval_wait = 0.5

    async def scenario(client: Client) -> Any:
        return await client.call_tool("run_skill_script", run_arguments())

    try:
        first = using(mcp_client(owner.running, owner.agent), scenario)
    finally:
        gateway.approval_wait = was
    pending = first.structured_content
    assert pending["status"] == "pending_approval"
    assert owner.approval_of(pending["call_id"])["status"] == "pending"  # not withdrawn


# -- REST ------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["post", "get"])
def test_a_rest_wait_whose_connection_drops_withdraws_the_approval(owner, second, how):
    body = {"arguments": run_arguments(), "chat_id": "c1"}
    # The wait is served by the second process; the owner answers on the first.
    with owner.agent_rest(second.url, timeout=1.5) as rest:
        with pytest.raises(httpx.ReadTimeout):
            if how == "post":
                rest.post("/api/tools/run_skill_script", params={"wait": 30}, json=body)
            else:
                call_id = pending_call(owner)
                rest.get(f"/api/calls/{call_id}", params={"wait": 30})
    with owner.rest() as rest:
        calls = rest.get("/api/calls", params={"tool": "run_skill_script"}).json()
    assert_late_answer_runs_nothing(owner, calls[0]["call_id"])


def test_a_wait_that_keeps_its_approval_leaves_it_pending(owner):
    call_id = pending_call(owner)
    with owner.agent_rest(timeout=1.5) as rest:
        with pytest.raises(httpx.ReadTimeout):
            rest.get(f"/api/calls/{call_id}", params={"wait": 30, "keep_pending": "true"})
    with owner.agent_rest() as rest:  # a wait that ends by itself withdraws nothing either
        assert rest.get(f"/api/calls/{call_id}", params={"wait": 1}).json()["status"] == (
            "pending_approval"
        )
    assert owner.approval_of(call_id)["status"] == "pending"


def test_the_withdraw_route_withdraws_once_and_refuses_what_is_not_waiting(owner, served):
    call_id = pending_call(owner)
    with owner.agent_rest() as rest:
        first = rest.post(f"/api/calls/{call_id}/withdraw")
        again = rest.post(f"/api/calls/{call_id}/withdraw")
    assert first.status_code == 200, first.text
    assert (first.json()["status"], first.json()["error_code"]) == ("expired", "approval_withdrawn")
    assert again.status_code == 409 and again.json()["code"] == "call_not_waiting"
    assert_late_answer_runs_nothing(owner, call_id)


def test_the_withdraw_route_checks_who_asks_and_what(owner, served):
    call_id = pending_call(owner)
    stranger, stranger_agent = new_tokens(served)
    with transaction(served.services.sessions) as session:
        node_token = create_node_token(session, "mcp-node")
    url = f"/api/calls/{call_id}/withdraw"
    with httpx.Client(verify=TLS, base_url=served.url, timeout=30) as bare:
        assert bare.post(url).status_code == 401
        for token in (stranger, stranger_agent):
            refused = bare.post(url, headers={"Authorization": f"Bearer {token}"})
            assert refused.status_code == 404 and refused.json()["code"] == "call_not_found"
        as_node = bare.post(url, headers={"Authorization": f"Bearer {node_token}"})
        assert as_node.status_code == 403
    with owner.agent_rest() as rest:
        for bad in ("..%2F..%2Fetc", "a%00b", "x" * 300):
            found = rest.post(f"/api/calls/{bad}/withdraw")
            assert found.status_code == 404, (bad, found.text)
        huge = rest.post(url, content=b"x" * (MAX_BODY_BYTES + 1))
        assert huge.status_code == 413
        shaped = rest.post(url, json=[1, 2, 3])  # the route reads no body: the shape is moot
        assert shaped.status_code == 200, shaped.text
    assert owner.approval_of(call_id)["status"] == "withdrawn"
    assert owner.runs() == []


def race(owner: Owner, call_id: str, approval_id: str) -> dict[str, int]:
    """The agent's withdrawal and the owner's denial of one approval, sent at once."""
    answers: dict[str, int] = {}
    go = threading.Barrier(2)

    def withdraw() -> None:
        with owner.agent_rest() as rest:
            go.wait()
            answers["withdraw"] = rest.post(f"/api/calls/{call_id}/withdraw").status_code

    def deny() -> None:
        with owner.rest() as rest:
            go.wait()
            reply = rest.post(f"/api/approvals/{approval_id}", json={"decision": "deny"})
            answers["deny"] = reply.status_code

    threads = [threading.Thread(target=withdraw), threading.Thread(target=deny)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return answers


def test_a_withdrawal_racing_the_owners_answer_lets_exactly_one_win(owner):
    for _ in range(3):
        call_id = pending_call(owner)
        answers = race(owner, call_id, owner.approval_of(call_id)["id"])
        assert sorted(answers.values()) == [200, 409], answers
        status = owner.approval_of(call_id)["status"]
        assert status == ("withdrawn" if answers["withdraw"] == 200 else "denied")
    assert owner.runs() == []


# -- guessed chats ------------------------------------------------------------------------------


def asked_over_mcp(owner: Owner, mode: str, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """The approval card of a change call made over /mcp, returned pending at once (the
    gateway's wait is cut short by the test)."""

    async def scenario(client: Client) -> Any:
        return await client.call_tool("run_skill_script", run_arguments("tidier"), meta=meta)

    result = using(mcp_client(owner.running, owner.agent, name="Cursor", mode=mode), scenario)
    assert result.structured_content["status"] == "pending_approval", result.content
    with owner.rest() as rest:
        return dict(rest.get(f"/api/approvals/{result.structured_content['approval_id']}").json())


def test_a_chat_skillfleet_guessed_is_never_offered_approve_for_this_chat(owner):
    gateway = owner.running.server.tier.mcp.gateway
    was = gateway.approval_wait
    gateway.approval_wait = 0.2  # the call returns pending at once; the approval stays
    try:
        card = asked_over_mcp(owner, "auto")
    finally:
        gateway.approval_wait = was
    assert card["status"] == "pending" and card["chat_guessed"] is True
    assert card["grant_scope"] is None and card["offers_chat_grant"] is False
    assert "guess" in card["grant_note"]
    with owner.rest() as rest:
        refused = rest.post(f"/api/approvals/{card['id']}", json={"decision": "approve_for_chat"})
        assert refused.status_code == 400 and refused.json()["code"] == "grant_not_offered"
        assert "guess" in refused.json()["message"]
        assert rest.get(f"/api/approvals/{card['id']}").json()["status"] == "pending"


@pytest.mark.parametrize(
    ("mode", "meta"), [("legacy", None), ("auto", {"skillfleet/chat_id": "support-42"})]
)
def test_a_chat_the_host_named_is_offered_approve_for_this_chat(owner, mode, meta):
    gateway = owner.running.server.tier.mcp.gateway
    was = gateway.approval_wait
    gateway.approval_wait = 0.2
    try:
        card = asked_over_mcp(owner, mode, meta)
    finally:
        gateway.approval_wait = was
    assert card["chat_guessed"] is False and card["grant_note"] is None
    assert card["grant_scope"] == "chat" and card["offers_chat_grant"] is True


def test_approving_for_a_guessed_chat_before_never_lets_another_conversation_through(owner):
    # Two conversations of one client without sessions share the guessed chat: a grant made
    # in it (as an older release allowed) does not let the second conversation's call run.
    gateway = owner.running.server.tier.mcp.gateway
    was = gateway.approval_wait
    gateway.approval_wait = 0.2
    try:
        first = asked_over_mcp(owner, "auto")
        with transaction(owner.running.services.sessions) as session:
            approval = session.get(Approval, first["id"])
            assert approval is not None and approval.grant_key and approval.chat_id
            chat = str(approval.chat_id)
            add_grant(session, approval.owner_id, CHAT, chat, approval.grant_key, approval.chat_id)
        second = asked_over_mcp(owner, "auto")
    finally:
        gateway.approval_wait = was
    assert second["id"] != first["id"] and second["status"] == "pending"


# -- what each host library sends (docs/mcp.md, "What each host sends") ----------------------


def guessed_by_each_library(owner: Owner) -> dict[str, bool]:
    """Whether skillfleet had to guess the chat of a change call made by each client library
    installed here, used as its documentation shows (no `_meta` of skillfleet's)."""
    found: dict[str, bool] = {}
    url = f"{owner.running.url}/mcp"

    async def call(client: Any) -> Any:
        return await client.call_tool("run_skill_script", run_arguments("tidier"))

    for mode in ("auto", "legacy"):
        result = using(mcp_client(owner.running, owner.agent, mode=mode), call)
        found[f"mcp {mode}"] = owner.approval_of(result.structured_content["call_id"])[
            "chat_guessed"
        ]
    result = using(fastmcp.Client(url, auth=owner.agent), call)
    found["fastmcp"] = owner.approval_of(result.structured_content["call_id"])["chat_guessed"]

    def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("run_skill_script", run_arguments("tidier"))])
        return ModelResponse(parts=[TextPart("asked")])

    toolset = MCPToolset(url, headers={"Authorization": f"Bearer {owner.agent}"})
    asyncio.run(Agent(FunctionModel(scripted), toolsets=[toolset]).run("Tidy."))
    with owner.rest() as rest:
        newest = rest.get("/api/calls", params={"tool": "run_skill_script"}).json()[0]
    found["pydantic-ai"] = owner.approval_of(newest["call_id"])["chat_guessed"]
    return found


def test_what_each_host_library_sends_decides_whether_the_chat_is_guessed(owner):
    gateway = owner.running.server.tier.mcp.gateway
    was = gateway.approval_wait
    gateway.approval_wait = 0.2
    try:
        found = guessed_by_each_library(owner)
    finally:
        gateway.approval_wait = was
    # 2026-07-28 clients (the default of each) have no session: their chat is a guess.
    assert found == {"mcp auto": True, "mcp legacy": False, "fastmcp": True, "pydantic-ai": True}

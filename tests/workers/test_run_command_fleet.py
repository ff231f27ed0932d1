"""run_command end to end: the agent asks, the owner approves the exact command on the exact
node, and a real node worker runs it as a run (stream, cancel, timeout) without a shell unless
the owner's settings allow one. Calls that could not run are refused before anyone is asked."""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import TLS
from fleet import Fleet, fleet, sqlite_settings

from store.db import transaction
from store.limits import MAX_COMMAND_BYTES
from store.tokens import Role, create_token

pytestmark = pytest.mark.fleet
# A root node worker gives each run a uid of its own; as another user the fleet runs scripts as
# the worker's user (tests/fleet.py).
AS_ROOT = os.geteuid() == 0

NODE = f"cmd-{uuid.uuid4().hex[:8]}"
OFFLINE = f"cmd-off-{uuid.uuid4().hex[:6]}"  # registered, no worker
WAIT = 30


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    """One fleet and one node worker for the module; each test is an owner of its own."""
    folder = tmp_path_factory.mktemp("commands")
    with fleet(sqlite_settings(folder, sqlite_template, run_timeout=20)) as started:
        started.start_node(NODE)
        started.node_env(OFFLINE)  # registered for the fleet's owners, no worker
        yield started


@dataclass
class Owner:
    """An owner of the shared fleet with an owner token and an agent token."""

    fleet: Fleet
    agent_token: str

    def owner(self) -> httpx.Client:
        return self.fleet.http()

    def agent(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.agent_token}"}
        return httpx.Client(verify=TLS, base_url=self.fleet.url, headers=headers, timeout=60)


def new_owner(shared: Fleet) -> Owner:
    name = f"owner-{uuid.uuid4().hex[:6]}"
    with transaction(shared.services.sessions) as session:
        owner = create_token(session, name, Role.OWNER)
        agent = create_token(session, name, Role.AGENT)
    shared.share_nodes_with(name)
    return Owner(replace(shared, owner_token=owner), agent)


@pytest.fixture
def me(shared: Fleet) -> Owner:
    return new_owner(shared)


def call(client: httpx.Client, arguments: Any, wait: float = 0) -> dict[str, Any]:
    body = {"arguments": arguments, "chat_id": "ops"}
    response = client.post("/api/tools/run_command", params={"wait": wait}, json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def asked(me: Owner, command: str, **extra: Any) -> dict[str, Any]:
    with me.agent() as agent:
        envelope = call(agent, {"node": NODE, "command": command, **extra})
    assert envelope["status"] == "pending_approval", envelope
    return envelope


def answer(me: Owner, envelope: dict[str, Any], decision: str) -> httpx.Response:
    with me.owner() as owner:
        return owner.post(f"/api/approvals/{envelope['approval_id']}", json={"decision": decision})


def approved(me: Owner, command: str, **extra: Any) -> dict[str, Any]:
    """The call once the owner approved it: running, with its run."""
    envelope = asked(me, command, **extra)
    response = answer(me, envelope, "approve")
    assert response.status_code == 200, response.text
    with me.agent() as agent:
        found = agent.get(f"/api/calls/{envelope['call_id']}").json()
    assert found["run_id"], found
    return dict(found)


def ended(me: Owner, call_id: str) -> dict[str, Any]:
    with me.agent() as agent:
        return dict(agent.get(f"/api/calls/{call_id}", params={"wait": WAIT}).json())


def events_until(
    client: httpx.Client, run_id: str, stop: Any, on_event: Any = None
) -> list[tuple[str, dict[str, Any]]]:
    """The run's SSE events up to the one `stop(kind, data)` accepts (or the exit)."""
    seen: list[tuple[str, dict[str, Any]]] = []
    with client.stream("GET", f"/api/runs/{run_id}/events") as response:
        assert response.status_code == 200
        kind = ""
        for line in response.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                seen.append((kind, data))
                if on_event is not None:
                    on_event(kind, data)
                if stop(kind, data) or kind == "exit":
                    break
    return seen


def printed(text: str) -> Any:
    return lambda kind, data: kind == "stdout" and text in str(data.get("text", ""))


def test_run_command_asks_and_once_approved_runs_on_the_node_with_output_streamed(
    me: Owner, scratch: Path
):
    go = scratch / "go"
    command = f"sh -c 'echo first; while [ ! -e {go} ]; do sleep 0.05; done; echo second'"
    envelope = asked(me, command)
    with me.owner() as owner:
        approval = owner.get(f"/api/approvals/{envelope['approval_id']}").json()
    assert approval["arguments"] == {"node": NODE, "command": command, "shell": False}
    assert approval["node"] == NODE and approval["tier"] == "destructive"
    who = "a user of its own" if AS_ROOT else "the node worker's user"
    assert f"as {who} on {NODE}" in approval["warning"]
    assert "without a shell: sh -c" in approval["warning"]
    assert approval["offers_chat_grant"] is False  # destructive: never for a whole chat
    with me.agent() as agent:  # the agent may call the tool but never answer for the owner
        refused = agent.post(
            f"/api/approvals/{envelope['approval_id']}", json={"decision": "approve"}
        )
    assert (refused.status_code, refused.json()["code"]) == (403, "owner_only")
    assert answer(me, envelope, "approve").status_code == 200
    with me.agent() as agent:
        run_id = agent.get(f"/api/calls/{envelope['call_id']}").json()["run_id"]
        statuses = []

        def on_first(kind: str, data: dict[str, Any]) -> None:
            if printed("first")(kind, data):  # the line is here while the command still runs
                statuses.append(agent.get(f"/api/runs/{run_id}").json()["status"])
                go.touch()

        events = events_until(agent, run_id, lambda kind, data: False, on_first)
        run = agent.get(f"/api/runs/{run_id}").json()
    assert statuses == ["running"]
    assert events[-1][0] == "exit"
    done = ended(me, envelope["call_id"])
    assert done["status"] == "done", done
    assert done["result"]["exit_code"] == 0
    assert done["result"]["stdout"] == "first\nsecond\n"
    assert done["result"]["node"] == NODE
    assert done["result"]["isolation"] == ("uid" if AS_ROOT else "process")
    assert run["command"] == ["sh", "-c", command.split(" ", 2)[2][1:-1]]
    assert (run["queue"], run["skill_name"], run["status"]) == (f"node.{NODE}", None, "succeeded")


def test_a_denied_command_never_runs(me: Owner, scratch: Path):
    marker = scratch / "ran"
    envelope = asked(me, f"touch {marker}")
    assert answer(me, envelope, "deny").status_code == 200
    found = ended(me, envelope["call_id"])
    assert (found["status"], found["run_id"]) == ("denied", None)
    assert not marker.exists()


def test_a_cancelled_command_ends_cancelled(me: Owner):
    found = approved(me, "sh -c 'echo started; exec sleep 60'")
    with me.agent() as agent:
        events_until(agent, found["run_id"], printed("started"))
        response = agent.post(f"/api/runs/{found['run_id']}/cancel")
        assert response.status_code == 202, response.text
    done = ended(me, found["call_id"])
    assert (done["status"], done["error_code"]) == ("failed", "cancelled"), done
    assert done["result"]["stdout"] == "started\n"


def test_a_command_past_its_timeout_ends_timed_out(me: Owner):
    found = approved(me, "sleep 30", timeout=1)
    done = ended(me, found["call_id"])
    assert (done["status"], done["error_code"]) == ("failed", "timed_out"), done
    with me.agent() as agent:
        run = agent.get(f"/api/runs/{found['run_id']}").json()
    assert (run["status"], run["timeout_seconds"]) == ("timed_out", 1)


def test_without_the_shell_setting_the_command_is_argv_and_with_it_a_pipe_works(me: Owner):
    plain = approved(me, "echo $HOME; ls | wc")
    assert ended(me, plain["call_id"])["result"]["stdout"] == "$HOME; ls | wc\n"
    with me.owner() as owner:
        response = owner.put("/api/settings", json={"auto_tools": [], "run_command_shell": True})
        assert response.json()["run_command_shell"] is True
        assert owner.get("/api/settings").json()["run_command_shell"] is True
    envelope = asked(me, "echo hello | tr a-z A-Z")
    with me.owner() as owner:
        approval = owner.get(f"/api/approvals/{envelope['approval_id']}").json()
    assert approval["arguments"]["shell"] is True
    assert "through /bin/sh: /bin/sh -c 'echo hello | tr a-z A-Z'" in approval["warning"]
    assert answer(me, envelope, "approve").status_code == 200
    assert ended(me, envelope["call_id"])["result"]["stdout"] == "HELLO\n"


def test_an_approval_runs_what_it_showed_even_if_the_shell_setting_changed(me: Owner):
    envelope = asked(me, "echo a | cat")
    with me.owner() as owner:
        owner.put("/api/settings", json={"auto_tools": [], "run_command_shell": True})
    assert answer(me, envelope, "approve").status_code == 200
    found = ended(me, envelope["call_id"])
    assert (found["status"], found["error_code"]) == ("failed", "invalid_call"), found
    assert found["run_id"] is None


REFUSED = [
    ({"node": NODE, "command": "echo 'unbalanced"}, "invalid_call", "can't be split"),
    ({"node": NODE, "command": "   "}, "invalid_call", "'command'"),
    ({"node": NODE, "command": "echo a\0b"}, "invalid_call", "NUL"),
    ({"node": NODE, "command": "x" * (MAX_COMMAND_BYTES + 1)}, "invalid_call", "bytes"),
    ({"node": NODE, "command": 5}, "invalid_call", "'command'"),
    ({"node": NODE, "command": "true", "timeout": 0}, "invalid_call", "'timeout'"),
    ({"node": NODE, "command": "true", "timeout": "5"}, "invalid_call", "'timeout'"),
    ({"node": NODE, "command": "true", "timeout": True}, "invalid_call", "'timeout'"),
    ({"node": NODE, "command": "true", "shell": True}, "invalid_call", "owner's setting"),
    ({"node": NODE, "command": "true", "cwd": "/"}, "invalid_call", "not ['cwd']"),
    ({"command": "true"}, "invalid_call", "'node'"),
    ({"node": "../etc", "command": "true"}, "invalid_call", "'node'"),
    ({"node": "n\0de", "command": "true"}, "invalid_call", "'node'"),
    ({"node": "a" * 300, "command": "true"}, "invalid_call", "'node'"),
    ({"node": "no-such-node-here", "command": "true"}, "node_not_found", "; your nodes: "),
    ({"node": OFFLINE, "command": "true"}, "node_offline", "not running a worker"),
]


def test_calls_that_could_not_run_are_refused_without_asking_the_owner(me: Owner):
    with me.agent() as agent:
        for arguments, code, words in REFUSED:
            envelope = call(agent, arguments)
            assert envelope["status"] == "failed", (arguments, envelope)
            assert envelope["error"]["code"] == code, (arguments, envelope)
            assert words in envelope["error"]["message"], (arguments, envelope)
            assert envelope.get("approval_id") is None
        shape = agent.post("/api/tools/run_command", json={"arguments": ["echo"], "chat_id": "x"})
        assert (shape.status_code, shape.json()["code"]) == (400, "invalid_call")
        big = agent.post(
            "/api/tools/run_command",
            content=b'{"arguments": {"command": "' + b"x" * (6 * 1024 * 1024) + b'"}}',
            headers={"Content-Type": "application/json"},
        )
        assert big.status_code == 413
    with me.owner() as owner:
        assert owner.get("/api/approvals", params={"status": "pending"}).json() == []


def test_another_owner_cannot_see_answer_or_cancel_the_command(me: Owner, shared: Fleet):
    found = approved(me, "sleep 30", timeout=20)
    other = new_owner(shared)
    try:
        with other.owner() as owner:
            assert owner.get(f"/api/runs/{found['run_id']}").status_code == 404
            assert owner.post(f"/api/runs/{found['run_id']}/cancel").status_code == 404
            assert owner.get(f"/api/calls/{found['call_id']}").status_code == 404
        envelope = asked(me, "true")
        with other.owner() as owner:
            response = owner.post(
                f"/api/approvals/{envelope['approval_id']}", json={"decision": "approve"}
            )
        assert response.status_code == 404
    finally:
        with me.agent() as agent:
            agent.post(f"/api/runs/{found['run_id']}/cancel")


def test_fifty_calls_at_once_are_fifty_approvals_and_run_nothing(me: Owner):
    lock = threading.Lock()
    ids: list[str] = []

    def one(number: int) -> None:
        with me.agent() as agent:
            envelope = call(agent, {"node": NODE, "command": f"echo {number}"})
        with lock:
            ids.append(envelope["approval_id"])

    with ThreadPoolExecutor(max_workers=10) as pool:
        list(pool.map(one, range(50)))
    with me.owner() as owner:
        pending = owner.get("/api/approvals", params={"status": "pending", "page_size": 100}).json()
    assert sorted(a["id"] for a in pending) == sorted(ids) and len(set(ids)) == 50
    commands = {a["arguments"]["command"] for a in pending}
    assert commands == {f"echo {n}" for n in range(50)}


def test_list_nodes_shows_the_live_node_and_the_registered_one_without_a_worker(me: Owner):
    with me.agent() as agent:
        response = agent.post("/api/tools/list_nodes", json={"arguments": {}, "chat_id": "ops"})
    envelope = response.json()
    assert envelope["status"] == "done", envelope
    nodes = {node["name"]: node for node in envelope["result"]["nodes"]}
    live, offline = nodes[NODE], nodes[OFFLINE]
    assert (live["health"], live["alive"], live["registered"]) == ("alive", True, True)
    assert live["queues"] == [f"node.{NODE}"] and "skills" in live["features"]
    assert live["last_heartbeat"] is not None
    assert (offline["health"], offline["last_heartbeat"], offline["workers"]) == ("down", None, [])
    assert "token" not in json.dumps(envelope).lower()

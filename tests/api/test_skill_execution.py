"""Where a skill runs is its owner's choice: `PUT /api/skills/<name>/execution`, over HTTP
against a served API with a real node worker; a skill that declares none runs on the Spark
while a Spark worker serves, else on the node a call names; a call's `node` may name the
Spark or the sandbox; refusals name the caller's own live nodes."""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import TLS
from factories import skill_files, zip_bytes
from fleet import Fleet, fleet, sqlite_settings
from mcpclients import new_tokens
from sqlalchemy import select

from relay import heartbeat, naming
from store.models import Skill

pytestmark = pytest.mark.fleet

NODE = "exec-node"
SCRIPT = "scripts/hello.py"
HELLO = b"print('hello from a node')\n"
NO_SANDBOX = (
    "No sandbox worker is running, so sandbox skills can't run: start `skillfleet worker "
    "sandbox` on an x86_64 host with KVM, or on a host with Docker with "
    "SKILLFLEET_SANDBOX_ISOLATION=container (hardened containers instead of micro-VMs)."
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    with fleet(sqlite_settings(tmp_path_factory.mktemp("exec"), sqlite_template)) as running:
        running.start_node(NODE)
        yield running


class Owner:
    """A fresh owner of the served fleet (offered its node), with an agent token."""

    def __init__(self, running: Fleet) -> None:
        self.running = running
        self.token, self.agent = new_tokens(running)

    def http(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token or self.token}"}
        return httpx.Client(verify=TLS, base_url=self.running.url, headers=headers, timeout=60)

    def import_skill(self, name: str, query: dict[str, str] | None = None, **metadata: str) -> Any:
        files = skill_files(name, metadata=metadata) if metadata else skill_files(name)
        files[SCRIPT] = HELLO
        upload = {"file": ("s.zip", io.BytesIO(zip_bytes(files, top=name)))}
        with self.http() as client:
            answer = client.post("/api/skills", params=query or {}, files=upload)
        assert answer.status_code == 201, answer.text
        return answer.json()

    def choose(self, name: str, body: Any, token: str | None = None) -> httpx.Response:
        with self.http(token) as client:
            return client.put(f"/api/skills/{name}/execution", json=body)

    def skill(self, name: str) -> Any:
        with self.http() as client:
            return client.get(f"/api/skills/{name}").json()

    def run(self, name: str, arguments: dict[str, Any], wait: int = 0) -> Any:
        body = {"arguments": {"skill_name": name, "script": SCRIPT, "arguments": arguments}}
        with self.http(self.agent) as client:
            answer = client.post(
                "/api/tools/run_skill_script", params={"wait": wait}, json=body, timeout=90
            )
        assert answer.status_code == 200, answer.text
        return answer.json()


@pytest.fixture
def owner(served: Fleet) -> Owner:
    return Owner(served)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@contextmanager
def spark_serving(running: Fleet) -> Iterator[None]:
    """A Spark worker's heartbeat, as a Spark worker beats while it serves (none runs here:
    the calls below wait for the owner's answer, so nothing is sent to it)."""
    instance = heartbeat.Instance(role="spark", queue=naming.SPARK, name="spark")
    heartbeat.beat(running.redis, instance, alive_seconds=30)
    try:
        yield
    finally:
        heartbeat.stop(running.redis, instance)


def stored(running: Fleet) -> list[tuple[Any, ...]]:
    """Every skill row as the database holds it, and every file of the skill store."""
    with running.services.sessions() as session:
        rows = [
            (s.owner_id, s.name, s.hash, s.execution, s.execution_choice, s.revision)
            for s in session.scalars(select(Skill).order_by(Skill.id))
        ]
    files = sorted(str(p) for p in running.settings.skills_dir.rglob("*") if p.name != ".lock")
    return [*rows, *files]


# --- The owner's choice --------------------------------------------------------------------


def test_the_owner_chooses_where_a_skill_runs_and_its_hash_stays(owner):
    name = unique("pdf")
    imported = owner.import_skill(name, **{"skillfleet.execution": "node"})
    assert owner.skill(name)["execution"] == "node"

    chosen = owner.choose(name, {"execution": "spark"})

    assert chosen.status_code == 200, chosen.text
    assert (chosen.json()["execution"], chosen.json()["execution_choice"]) == ("spark", "spark")
    detail = owner.skill(name)
    assert detail["hash"] == imported["hash"] and detail["revision"] == 1
    assert detail["execution"] == "spark"
    with owner.http(owner.agent) as client:
        listed = client.post("/api/tools/list_skills", json={"arguments": {}}).json()
        loaded = client.post("/api/tools/load_skill", json={"arguments": {"skill_name": name}})
    entry = next(s for s in listed["result"]["skills"] if s["name"] == name)
    assert entry["execution"] == "spark"
    assert loaded.json()["result"]["scripts"] == [
        {"path": SCRIPT, "input": "arguments", "schema": {"type": "object"}}
    ]
    back = owner.choose(name, {"execution": None})
    assert (back.json()["execution"], back.json()["execution_choice"]) == ("node", None)


def test_a_skill_that_declares_none_runs_on_auto_and_an_import_may_choose(owner):
    free = unique("free")
    assert owner.import_skill(free)["name"] == free
    assert owner.skill(free)["execution"] == "auto"
    chosen = unique("chosen")
    owner.import_skill(chosen, {"execution": "sandbox"}, **{"skillfleet.execution": "node"})
    assert (owner.skill(chosen)["execution"], owner.skill(chosen)["execution_choice"]) == (
        "sandbox",
        "sandbox",
    )
    # A new version keeps the owner's choice.
    owner.import_skill(chosen, {"replace": "true"}, **{"skillfleet.tier": "read"})
    assert owner.skill(chosen)["execution"] == "sandbox"


BAD_BODIES = [
    {"execution": "gpu"},
    {"execution": "auto"},
    {"execution": 5},
    {"execution": ["spark"]},
    {},
    {"execution": "spark", "also": 1},
    ["spark"],
    "spark",
]


@pytest.mark.parametrize("body", BAD_BODIES)
def test_a_body_of_the_wrong_shape_is_422_and_writes_nothing(served, owner, body):
    name = unique("shape")
    owner.import_skill(name)
    before = stored(served)

    answer = owner.choose(name, body)

    assert answer.status_code == 422, answer.text
    assert answer.json()["code"] == "invalid_request"
    assert stored(served) == before


def test_a_body_that_is_not_json_is_400_and_writes_nothing(served, owner):
    name = unique("text")
    owner.import_skill(name)
    before = stored(served)
    with owner.http() as client:
        answer = client.put(
            f"/api/skills/{name}/execution",
            content=b'{"execution": "spark"',
            headers={"Content-Type": "application/json"},
        )
    assert (answer.status_code, answer.json()["code"]) == (400, "invalid_json")
    assert stored(served) == before


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("../x", 404, "not_found"),
        ("%2E%2E%2Fx", 404, "not_found"),
        ("a%00b", 404, "skill_not_found"),
        ("n" * 300, 404, "skill_not_found"),
        ("Not-A-Name", 404, "skill_not_found"),
        ("skill-authoring", 403, "skill_builtin"),
    ],
)
def test_a_name_that_is_no_skill_of_the_owner_is_refused_and_writes_nothing(
    served, owner, path, status, code
):
    before = stored(served)
    with owner.http() as client:
        answer = client.put(f"/api/skills/{path}/execution", json={"execution": "spark"})
    assert (answer.status_code, answer.json()["code"]) == (status, code), answer.text
    assert stored(served) == before


def test_an_agent_or_another_owner_cannot_choose_and_nothing_is_written(served, owner):
    name = unique("mine")
    owner.import_skill(name)
    other = Owner(served)
    before = stored(served)

    agent = owner.choose(name, {"execution": "spark"}, token=owner.agent)
    stranger = other.choose(name, {"execution": "spark"})

    assert (agent.status_code, agent.json()["code"]) == (403, "owner_only")
    assert (stranger.status_code, stranger.json()["code"]) == (404, "skill_not_found")
    assert stored(served) == before


def test_fifty_choices_at_once_all_answer_and_the_last_one_holds(served, owner):
    name = unique("busy")
    imported = owner.import_skill(name)
    choices = ["node", "spark", "sandbox", None, "spark"] * 10

    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(lambda c: owner.choose(name, {"execution": c}), choices))

    assert {a.status_code for a in answers} == {200}
    detail = owner.skill(name)
    assert detail["hash"] == imported["hash"]
    assert detail["execution_choice"] in ("node", "spark", "sandbox", None)
    assert detail["execution"] == (detail["execution_choice"] or "auto")
    rows = [row for row in stored(served) if isinstance(row, tuple) and row[1] == name]
    assert len(rows) == 1


# --- Where a call runs ---------------------------------------------------------------------


def test_a_skill_that_declares_none_runs_on_the_node_a_call_names(owner):
    name = unique("either")
    owner.import_skill(name, **{"skillfleet.tier": "read"})

    answer = owner.run(name, {"node": NODE}, wait=60)

    assert answer["status"] == "done", answer
    assert answer["result"]["exit_code"] == 0
    assert answer["result"]["stdout"] == "hello from a node\n"
    assert answer["result"]["node"] == NODE


def test_with_no_spark_worker_a_call_naming_no_node_is_told_the_owner_s_live_nodes(owner):
    name = unique("either")
    owner.import_skill(name, **{"skillfleet.tier": "read"})

    answer = owner.run(name, {})

    assert answer["status"] == "failed"
    assert answer["error"] == {
        "code": "invalid_arguments",
        "message": "HOST: no Spark worker is running, so name the node to run this on in "
        f'arguments.node (or "sandbox" for a micro-VM); your nodes: {NODE}.',
    }


def test_node_spark_and_node_sandbox_name_the_runners_and_say_when_none_serves(owner):
    name = unique("either")
    owner.import_skill(name, **{"skillfleet.tier": "read"})

    spark = owner.run(name, {"node": "spark"})
    sandbox = owner.run(name, {"node": "sandbox"})

    assert spark["error"] == {
        "code": "no_runner",
        "message": "HOST: no Spark worker is running now; name a node to run it on "
        f"(your nodes: {NODE}).",
    }
    assert sandbox["error"] == {"code": "no_runner", "message": NO_SANDBOX}


def test_while_a_spark_worker_serves_a_skill_that_declares_none_goes_to_the_spark(served, owner):
    name = unique("boxed")
    owner.import_skill(name, **{"skillfleet.tier": "change"})

    with spark_serving(served):
        answer = owner.run(name, {"pdf": "form.pdf"})

    assert answer["status"] == "pending_approval", answer
    with owner.http() as client:
        approval = client.get(f"/api/approvals/{answer['approval_id']}").json()
        denied = client.post(f"/api/approvals/{answer['approval_id']}", json={"decision": "deny"})
    assert approval["arguments"]["arguments"] == {"pdf": "form.pdf", "node": "spark"}
    assert "in a throwaway container on the Spark" in approval["warning"]
    assert denied.status_code == 200


def test_an_approval_runs_where_it_said_or_not_at_all(served, owner):
    name = unique("bound")
    owner.import_skill(name, **{"skillfleet.tier": "change"})
    with spark_serving(served):
        asked = owner.run(name, {})
    assert asked["status"] == "pending_approval", asked
    # The owner moves the skill to the nodes, then approves the card that said "the Spark".
    assert owner.choose(name, {"execution": "node"}).status_code == 200

    with owner.http() as client:
        client.post(f"/api/approvals/{asked['approval_id']}", json={"decision": "approve"})
        call = client.get(f"/api/calls/{asked['call_id']}").json()

    assert (call["status"], call["error_code"]) == ("failed", "node_not_found")
    assert call["error_message"].startswith(
        f"HOST: the skill '{name}' runs on nodes only, not on the Spark; your nodes: {NODE}."
    )


def test_a_node_skill_sent_to_the_spark_is_told_its_nodes_and_how_the_owner_moves_it(owner):
    name = unique("nodal")
    owner.import_skill(name, **{"skillfleet.execution": "node", "skillfleet.tier": "read"})

    answer = owner.run(name, {"node": "spark"})
    missing = owner.run(name, {})
    unknown = owner.run(name, {"node": "lucialab01"})

    assert answer["error"] == {
        "code": "node_not_found",
        "message": f"HOST: the skill '{name}' runs on nodes only, not on the Spark; your nodes: "
        f"{NODE}. Its owner may let it run there: skillfleet skills execution {name} spark.",
    }
    assert missing["error"] == {
        "code": "invalid_arguments",
        "message": 'HOST: arguments has no "node" key; add the server to run on, such as '
        f'{{"node": "{NODE}", ...}}; your nodes: {NODE}.',
    }
    assert unknown["error"] == {
        "code": "node_not_found",
        "message": f"HOST: there is no node named 'lucialab01'; your nodes: {NODE}.",
    }


def test_a_spark_skill_refuses_a_node_and_a_sandbox_skill_the_spark(owner):
    on_spark, boxed = unique("spark"), unique("sandbox")
    owner.import_skill(on_spark, **{"skillfleet.execution": "spark", "skillfleet.tier": "read"})
    owner.import_skill(boxed, **{"skillfleet.execution": "sandbox", "skillfleet.tier": "read"})

    node = owner.run(on_spark, {"node": NODE})
    spark = owner.run(boxed, {"node": "spark"})

    assert node["error"] == {
        "code": "node_not_found",
        "message": f"HOST: the skill '{on_spark}' runs on the Spark only, not on '{NODE}'; "
        'leave out node, or send "spark".',
    }
    assert spark["error"]["message"] == (
        f"HOST: the skill '{boxed}' runs on the sandbox only, not on 'spark'; leave out node, "
        'or send "sandbox".'
    )

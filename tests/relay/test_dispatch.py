"""Sending a run to its queue: its rows are committed before its message leaves, a save that
fails sends nothing, and when the queue can't take the message nothing is left open."""

from __future__ import annotations

import base64
import concurrent.futures
import dataclasses
import io
import json
import socket
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from celery.signals import before_task_publish
from conftest import offer_node
from factories import skill_zip
from flask.testing import FlaskClient
from sqlalchemy import select

from api import create_app
from api.services import Services
from broker import runs
from broker.dispatcher import EXECUTE_TASK, NO_SANDBOX, SANDBOX_FIX, UNREACHABLE
from relay import dispatch, heartbeat, naming
from store.db import make_engine, transaction
from store.models import Run, ToolCall, utcnow
from store.settings import Settings
from store.tokens import create_owner_token


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port  # closed again when the probe goes


@pytest.fixture
def live_services(settings: Settings) -> Iterator[Services]:
    """Real dispatch (not dry run) on the real Redis."""
    built = Services.build(dataclasses.replace(settings, dry_run=False))
    yield built
    built.engine.dispose()


@pytest.fixture
def node(redis_client) -> Iterator[str]:
    """A node whose worker looks alive (its heartbeat), though none takes its queue."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    instance = heartbeat.Instance(role="node", queue=naming.node_queue(name), name=name)
    heartbeat.beat(redis_client, instance)
    yield name
    heartbeat.stop(redis_client, instance)
    redis_client.delete(naming.node_queue(name))


def call_run(
    services: Services, node: str, chat: str | None = None, tier: str = "read"
) -> tuple[FlaskClient, dict[str, str], object]:
    client = create_app(services=services).test_client()
    with transaction(services.sessions) as session:
        auth = {"Authorization": f"Bearer {create_owner_token(session, 'alice')}"}
    offer_node(services, node)
    archive = skill_zip("hello", metadata={"skillfleet.tier": tier})
    upload = {"file": (io.BytesIO(archive), "hello.zip")}
    assert client.post("/api/skills", headers=auth, data=upload).status_code == 201
    body = {
        "arguments": {
            "skill_name": "hello",
            "script": "scripts/hello.py",
            "arguments": {"node": node},
        },
        **({"chat_id": chat} if chat is not None else {}),
    }
    return client, auth, client.post("/api/tools/run_skill_script", headers=auth, json=body)


def assert_failed_and_closed(client: FlaskClient, auth: dict[str, str], answer) -> None:
    assert answer.status_code == 503, answer.json
    assert answer.json["code"] == "service_unavailable"
    [call] = client.get("/api/calls", headers=auth).json
    assert call["status"] == "failed"
    assert (call["error_code"], call["error_message"]) == ("service_unavailable", UNREACHABLE)
    [run] = client.get("/api/runs", headers=auth).json
    assert run["run_id"] == call["run_id"] and run["status"] == "failed"


def test_a_run_the_queue_refuses_ends_failed_with_its_call_never_left_running(
    live_services: Services, node: str, redis_client
):
    # The queue's key holds a string, so Redis refuses to push onto it (WRONGTYPE).
    redis_client.set(naming.node_queue(node), "not a list")
    client, auth, answer = call_run(live_services, node)
    assert_failed_and_closed(client, auth, answer)
    assert redis_client.get(naming.node_queue(node)) == b"not a list"


def test_with_task_events_on_a_run_the_queue_refuses_ends_the_same_way(
    live_services: Services, node: str, redis_client
):
    # The "sent" event for Flower goes first in the same round trip; the push's refusal counts.
    live_services.celery.conf.task_send_sent_event = True
    redis_client.set(naming.node_queue(node), "not a list")
    client, auth, answer = call_run(live_services, node)
    assert_failed_and_closed(client, auth, answer)


def test_with_task_events_on_the_sent_event_names_the_run_and_its_message(
    live_services: Services, node: str, redis_client
):
    live_services.celery.conf.task_send_sent_event = True
    exchange = live_services.celery.conf.event_exchange
    db = redis_client.connection_pool.connection_kwargs.get("db", 0)
    pubsub = redis_client.pubsub()
    pubsub.psubscribe(f"/{db}.{exchange}/task.sent")
    try:
        pubsub.get_message(timeout=1)  # the subscription's confirmation
        client, auth, answer = call_run(live_services, node)
        assert answer.status_code == 200, answer.json
        published = pubsub.get_message(timeout=5)
    finally:
        pubsub.close()
    assert published is not None and published["type"] == "pmessage"
    event = json.loads(base64.b64decode(json.loads(published["data"])["body"]))
    [raw] = redis_client.lrange(naming.node_queue(node), 0, -1)
    message = json.loads(raw)["headers"]
    run_id = answer.json["run_id"]
    assert event["type"] == "task-sent" and event["uuid"] == message["id"]
    assert event["name"] == message["shadow"] == f"run {run_id} on {naming.node_queue(node)}"
    assert event["args"] == message["argsrepr"] == repr([run_id])


def queued_run_ids(redis_client, node: str) -> list[str]:
    """The run id each message in the node's queue carries."""
    raws = redis_client.lrange(naming.node_queue(node), 0, -1)
    return [json.loads(base64.b64decode(json.loads(raw)["body"]))[0][0] for raw in raws]


def test_a_sent_run_is_saved_queued_and_its_message_carries_its_id(
    live_services: Services, node: str, redis_client
):
    client, auth, answer = call_run(live_services, node)
    assert answer.status_code == 200, answer.json
    assert queued_run_ids(redis_client, node) == [answer.json["run_id"]]
    [run] = client.get("/api/runs", headers=auth).json
    assert run["run_id"] == answer.json["run_id"] and run["status"] == "queued"


@pytest.mark.both_databases
@pytest.mark.parametrize("tier", ["read", "destructive"])  # run at once, or once approved
def test_a_run_is_saved_in_its_calls_chat_and_listed_by_it(
    live_services: Services, node: str, redis_client, tier: str
):
    client, auth, answer = call_run(live_services, node, chat="ops", tier=tier)
    assert answer.status_code == 200, answer.json
    if tier == "destructive":
        approval_id = answer.json["approval_id"]
        decision = {"decision": "approve"}
        answered = client.post(f"/api/approvals/{approval_id}", headers=auth, json=decision)
        assert answered.status_code == 200, answered.json
    with transaction(live_services.sessions) as session:
        call = session.scalars(select(ToolCall)).one()
        assert call.run_id is not None and call.chat_id is not None
        run = session.get(Run, call.run_id)
        assert run is not None and run.chat_id == call.chat_id
    listed = client.get("/api/runs?chat=ops", headers=auth)
    assert [r["run_id"] for r in listed.json] == [call.run_id]
    assert client.get("/api/runs?chat=other", headers=auth).json == []


@pytest.fixture
def published() -> Iterator[list[dict[str, object]]]:
    """What each task message carried as it left, seen by Celery's `before_task_publish`."""
    seen: list[dict[str, object]] = []

    def note(body: object = None, headers: object = None, **_: object) -> None:
        seen.append({"body": body, "headers": headers})

    before_task_publish.connect(note, weak=False)
    yield seen
    before_task_publish.disconnect(note)


@pytest.mark.both_databases
def test_the_run_and_its_call_are_committed_before_the_message_leaves(
    live_services: Services, node: str, redis_client
):
    # Another process's view: a connection of an engine of its own, as a worker has.
    other = make_engine(live_services.settings.database)
    seen: list[tuple[object, object]] = []

    def look(body: object = None, **_: object) -> None:
        [run_id] = body[0]  # type: ignore[index]
        with other.connect() as connection:
            run = connection.execute(
                select(Run.status, Run.call_id).where(Run.id == run_id)
            ).first()
            call = run and connection.scalar(
                select(ToolCall.status).where(ToolCall.id == run.call_id)
            )
        seen.append((run and run.status, call))

    before_task_publish.connect(look, weak=False)
    try:
        client, auth, answer = call_run(live_services, node)
    finally:
        before_task_publish.disconnect(look)
        other.dispose()
    assert answer.status_code == 200, answer.json
    assert seen == [("queued", "running")]
    assert queued_run_ids(redis_client, node) == [answer.json["run_id"]]


# A trigger that refuses every new run, and what takes it away, on each database.
REFUSE_RUNS = {
    "sqlite": (
        ["CREATE TRIGGER refuse_runs BEFORE INSERT ON runs "
         "BEGIN SELECT RAISE(ABORT, 'no room for runs'); END"],
        ["DROP TRIGGER refuse_runs"],
    ),
    "postgresql": (
        ["CREATE FUNCTION refuse_runs() RETURNS trigger LANGUAGE plpgsql "
         "AS $$ BEGIN RAISE EXCEPTION 'no room for runs'; END $$",
         "CREATE TRIGGER refuse_runs BEFORE INSERT ON runs "
         "FOR EACH ROW EXECUTE FUNCTION refuse_runs()"],
        ["DROP TRIGGER refuse_runs ON runs", "DROP FUNCTION refuse_runs()"],
    ),
}  # fmt: skip


@pytest.fixture
def runs_refused(live_services: Services) -> Iterator[None]:
    """The database refuses every new run, as a full disk or a lost connection would, until
    the test ends (the next tests share a PostgreSQL database)."""
    engine = live_services.engine
    refuse, allow = REFUSE_RUNS[engine.dialect.name]
    with engine.begin() as connection:
        for statement in refuse:
            connection.exec_driver_sql(statement)
    yield
    with engine.begin() as connection:
        for statement in allow:
            connection.exec_driver_sql(statement)


@pytest.mark.usefixtures("runs_refused")
def test_a_save_that_fails_sends_nothing(
    live_services: Services, node: str, redis_client, published: list[dict[str, object]]
):
    client, auth, answer = call_run(live_services, node)
    assert answer.status_code >= 500, answer.json
    assert published == []
    assert redis_client.llen(naming.node_queue(node)) == 0
    assert client.get("/api/runs", headers=auth).json == []


@pytest.mark.both_databases
def test_a_run_delivered_twice_is_claimed_once(live_services: Services, node: str):
    client, auth, answer = call_run(live_services, node)
    run_id = answer.json["run_id"]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        claims = [pool.submit(runs.claim, live_services.sessions, run_id, "w", []) for _ in "ab"]
        claimed = [claim.result(timeout=10) for claim in claims]
    [won] = [run for run in claimed if run is not None]
    assert won.id == run_id and won.status == "running"
    assert claimed.count(None) == 1  # the other found it claimed: it never runs twice


def test_a_message_whose_run_is_not_saved_runs_nothing_and_waits_for_nothing(
    live_services: Services,
):
    started = time.monotonic()
    assert runs.claim(live_services.sessions, str(uuid.uuid4()), "w", []) is None
    assert time.monotonic() - started < 0.5  # one read, no polling


def test_a_run_whose_message_never_left_is_sent_once_more_by_the_sweep(
    live_services: Services, node: str, redis_client
):
    # The API committed both runs and stopped before sending either (its process died).
    client, auth, answer = call_run(live_services, node)
    redis_client.delete(naming.node_queue(node))  # as if its message had never left
    stale_id = answer.json["run_id"]
    with transaction(live_services.sessions) as session:
        stale = session.get(Run, stale_id)
        columns = {c.key: getattr(stale, c.key) for c in Run.__table__.columns}
        stale.created_at = utcnow() - timedelta(seconds=runs.RESEND_AFTER_SECONDS + 5)
        fresh_id = str(uuid.uuid4())  # queued a moment ago: its message is on its way
        session.add(Run(**{**columns, "id": fresh_id, "call_id": None, "created_at": utcnow()}))

    def send(run_id: str, queue: str) -> None:
        dispatch.send_run(live_services.celery, EXECUTE_TASK, run_id, queue)

    assert runs.resend_unsent(live_services.sessions, redis_client, send) == [stale_id]
    assert runs.resend_unsent(live_services.sessions, redis_client, send) == []  # once only
    assert queued_run_ids(redis_client, node) == [stale_id]
    claimed = [runs.claim(live_services.sessions, stale_id, "w", []) for _ in "ab"]
    assert claimed[0] is not None and claimed[1] is None  # a second message runs nothing


def call_sandbox_skill(services: Services) -> dict[str, object]:
    client = create_app(services=services).test_client()
    with transaction(services.sessions) as session:
        auth = {"Authorization": f"Bearer {create_owner_token(session, 'alice')}"}
    metadata = {"skillfleet.tier": "read", "skillfleet.execution": "sandbox"}
    upload = {"file": (io.BytesIO(skill_zip("boxed", metadata=metadata)), "boxed.zip")}
    assert client.post("/api/skills", headers=auth, data=upload).status_code == 201
    body = {"arguments": {"skill_name": "boxed", "script": "scripts/hello.py", "arguments": {}}}
    answer: dict[str, object] = client.post(
        "/api/tools/run_skill_script", headers=auth, json=body
    ).json
    return answer


def test_a_sandbox_call_with_no_sandbox_worker_names_the_cause_and_both_fixes(
    live_services: Services,
):
    answer = call_sandbox_skill(live_services)

    assert answer["status"] == "failed"
    assert answer["error"] == {"code": "no_runner", "message": NO_SANDBOX}
    assert NO_SANDBOX == (
        "No sandbox worker is running, so sandbox skills can't run: start `skillfleet worker "
        "sandbox` on an x86_64 host with KVM, or on a host with Docker with "
        "SKILLFLEET_SANDBOX_ISOLATION=container (hardened containers instead of micro-VMs)."
    )


def test_a_sandbox_call_while_a_sandbox_worker_serves_nothing_gives_that_workers_reason(
    live_services: Services, redis_client
):
    reason = "Hyperlight could not run a micro-VM: this server has no nested virtualisation."
    instance = heartbeat.Instance(
        role="sandbox", queue=naming.SANDBOX, name=naming.SANDBOX, host="kvm-1", reason=reason
    )
    heartbeat.beat(redis_client, instance, serving=False)
    try:
        answer = call_sandbox_skill(live_services)
    finally:
        heartbeat.stop(redis_client, instance)

    assert answer["error"] == {
        "code": "no_runner",
        "message": "The sandbox worker on kvm-1 runs but serves nothing, so sandbox skills can't "
        "run: Hyperlight could not run a micro-VM: this server has no nested virtualisation. "
        f"To run them, {SANDBOX_FIX}.",
    }

"""Sending a run to its queue: when the queue can't take it, nothing is left open; a message
that comes before its run is saved waits for it, and one whose run never is runs nothing."""

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

import pytest
from factories import skill_zip
from flask.testing import FlaskClient

from api import create_app
from api.services import Services
from broker import dispatcher, runs
from broker.dispatcher import NO_SANDBOX, SANDBOX_FIX, UNREACHABLE
from relay import heartbeat, naming
from store.db import transaction
from store.models import Run
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


def call_run(services: Services, node: str) -> tuple[FlaskClient, dict[str, str], object]:
    client = create_app(services=services).test_client()
    with transaction(services.sessions) as session:
        auth = {"Authorization": f"Bearer {create_owner_token(session, 'alice')}"}
    archive = skill_zip("hello", metadata={"skillfleet.tier": "read"})
    upload = {"file": (io.BytesIO(archive), "hello.zip")}
    assert client.post("/api/skills", headers=auth, data=upload).status_code == 201
    body = {
        "arguments": {
            "skill_name": "hello",
            "script": "scripts/hello.py",
            "arguments": {"node": node},
        }
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
def test_a_claim_that_comes_before_its_run_is_saved_waits_and_claims_it_once(
    live_services: Services, node: str
):
    client, auth, answer = call_run(live_services, node)
    with live_services.sessions() as session:
        saved = session.get(Run, answer.json["run_id"])
        columns = {c.key: getattr(saved, c.key) for c in Run.__table__.columns}
    early = str(uuid.uuid4())  # the same run under an id not saved yet
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        claims = [pool.submit(runs.claim, live_services.sessions, early, "w", []) for _ in "ab"]
        time.sleep(0.2)  # both have looked, found nothing and wait
        assert not any(claim.done() for claim in claims)
        with transaction(live_services.sessions) as session:
            session.add(Run(**{**columns, "id": early}))
        claimed = [claim.result(timeout=10) for claim in claims]
    [won] = [run for run in claimed if run is not None]
    assert won.id == early and won.status == "running"
    assert claimed.count(None) == 1  # the other found it claimed: it never runs twice


def test_a_message_whose_run_is_never_saved_runs_nothing(
    live_services: Services, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(runs, "RUN_SAVE_WAIT_SECONDS", 0.3)
    started = time.monotonic()
    assert runs.claim(live_services.sessions, str(uuid.uuid4()), "w", []) is None
    assert time.monotonic() - started >= 0.3


def test_a_run_saved_too_late_for_its_worker_is_rolled_back_and_its_message_finds_nothing(
    live_services: Services, node: str, redis_client, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(dispatcher, "RUN_SAVE_SECONDS", -1.0)  # every save is too late
    client, auth, answer = call_run(live_services, node)
    assert answer.status_code == 503, answer.json
    assert answer.json["code"] == "service_unavailable"
    assert client.get("/api/runs", headers=auth).json == []
    [run_id] = queued_run_ids(redis_client, node)
    monkeypatch.setattr(runs, "RUN_SAVE_WAIT_SECONDS", 0.1)
    assert runs.claim(live_services.sessions, run_id, "w", []) is None


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

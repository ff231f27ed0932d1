"""Sending a run to its queue: when the queue can't take it, nothing is left open."""

from __future__ import annotations

import dataclasses
import io
import socket
import uuid
from collections.abc import Iterator

import pytest
from factories import skill_zip
from flask.testing import FlaskClient

from api import create_app
from api.services import Services
from relay import heartbeat, naming
from relay.app import create_celery
from relay.dispatch import UNREACHABLE
from skillfleet.settings import Settings
from store.db import transaction
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


def test_with_task_events_on_celery_sends_the_run_and_a_refusal_ends_it_the_same_way(
    live_services: Services, node: str, settings: Settings
):
    # Flower's "sent" events come from Celery's own send_task; here its broker is not there,
    # while the heartbeats and the owner's feed use the real Redis.
    gone = dataclasses.replace(settings, redis_url=f"redis://127.0.0.1:{closed_port()}/0")
    celery = create_celery(gone, broker_connection_retry=False, task_send_sent_event=True)
    celery.conf.broker_transport_options = {"max_retries": 0}
    live_services.broker.dispatcher.celery = celery  # type: ignore[attr-defined]
    client, auth, answer = call_run(live_services, node)
    assert_failed_and_closed(client, auth, answer)

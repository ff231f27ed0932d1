"""Sending a run to its queue: when the queue can't take it, nothing is left open."""

from __future__ import annotations

import dataclasses
import io
import socket
import uuid
from collections.abc import Iterator

import pytest
from factories import skill_zip

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
def live_services(settings: Settings, redis_client) -> Iterator[Services]:
    """Real dispatch (not dry run) whose Celery broker is a Redis that isn't there, while the
    heartbeats, streams and feed use the real one: the queue is down, the workers look alive."""
    built = Services.build(dataclasses.replace(settings, dry_run=False))
    gone = dataclasses.replace(settings, redis_url=f"redis://127.0.0.1:{closed_port()}/0")
    celery = create_celery(gone, broker_connection_retry=False)
    celery.conf.broker_transport_options = {"max_retries": 0}
    built.broker.dispatcher.celery = celery  # type: ignore[attr-defined]
    yield built
    built.engine.dispose()


def test_a_run_the_queue_refuses_ends_failed_with_its_call_never_left_running(
    live_services: Services, redis_client
):
    node = f"t-{uuid.uuid4().hex[:8]}"
    instance = heartbeat.Instance(role="node", queue=naming.node_queue(node), name=node)
    heartbeat.beat(redis_client, instance)
    app = create_app(services=live_services)
    client = app.test_client()
    with transaction(live_services.sessions) as session:
        auth = {"Authorization": f"Bearer {create_owner_token(session, 'alice')}"}
    archive = skill_zip("hello", metadata={"skillfleet.tier": "read"})
    upload = {"file": (io.BytesIO(archive), "hello.zip")}
    assert client.post("/api/skills", headers=auth, data=upload).status_code == 201
    try:
        body = {
            "arguments": {
                "skill_name": "hello",
                "script": "scripts/hello.py",
                "arguments": {"node": node},
            }
        }
        answer = client.post("/api/tools/run_skill_script", headers=auth, json=body)
    finally:
        heartbeat.stop(redis_client, instance)
    assert answer.status_code == 503, answer.json
    assert answer.json["code"] == "service_unavailable"
    [call] = client.get("/api/calls", headers=auth).json
    assert call["status"] == "failed"
    assert (call["error_code"], call["error_message"]) == ("service_unavailable", UNREACHABLE)
    [run] = client.get("/api/runs", headers=auth).json
    assert run["run_id"] == call["run_id"] and run["status"] == "failed"

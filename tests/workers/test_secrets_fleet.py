"""An owner's secret reaches a skill's script on a real node worker as an environment variable,
and nowhere else: not the run's or call's rows, the envelope, the run's stream, the Celery
messages and task events, the logs, nor the output, which shows [secret:NAME] instead."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import REDIS_URL, TLS
from fleet import Fleet, fleet, sqlite_settings
from sqlalchemy import text

from relay import naming

pytestmark = pytest.mark.fleet

NODE = f"s-{uuid.uuid4().hex[:8]}"
VALUE = f"tok-{uuid.uuid4().hex}"
SECRET_SKILL = {"skillfleet.tier": "read", "skillfleet.secrets": "API_TOKEN"}
# Prints the value whole, and again split across two writes with a pause between them, so the
# two halves reach the worker in separate reads; then what it saw, as length and digest.
SHOW = (
    "import hashlib, os, sys, time\n"
    "value = os.environ['API_TOKEN']\n"
    "print('seen', value, flush=True)\n"
    "sys.stderr.write(value[:9]); sys.stderr.flush(); time.sleep(0.3)\n"
    "sys.stderr.write(value[9:] + '\\n'); sys.stderr.flush()\n"
    "print('len', len(value), 'sha256', hashlib.sha256(value.encode()).hexdigest())\n"
)


class Monitor:
    """Every command the test Redis receives while it runs (MONITOR), Celery's included."""

    def __init__(self, url: str) -> None:
        address = re.match(r"redis://([^:/]+):(\d+)", url)
        assert address is not None
        self.socket = socket.create_connection((address.group(1), int(address.group(2))))
        database = url.rsplit("/", 1)[-1] if url.count("/") > 2 else "0"
        self.socket.sendall(f"SELECT {database}\r\nMONITOR\r\n".encode())
        self.seen = bytearray()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while chunk := self._receive():
            self.seen.extend(chunk)

    def _receive(self) -> bytes:
        try:
            return self.socket.recv(65536)
        except OSError:
            return b""

    def stop(self) -> bytes:
        self.socket.close()
        self.thread.join(5)
        return bytes(self.seen)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    folder = tmp_path_factory.mktemp("secrets")
    settings = sqlite_settings(folder, sqlite_template, run_timeout=20, task_events=True)
    with fleet(settings) as started:
        started.start(
            NODE, "worker", "node", "--name", NODE,
            env=dict(started.node_env(NODE), SKILLFLEET_TASK_EVENTS="true"),
        )  # fmt: skip
        started.wait_for_queue(naming.node_queue(NODE), NODE)
        yield started


def run_call(client: httpx.Client) -> httpx.Response:
    body = {
        "arguments": {
            "skill_name": "shower",
            "script": "scripts/show.py",
            "arguments": {"node": NODE},
        },
        "chat_id": "secrets",
    }
    response = client.post("/api/tools/run_skill_script", params={"wait": 30}, json=body)
    assert response.status_code == 200, response.text
    return response


def decoded_bodies(seen: bytes) -> bytes:
    """The kombu message bodies in what Redis saw, base64-decoded (Celery encodes them)."""
    found = bytearray()
    for body in re.findall(rb'\\"body\\": \\"([A-Za-z0-9+/=]+)\\"', seen):
        found.extend(base64.b64decode(body))
    return bytes(found)


def test_a_script_gets_its_secret_and_the_value_appears_nowhere_else(shared: Fleet):
    owner = shared.with_new_owner()
    owner.import_skill("shower", SECRET_SKILL, {"scripts/show.py": SHOW})
    with owner.http() as client:
        stored = client.put("/api/secrets/API_TOKEN", json={"value": VALUE, "skill": "shower"})
        assert stored.status_code == 200, stored.text
        monitor = Monitor(REDIS_URL)
        try:
            response = run_call(client)
        finally:
            seen = monitor.stop()
        envelope = response.json()
        run_id = envelope["run_id"]
        run_view = client.get(f"/api/runs/{run_id}").text
        call_view = client.get(f"/api/calls/{envelope['call_id']}").text
        trail = client.get("/api/audit", params={"format": "jsonl"}).text

    assert envelope["status"] == "done", envelope
    stdout = envelope["result"]["stdout"]
    digest = hashlib.sha256(VALUE.encode()).hexdigest()
    assert f"len {len(VALUE)} sha256 {digest}" in stdout  # the script saw the right value
    assert "seen [secret:API_TOKEN]" in stdout
    assert envelope["result"]["stderr"] == "[secret:API_TOKEN]\n"  # split across two reads

    bodies = decoded_bodies(seen)
    assert run_id.encode() in seen and b"execute_run" in seen  # the monitor saw the message
    assert b"task-sent" in bodies and b"task-started" in bodies  # and what Flower shows
    places: dict[str, Any] = {
        "envelope": response.text,
        "run view": run_view,
        "call view": call_view,
        "redis traffic": seen,
        "celery bodies": bodies,
        "run stream": repr(shared.redis.xrange(naming.run_stream(run_id))),
        "run end": repr(shared.redis.xrange(naming.run_end(run_id))),
        "rows": repr(rows_of(shared, run_id, envelope["call_id"])),
        "audit trail": trail,
    }
    for path in shared.settings.data_dir.rglob("*.log"):
        places[str(path.name)] = path.read_bytes()
    assert f"{NODE}.log" in places and b"[secret:API_TOKEN]" in places["run stream"].encode()
    leaks = [where for where, seen_there in places.items() if _holds(seen_there, VALUE)]
    assert leaks == []
    # The audit trail has the run's start, the secret's release (its name only) and the end,
    # written by the worker and the API it asked.
    about_run = [json.loads(line) for line in trail.splitlines() if run_id in line]
    assert [r["kind"] for r in about_run] == ["run.started", "secret.released", "run.ended"]
    assert about_run[1]["facts"]["names"] == ["API_TOKEN"]
    assert about_run[1]["actor"] == f"node:{NODE}"


def test_a_changed_skill_is_refused_until_the_owner_allows_the_new_hash(shared: Fleet):
    owner = shared.with_new_owner()
    made = owner.import_skill("shower", SECRET_SKILL, {"scripts/show.py": SHOW})
    with owner.http() as client:
        client.put("/api/secrets/API_TOKEN", json={"value": VALUE, "skill": "shower"})
        edit = {"content": SHOW + "print('v2')\n", "hash": made["hash"]}
        assert client.put("/api/skills/shower/files/scripts/show.py", json=edit).status_code == 200
        new_hash = client.get("/api/skills/shower").json()["hash"]

        refused = run_call(client).json()
        assert (refused["status"], refused["error"]["code"]) == ("failed", "secret_missing")
        assert "run_id" not in refused or refused["run_id"] is None

        allowed = client.put("/api/secrets/skills/shower", json={"hash": new_hash[:8]})
        assert allowed.status_code == 200, allowed.text
        again = run_call(client).json()
    assert again["status"] == "done", again
    assert again["result"]["stdout"].endswith("v2\n")


def test_only_the_running_nodes_token_reaches_a_runs_secrets(shared: Fleet):
    other = shared.node_env(f"o-{uuid.uuid4().hex[:6]}")["SKILLFLEET_NODE_TOKEN"]
    mine = shared.node_env(NODE)["SKILLFLEET_NODE_TOKEN"]
    run_id = str(uuid.uuid4())
    with httpx.Client(verify=TLS, base_url=shared.url, timeout=30) as client:
        for token, node in ((other, NODE), (mine, NODE), (shared.owner_token, NODE)):
            answer = client.get(
                f"/api/nodes/{node}/runs/{run_id}/secrets",
                headers={"Authorization": f"Bearer {token}"},
            )
            assert answer.status_code == 404, answer.text


def rows_of(running: Fleet, run_id: str, call_id: str) -> list[Any]:
    with running.services.engine.connect() as connection:
        runs = connection.execute(text("SELECT * FROM runs WHERE id = :id"), {"id": run_id}).all()
        calls = connection.execute(
            text("SELECT * FROM tool_calls WHERE id = :id"), {"id": call_id}
        ).all()
    assert runs and calls
    return [*runs, *calls]


def _holds(found: str | bytes, value: str) -> bool:
    data = found.encode() if isinstance(found, str) else found
    return value.encode() in data or json.dumps(value).encode()[1:-1] in data

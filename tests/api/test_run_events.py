"""Live run output over SSE and long polls, with a real worker: silence, lost workers, bad ids."""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import REDIS_URL
from fleet import Fleet, fleet, wait_until

from store.settings import Settings

pytestmark = pytest.mark.fleet

READ_NODE = {"skillfleet.tier": "read", "skillfleet.execution": "node"}
QUIET_SECONDS = 17  # longer than the 15 s block of a stream read and the 5 s socket timeout


def script_quiet_for(seconds: float) -> str:
    return (
        "import time\n"
        "print('start', flush=True)\n"
        f"time.sleep({seconds})\n"
        "print('end', flush=True)\n"
    )


def call_body(node: str) -> dict[str, Any]:
    return {"arguments": {"skill_name": "quiet", "script": "scripts/q.py", "node": node}}


@pytest.fixture
def running(tmp_path: Path, database_url: str) -> Iterator[Fleet]:
    settings = Settings(data_dir=tmp_path / "var", database_url=database_url, redis_url=REDIS_URL)
    with fleet(settings) as started:
        yield started


@pytest.fixture
def quick(tmp_path: Path, database_url: str) -> Iterator[Fleet]:
    """A fleet that finds a dead worker within seconds (heartbeats and housekeeping sped up)."""
    settings = Settings(
        data_dir=tmp_path / "var", database_url=database_url, redis_url=REDIS_URL,
        heartbeat_seconds=0.5, worker_alive_seconds=2.0, housekeeping_seconds=0.5,
    )  # fmt: skip
    with fleet(settings) as started:
        yield started


class SseReader(threading.Thread):
    """Reads a run's SSE stream in the background, keeping every frame and when it came."""

    def __init__(self, running: Fleet, run_id: str, headers: dict[str, str] | None = None):
        super().__init__(daemon=True)
        self.running = running
        self.run_id = run_id
        self.headers = headers or {}
        self.frames: list[tuple[float, str]] = []
        self.status: int | None = None
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            with (
                self.running.http(timeout=120) as client,
                client.stream(
                    "GET", f"/api/runs/{self.run_id}/events", headers=self.headers
                ) as response,
            ):
                self.status = response.status_code
                frame: list[str] = []
                for line in response.iter_lines():
                    if line:
                        frame.append(line)
                        continue
                    self.frames.append((time.monotonic(), "\n".join(frame)))
                    frame = []
        except httpx.HTTPError as e:
            self.error = e

    def events(self, kind: str) -> list[dict[str, Any]]:
        found = []
        for _at, frame in self.frames:
            lines = dict(line.split(": ", 1) for line in frame.splitlines() if ": " in line)
            if lines.get("event") == kind:
                found.append(json.loads(lines["data"]))
        return found

    def keepalives(self) -> list[float]:
        return [at for at, frame in self.frames if frame.startswith(":")]


def test_a_quiet_script_is_waited_for_and_its_sse_stream_stays_open_with_keepalives(running):
    node = f"t-{uuid.uuid4().hex[:8]}"
    running.start_node(node)
    running.import_skill("quiet", READ_NODE, {"scripts/q.py": script_quiet_for(QUIET_SECONDS)})
    with running.http(timeout=120) as client:
        started = client.post("/api/tools/run_skill_script", json=call_body(node)).json()
        assert started["status"] == "running", started
        reader = SseReader(running, started["run_id"])
        reader.start()
        answer = client.get(f"/api/calls/{started['call_id']}", params={"wait": 40})
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "done"
    reader.join(timeout=30)
    assert reader.error is None and reader.status == 200
    assert "".join(e["text"] for e in reader.events("stdout")) == "start\nend\n"
    assert [e["status"] for e in reader.events("exit")] == ["succeeded"]
    assert len(reader.keepalives()) >= 1  # one comment within every 15 s of silence


def test_a_long_poll_on_a_quiet_script_answers_done_not_redis_unavailable(running):
    node = f"t-{uuid.uuid4().hex[:8]}"
    running.start_node(node)
    running.import_skill("quiet", READ_NODE, {"scripts/q.py": script_quiet_for(8)})
    with running.http(timeout=120) as client:
        answer = client.post(
            "/api/tools/run_skill_script", params={"wait": 20}, json=call_body(node)
        )
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "done"
    assert answer.json()["result"]["stdout"] == "start\nend\n"


def test_an_sse_client_gets_interrupted_when_the_worker_running_the_script_dies(quick):
    running = quick
    node = f"t-{uuid.uuid4().hex[:8]}"
    running.start("control", "worker", "control")
    running.start("beat", "beat")
    running.start_node(node)
    running.import_skill("quiet", READ_NODE, {"scripts/q.py": script_quiet_for(120)})
    with running.http() as client:
        run_id = client.post("/api/tools/run_skill_script", json=call_body(node)).json()["run_id"]
    reader = SseReader(running, run_id)
    reader.start()
    wait_until(lambda: reader.events("stdout"), 30, "the script's first line")
    running.kill(node, signal.SIGKILL)
    reader.join(timeout=60)
    assert not reader.is_alive(), "the SSE stream did not end"
    exits = reader.events("exit")
    assert [e["status"] for e in exits] == ["interrupted"]
    assert "stopped" in exits[0]["error"]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_garbage_last_event_id_is_refused_and_a_future_one_replays_from_the_start(running):
    node = f"t-{uuid.uuid4().hex[:8]}"
    running.start_node(node)
    running.import_skill("quiet", READ_NODE, {"scripts/q.py": script_quiet_for(0)})
    with running.http() as client:
        done = client.post(
            "/api/tools/run_skill_script", params={"wait": 30}, json=call_body(node)
        ).json()
        path = f"/api/runs/{done['run_id']}/events"
        for garbage in ("garbage", "1-2-3", "99999999999999999999999-0", "-1-0"):
            refused = client.get(path, headers={"Last-Event-ID": garbage})
            assert refused.status_code == 400, (garbage, refused.text)
            assert refused.json()["code"] == "invalid_event_id"
        future = client.get(path, headers={"Last-Event-ID": f"{int(time.time() * 1000) + 10**9}-0"})
    assert future.status_code == 200
    assert "event: stdout" in future.text and "event: exit" in future.text

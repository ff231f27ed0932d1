"""With task events on (as Flower wants them), every run shows in Celery's event state, the
state Flower keeps, under its own name: `run <id> on <queue>`, with the run id as its only
argument, however fast the worker is."""

from __future__ import annotations

import functools
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REDIS_URL
from fleet import Fleet, fleet, wait_until

from relay import naming
from store.settings import Settings

pytestmark = pytest.mark.fleet

RUNS = 30
QUICK = "print('ok')\n"


@pytest.fixture
def running(tmp_path: Path, database_url: str) -> Iterator[Fleet]:
    settings = Settings(
        data_dir=tmp_path / "var", database_url=database_url, redis_url=REDIS_URL,
        run_timeout=20, task_events=True,
    )  # fmt: skip
    with fleet(settings) as started:
        yield started


class Watcher:
    """Celery's event receiver feeding an event state, as Flower runs them."""

    def __init__(self, running: Fleet) -> None:
        self.celery = running.services.celery
        self.state = self.celery.events.State()
        self.order: dict[str, list[str]] = {}  # task id -> its event types, as they came
        self.lock = threading.Lock()
        self.connection = self.celery.connection_for_read()
        self.receiver = self.celery.events.Receiver(self.connection, handlers={"*": self.on_event})
        self.thread = threading.Thread(target=self.receiver.capture, daemon=True)

    def on_event(self, event: dict[str, Any]) -> None:
        with self.lock:
            self.state.event(event)
            if event["type"].startswith("task-"):
                self.order.setdefault(event["uuid"], []).append(event["type"])

    def task_of(self, run_id: str) -> tuple[str, list[str]] | None:
        """The name and event types of the run's task, once it has succeeded."""
        with self.lock:
            for task in self.state.tasks.values():
                if task.args == repr([run_id]) and task.state == "SUCCESS":
                    return task.name, self.order[task.uuid]
        return None

    def __enter__(self) -> Watcher:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.receiver.should_stop = True
        self.thread.join(timeout=10)
        self.connection.release()


def test_every_run_shows_under_its_shadow_name_sent_before_received(running: Fleet):
    node = f"t-{uuid.uuid4().hex[:8]}"
    env = dict(running.node_env(node), SKILLFLEET_TASK_EVENTS="true")
    running.start("node", "worker", "node", "--name", node, env=env)
    running.wait_for_queue(naming.node_queue(node))
    running.import_skill(
        "quick",
        {"skillfleet.tier": "read", "skillfleet.execution": "node"},
        {"scripts/q.py": QUICK},
    )
    body = {
        "arguments": {"skill_name": "quick", "script": "scripts/q.py", "arguments": {"node": node}},
        "chat_id": "events",
    }
    with Watcher(running) as watcher, running.http() as client:
        # The receiver listens once it hears the worker's heartbeat events.
        wait_until(lambda: watcher.state.workers, 30, "the worker's events", every=0.2)
        run_ids = []
        for _ in range(RUNS):
            answer = client.post("/api/tools/run_skill_script", params={"wait": 10}, json=body)
            assert answer.status_code == 200 and answer.json()["status"] == "done", answer.text
            run_ids.append(answer.json()["run_id"])
        queue = naming.node_queue(node)
        for run_id in run_ids:
            seen = functools.partial(watcher.task_of, run_id)
            name, kinds = wait_until(seen, 30, f"run {run_id}'s events")
            assert name == f"run {run_id} on {queue}"
            assert kinds[:2] == ["task-sent", "task-received"], kinds

"""With task events on (as Flower wants them), every run shows in the event state Flower keeps
under its own name: `run <id> on <queue>`, with the run id as its only argument, however fast
the worker is; a run that did not succeed is a failed task, and still runs only once."""

from __future__ import annotations

import functools
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REDIS_URL, shared_file
from fleet import Fleet, fleet, wait_until
from flower.events import EventsState

from broker.dispatcher import EXECUTE_TASK
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
    """Celery's event receiver feeding Flower's own event state, as Flower runs them."""

    def __init__(self, running: Fleet) -> None:
        self.celery = running.services.celery
        self.state = EventsState()
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

    def ended(self, run_id: str, count: int = 1) -> list[Any] | None:
        """The run's tasks, once `count` of them have ended (succeeded or failed)."""
        with self.lock:
            tasks = [t for t in self.state.tasks.values() if t.args == repr([run_id])]
            done = [t for t in tasks if t.state in ("SUCCESS", "FAILURE")]
            return sorted(done, key=lambda t: t.timestamp) if len(done) >= count else None

    def failed_count(self) -> int:
        """Flower's "Failed" column, summed over the workers."""
        with self.lock:
            return sum(counts["task-failed"] for counts in self.state.counter.values())

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


# Appends its run id to the marker (the side effect we count), then ends with `code`, or
# sleeps until it is cancelled.
MARKING = (
    "import json, os, sys, time\n"
    "args = json.loads(os.environ['SKILLFLEET_ARGS'])\n"
    "open(args['marker'], 'a').write(os.environ['SKILLFLEET_RUN_ID'] + '\\n')\n"
    "time.sleep(args.get('sleep', 0))\n"
    "sys.exit(args.get('code', 0))\n"
)


def unacknowledged(running: Fleet, run_id: str) -> bool:
    """Whether the Redis transport holds the run's message as delivered but not acknowledged."""
    return any(run_id.encode() in message for message in running.redis.hvals("unacked"))


def test_runs_that_did_not_succeed_are_failed_tasks_acknowledged_and_run_once(
    running: Fleet, scratch: Path
):
    node = f"t-{uuid.uuid4().hex[:8]}"
    env = dict(running.node_env(node), SKILLFLEET_TASK_EVENTS="true")
    running.start("node", "worker", "node", "--name", node, env=env)
    running.wait_for_queue(naming.node_queue(node))
    running.import_skill(
        "marking",
        {"skillfleet.tier": "read", "skillfleet.execution": "node"},
        {"scripts/mark.py": MARKING},
    )
    marker = shared_file(scratch / "runs.log")

    def call(client: Any, wait: float, **arguments: Any) -> dict[str, Any]:
        arguments.update(node=node, marker=str(marker))
        body = {"arguments": {"skill_name": "marking", "script": "scripts/mark.py",
                              "arguments": arguments}, "chat_id": "events"}  # fmt: skip
        answer = client.post("/api/tools/run_skill_script", params={"wait": wait}, json=body)
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    def ran() -> list[str]:
        return marker.read_text().split()

    with Watcher(running) as watcher, running.http() as client:
        wait_until(lambda: watcher.state.workers, 30, "the worker's events", every=0.2)
        succeeded = call(client, 30)["run_id"]
        failed = call(client, 30, code=3)["run_id"]
        cancelled = call(client, 0, sleep=60)["run_id"]
        wait_until(lambda: cancelled in ran(), 30, "the script to start")
        assert unacknowledged(running, cancelled)  # in hand while it runs (acks_late)
        assert client.post(f"/api/runs/{cancelled}/cancel").status_code == 202

        (ok,) = wait_until(lambda: watcher.ended(succeeded), 30, "the succeeded run's task")
        (bad,) = wait_until(lambda: watcher.ended(failed), 30, "the failed run's task")
        (stopped,) = wait_until(lambda: watcher.ended(cancelled), 30, "the cancelled run's task")
        assert (ok.state, ok.result) == ("SUCCESS", "'succeeded'")
        assert (bad.state, stopped.state) == ("FAILURE", "FAILURE")
        assert bad.exception == f"NotSucceeded('run {failed} ended failed (exit code 3).')"
        assert stopped.exception.startswith(f"NotSucceeded('run {cancelled} ended cancelled")
        assert watcher.failed_count() == 2
        # Acknowledged like a returned task: nothing is left to come back.
        wait_until(
            lambda: not any(unacknowledged(running, r) for r in (succeeded, failed, cancelled)),
            30,
            "the three messages to be acknowledged",
        )
        assert running.redis.llen(naming.node_queue(node)) == 0

        # The failed run's message, delivered again, runs nothing and says how the run ended.
        running.services.celery.send_task(
            EXECUTE_TASK, args=[failed], queue=naming.node_queue(node)
        )
        _first, again = wait_until(lambda: watcher.ended(failed, 2), 30, "the redelivery's task")
        assert again.state == "FAILURE"
        assert again.exception == (
            f"NotSucceeded('run {failed} had already ended failed (exit code 3); "
            "this delivery ran nothing.')"
        )
    assert sorted(ran()) == sorted([succeeded, failed, cancelled])


def test_a_job_run_that_failed_is_a_failed_task_naming_it(running: Fleet):
    running.start(
        "control", "worker", "control", env=dict(running.env, SKILLFLEET_TASK_EVENTS="true")
    )
    running.wait_for_queue(naming.CONTROL, "control")
    job = {"name": "asks a model", "cron": "0 3 * * *", "steps": [{"prompt": "Say hello."}]}
    with Watcher(running) as watcher, running.http() as client:
        wait_until(lambda: watcher.state.workers, 30, "the worker's events", every=0.2)
        created = client.post("/api/jobs", json=job)
        assert created.status_code == 201, created.text
        job_run_id = client.post(f"/api/jobs/{created.json()['id']}/run").json()["job_run_id"]
        (task,) = wait_until(lambda: watcher.ended(job_run_id), 30, "the job run's task")
    # No model is configured, so the prompt step fails the run.
    assert task.state == "FAILURE"
    assert task.exception == f"NotSucceeded('job run {job_run_id} ended failed (no_model).')"

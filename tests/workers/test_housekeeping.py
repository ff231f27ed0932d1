"""Beat's housekeeping stays out of Flower and beat's log, and notices are delivered as they are
published, without waiting for beat.

The fleets here use a Redis of their own: the housekeeping trims the ended streams of the whole
database, and the notifier's queue must hold only this test's messages.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from celery.schedules import crontab
from fleet import Fleet, RedisServer, fleet, own_redis, wait_until
from receiver import receiver
from sqlalchemy import select

from relay import events, naming
from relay.app import QUIET_ENTRIES, QuietEntries, create_celery
from relay.retention import StreamCaps
from relay.streams import RunStream
from store import notifications
from store.db import transaction
from store.models import Owner
from store.secrets import Sealer
from store.settings import Settings

pytestmark = pytest.mark.fleet

WIPE = {"skillfleet.tier": "destructive", "skillfleet.execution": "node"}
WIPE_CALL = {"arguments": {"skill_name": "wiper", "script": "scripts/wipe.sh",
                           "arguments": {"node": "web01"}}, "chat_id": "c1"}  # fmt: skip
MINUTE = 60.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with own_redis(tmp_path_factory.mktemp("redis")) as started:
        yield started


@pytest.fixture
def running(server: RedisServer, tmp_path: Path, sqlite_template: Path) -> Iterator[Fleet]:
    """A fleet on SQLite (the dialect does not matter here) and this module's Redis."""
    redis.Redis.from_url(server.url).flushdb()
    database = tmp_path / "skillfleet.db"
    shutil.copy(sqlite_template, database)
    settings = Settings(
        data_dir=tmp_path / "var", database_url=f"sqlite:///{database}", redis_url=server.url,
        task_events=True,
    )  # fmt: skip
    with fleet(settings) as started:
        yield started


def seconds_between(schedule: Any) -> float:
    """How often a beat entry fires: its interval, or a minute for a crontab of every minute."""
    if isinstance(schedule, crontab):
        return MINUTE if schedule.minute == set(range(60)) else 3600.0
    return float(schedule)


def test_beat_fires_nothing_flower_or_its_log_shows_more_than_once_a_minute():
    import workers.tasks  # noqa: F401 - registers the tasks the schedule names

    app = create_celery(Settings())
    schedule = app.conf.beat_schedule
    for name, entry in schedule.items():
        task = app.tasks[entry["task"]]
        if name in QUIET_ENTRIES:
            assert task.send_events is False, name
            assert seconds_between(entry["schedule"]) >= 5, name
        else:
            assert task.send_events is True, name
            assert seconds_between(entry["schedule"]) >= MINUTE, name
    assert seconds_between(schedule["sweep"]["schedule"]) >= MINUTE
    assert {entry["task"] for entry in schedule.values()} == {
        "skillfleet.job_tick", "skillfleet.housekeeping", "skillfleet.sweep"
    }  # fmt: skip


def test_beat_logs_sending_the_job_tick_but_not_the_housekeeping():
    def sent(entry: str, task: str) -> logging.LogRecord:
        return logging.LogRecord(
            "celery.beat", logging.INFO, __file__, 1,
            "Scheduler: Sending due task %s (%s)", (entry, task), None,
        )  # fmt: skip

    quiet = QuietEntries()
    assert quiet.filter(sent("job-tick", "skillfleet.job_tick"))
    assert not quiet.filter(sent("housekeeping", "skillfleet.housekeeping"))
    assert not quiet.filter(sent("sweep", "skillfleet.sweep"))


def test_housekeeping_runs_on_the_control_worker_without_task_events_or_beat_log_lines(
    running: Fleet,
):
    running.env["SKILLFLEET_TASK_EVENTS"] = "true"
    running.env["SKILLFLEET_RUN_STREAMS_KEPT"] = "3"
    caps = StreamCaps(kept=3)
    for _ in range(10):
        RunStream(running.redis, str(uuid.uuid4()), caps).exit("succeeded", 0)
    ended = naming.ended_runs()
    with watching(running) as tasks:
        running.start("control", "worker", "control")
        running.start("beat", "beat")
        wait_until(lambda: running.redis.zcard(ended) == 3, 60, "the housekeeping to trim")
        for _ in range(5):
            RunStream(running.redis, str(uuid.uuid4()), caps).exit("succeeded", 0)
        wait_until(lambda: running.redis.zcard(ended) == 3, 60, "a second housekeeping round")
        wait_until(lambda: "skillfleet.job_tick" in tasks, 30, "the job tick's task events")
    assert not {"skillfleet.housekeeping", "skillfleet.sweep"} & set(tasks)
    beat_log = running.log_text("beat")
    sends = [line for line in beat_log.splitlines() if "Sending due task" in line]
    assert sends and all("Sending due task job-tick" in line for line in sends), sends


@contextmanager
def watching(running: Fleet) -> Iterator[dict[str, list[str]]]:
    """The names of the tasks Celery's task events report (as Flower hears them) and their
    event types, for as long as the block lasts."""
    celery = running.services.celery
    seen: dict[str, list[str]] = {}
    names: dict[str, str] = {}
    lock = threading.Lock()

    def on_event(event: dict[str, Any]) -> None:
        if not event["type"].startswith("task-"):
            return
        with lock:
            if event.get("name"):
                names[event["uuid"]] = event["name"]
            name = names.get(event["uuid"], event["uuid"])
            seen.setdefault(name, []).append(event["type"])

    connection = celery.connection_for_read()
    receiver = celery.events.Receiver(connection, handlers={"*": on_event})
    thread = threading.Thread(target=receiver.capture, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        receiver.should_stop = True
        thread.join(timeout=10)
        connection.release()


def test_a_waiting_approval_reaches_a_webhook_promptly_with_no_beat_running(running: Fleet):
    with running.services.sessions() as session:
        owner_id = session.scalars(select(Owner.id)).one()  # the fleet's owner, the only one
    running.env["SKILLFLEET_EGRESS_ALLOW"] = "127.0.0.1"  # the receiver is on loopback
    with receiver() as (port, posted):
        url = f"http://127.0.0.1:{port}/hook"
        with transaction(running.services.sessions) as session:
            sealer = Sealer(running.settings.keys_dir)
            notifications.add_webhook(session, sealer, owner_id, url, ["*"], events.WEBHOOK_KINDS)
        events.start_listening(running.redis, owner_id)
        running.start("control", "worker", "control")  # and no beat: no sweep will come
        running.wait_for_queue(naming.CONTROL)
        running.import_skill("wiper", WIPE, {"scripts/wipe.sh": "echo wiping\n"})
        running.node_env("web01")  # the owner's node the call names
        with running.http() as client:
            call = client.post("/api/tools/run_skill_script", json=WIPE_CALL).json()
        assert call["status"] == "pending_approval", call
        wait_until(lambda: posted, 30, "the notify task the approval sent to deliver it")
    [delivered] = [json.loads(body) for _path, _headers, body in posted]
    assert delivered["kind"] == "approval.waiting"
    assert delivered["data"]["approval_id"] == call["approval_id"]
    assert not running.redis.exists(naming.notify_due(owner_id))


def test_a_burst_of_notices_sends_one_notify_task_per_owner(server: RedisServer):
    client = redis.Redis.from_url(server.url)
    client.flushdb()
    for number in range(20):
        events.publish(client, 1, "run.failed", run_id=f"r{number}", message="It failed.")
    events.publish(client, 1, "run.state", run_id="r0", status="failed")  # not a notice
    events.publish(client, 2, "approval.waiting", approval_id="a1", message="It waits.")
    assert client.xlen(naming.owner_events(1)) == 21
    sent = [json.loads(message) for message in client.lrange(naming.CONTROL, 0, -1)]
    assert sorted((m["headers"]["task"], m["headers"]["argsrepr"]) for m in sent) == [
        ("skillfleet.notify", "['1']"), ("skillfleet.notify", "['2']")
    ]  # fmt: skip
    assert 0 < client.ttl(naming.notify_due(1)) <= 60

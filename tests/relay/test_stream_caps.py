"""Live streams are capped in Redis: bytes per stream, a TTL, and a count of ended streams kept.

Everything is written through the real writers (RunStream, the runners' OutputCollector,
TurnStream) to a real Redis. Trimming removes the oldest ended streams of the whole database,
so the tests that trim use a redis-server of their own.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import REDIS_URL
from factories import owner_id_of
from fleet import RedisServer, own_redis, wait_until

from api import create_app
from api.services import Services
from relay import naming, retention
from relay.retention import StreamCaps
from relay.streams import RunStream, TurnStream, read_events, read_stream
from store.db import transaction
from store.models import Run, utcnow
from store.settings import Settings, SettingsError
from store.tokens import create_owner_token
from workers.runners.base import OutputCollector

KIB = 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A Redis of this module's own: trimming here removes no other test's streams."""
    with own_redis(tmp_path_factory.mktemp("redis")) as started:
        yield started


@pytest.fixture
def client(server: RedisServer) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(server.url)
    connection.flushdb()
    yield connection
    connection.close()


def ended_run(client: redis.Redis, caps: StreamCaps, output: bytes = b"hello\n") -> str:
    """A run that printed `output` and ended, written as a worker writes it."""
    run_id = str(uuid.uuid4())
    stream = RunStream(client, run_id, caps)
    collector = OutputCollector(stream)
    collector.started(worker="w1")
    collector.add("stdout", output)
    collector.finish()
    stream.exit("succeeded", 0)
    return run_id


def stream_text(events: list[Any], kind: str) -> str:
    return "".join(e.data.get("text", "") for e in events if e.kind == kind)


def test_output_past_the_cap_is_dropped_after_one_truncated_note_and_the_row_keeps_the_tail():
    client = redis.Redis.from_url(REDIS_URL)
    caps = StreamCaps(output_bytes=4 * KIB)
    run_id = str(uuid.uuid4())
    stream = RunStream(client, run_id, caps)
    collector = OutputCollector(stream)
    printed = b"".join(b"line %05d\n" % n for n in range(1000))  # 11,000 bytes
    for start in range(0, len(printed), 500):  # as a script prints it, in several writes
        collector.add("stdout", printed[start : start + 500])
        collector.flush()
    collector.add("stderr", b"late warning\n")
    collector.flush()
    stream.exit("succeeded", 0)

    events = read_events(client, run_id)
    assert stream_text(events, "stdout").encode() == printed[: 4 * KIB]
    notes = [e for e in events if e.data.get("truncated")]
    assert len(notes) == 1 and notes[0].kind == "stderr"
    assert "output truncated" in notes[0].data["text"] and "4 KiB" in notes[0].data["text"]
    assert "late warning" not in stream_text(events, "stderr")
    assert events[-1].kind == "exit"
    # The Run row is written from the collector: it keeps the tail, past the stream's cap.
    assert collector.text("stdout").encode() == printed[-len(collector.text("stdout")) :]
    assert collector.text("stdout").endswith("line 00999\n")


def test_a_running_stream_has_a_ttl_so_a_dead_worker_s_stream_expires_too():
    client = redis.Redis.from_url(REDIS_URL)
    run_id = str(uuid.uuid4())
    stream = RunStream(client, run_id, StreamCaps(ttl=1))
    stream.output("stdout", b"started\n")  # the worker dies here: no exit ever comes
    assert 0 < client.pttl(naming.run_stream(run_id)) <= 1000
    wait_until(lambda: not client.exists(naming.run_stream(run_id)), 10, "the stream to expire")


def test_an_ended_stream_and_its_end_key_expire_after_the_ttl():
    client = redis.Redis.from_url(REDIS_URL)
    run_id = ended_run(client, StreamCaps(ttl=1))
    keys = (naming.run_stream(run_id), naming.run_end(run_id))
    assert all(0 < client.pttl(key) <= 1000 for key in keys)
    wait_until(lambda: not client.exists(*keys), 10, "the ended stream to expire")


def test_only_the_newest_kept_ended_streams_stay_and_running_ones_are_never_removed(
    client: redis.Redis,
):
    caps = StreamCaps(kept=10)
    running = RunStream(client, str(uuid.uuid4()), caps)
    running.output("stdout", b"still going\n")
    ended = [ended_run(client, caps) for _ in range(40)]
    turn = TurnStream(client, str(uuid.uuid4()), caps)
    turn.end("succeeded", None)

    assert retention.trim(client, caps.kept) == 30
    for run_id in ended[:30]:
        assert not client.exists(naming.run_stream(run_id), naming.run_end(run_id))
    for run_id in ended[30:]:
        assert client.exists(naming.run_stream(run_id), naming.run_end(run_id)) == 2
    assert client.exists(running.key) and client.exists(turn.key)
    assert client.zcard(naming.ended_runs()) == 10
    assert retention.trim(client, caps.kept) == 0


def test_redis_memory_stays_bounded_however_many_runs_end(client: redis.Redis):
    """A housekeeping round every 100 runs (at 20 runs/s, one every 5 s); the kept count,
    not the number of runs, sets the memory: five times the runs cost no more than the first."""
    caps = StreamCaps(kept=100)
    output = b"".join(b"result line %03d of a typical run\n" % n for n in range(20))

    def end_runs(count: int) -> int:
        for done in range(1, count + 1):
            ended_run(client, caps, output)
            if done % 100 == 0:
                retention.trim(client, caps.kept)
        return int(client.info("memory")["used_memory"])

    before = int(client.info("memory")["used_memory"])
    first = end_runs(500) - before
    then = end_runs(2000) - before
    kept = client.zrange(naming.ended_runs(), 0, -1)
    assert len(kept) == 100
    assert client.dbsize() == 1 + 2 * 100  # the index, and each kept run's stream and end key
    per_run = sum(
        int(client.memory_usage(key) or 0)
        for member in kept
        for key in retention.run_keys(member.decode())
    ) / len(kept)
    assert first < 400 * per_run  # uncapped, 500 runs would hold 500 streams
    assert then < first + 100 * per_run  # 2,000 runs more changed (almost) nothing


def test_a_turn_stream_drops_text_past_the_cap_but_keeps_tool_events_and_its_end(
    client: redis.Redis,
):
    turn_id = str(uuid.uuid4())
    stream = TurnStream(client, turn_id, StreamCaps(output_bytes=1 * KIB, ttl=600))
    for _ in range(100):
        stream.add("text", {"text": "x" * 50})
    stream.add("tool_call", {"tool_call_id": "t1", "tool": "list_skills"})
    stream.add("text", {"text": "more"})
    stream.end("succeeded", None)

    events = read_stream(client, naming.turn_stream(turn_id))
    texts = [e for e in events if e.kind == "text"]
    notes = [e for e in texts if e.data.get("truncated")]
    assert len(notes) == 1 and "text truncated" in notes[0].data["text"]
    assert sum(len(e.data["text"]) for e in texts if e not in notes) == 1000
    assert [e.kind for e in events[-2:]] == ["tool_call", "end"]
    assert 0 < client.ttl(naming.turn_stream(turn_id)) <= 600
    assert client.zscore(naming.ended_turns(), turn_id) is not None


def test_a_run_whose_stream_was_trimmed_is_served_from_its_row(
    server: RedisServer, client: redis.Redis, tmp_path: Path, sqlite_template: Path
):
    database = tmp_path / "skillfleet.db"
    shutil.copy(sqlite_template, database)  # the dialect does not matter here
    settings = Settings(
        data_dir=tmp_path / "var", database_url=f"sqlite:///{database}", redis_url=server.url
    )
    services = Services.build(settings)
    try:
        with transaction(services.sessions) as session:
            token = create_owner_token(session, "alice")
        run_id = ended_run(client, StreamCaps(kept=1), b"from the stream\n")
        with transaction(services.sessions) as session:
            session.add(ended_row(run_id, owner_id_of(services), b"from the row\n"))
        ended_run(client, StreamCaps(kept=1))  # a newer run: the first is past the kept count
        assert retention.trim(client, 1) == 1
        assert not client.exists(naming.run_stream(run_id))
        answer = (
            create_app(services=services)
            .test_client()
            .get(f"/api/runs/{run_id}/events", headers={"Authorization": f"Bearer {token}"})
        )
        text = answer.get_data(as_text=True)
        assert answer.status_code == 200
        assert "from the row" in text and "from the stream" not in text
        assert "event: exit" in text and '"status": "succeeded"' in text
    finally:
        services.engine.dispose()


def ended_row(run_id: str, owner_id: int, stdout: bytes) -> Run:
    """The row a worker recorded for a run that succeeded (its capped tail of output)."""
    now = utcnow()
    return Run(
        id=run_id, owner_id=owner_id, skill_name="hello", skill_hash="0" * 64,
        script="scripts/hello.py", arguments={}, execution="node", queue="node.web01",
        node="web01", status="succeeded", exit_code=0, stdout=stdout.decode(), stderr="",
        worker="w1", timeout_seconds=300, created_at=now, started_at=now, finished_at=now,
    )  # fmt: skip


def test_stream_settings_are_read_from_the_environment_and_bad_values_are_named():
    settings = Settings.from_env(
        {"SKILLFLEET_RUN_OUTPUT_BYTES": "65536", "SKILLFLEET_RUN_STREAM_TTL": "600",
         "SKILLFLEET_RUN_STREAMS_KEPT": "50", "SKILLFLEET_FLOWER_MAX_TASKS": "2000"}
    )  # fmt: skip
    assert StreamCaps.of(settings) == StreamCaps(output_bytes=65536, ttl=600, kept=50)
    assert settings.flower_max_tasks == 2000
    assert StreamCaps.of(Settings.from_env({})) == StreamCaps(1024 * KIB, 3600, 1000)
    for name, value in (
        ("SKILLFLEET_RUN_STREAMS_KEPT", "0"),
        ("SKILLFLEET_RUN_STREAM_TTL", "-5"),
        ("SKILLFLEET_RUN_OUTPUT_BYTES", "100"),
        ("SKILLFLEET_FLOWER_MAX_TASKS", "lots"),
    ):
        with pytest.raises(SettingsError, match=name):
            Settings.from_env({name: value})

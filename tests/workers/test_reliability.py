"""Reliability with real processes: a killed worker, Redis going away, 200 calls at once."""

from __future__ import annotations

import concurrent.futures
import re
import signal
import time
import uuid
from pathlib import Path

import httpx
import pytest
from conftest import POSTGRES_URL, REDIS_URL, TLS, shared_file  # noqa: F401 - the services used
from fleet import Fleet, fleet, own_redis, run_ended, wait_until

from relay.streams import read_events
from store.limits import REDIS_SOCKET_TIMEOUT_SECONDS
from store.settings import Settings

pytestmark = pytest.mark.fleet

# A lost worker counts as gone, and its runs are answered, within seconds: the timings a test
# can wait on instead of the defaults' ten.
QUICK = {"heartbeat_seconds": 0.5, "worker_alive_seconds": 2.0, "housekeeping_seconds": 0.5}
# Longer than each time limit of the worker's Redis client and than its heartbeat's window,
# so the worker meets every failure an outage brings before Redis comes back.
OUTAGE_SECONDS = 2 * max(REDIS_SOCKET_TIMEOUT_SECONDS, QUICK["worker_alive_seconds"])
READ_NODE = {"skillfleet.tier": "read", "skillfleet.execution": "node"}


def counting_script(marker: Path, seconds: float = 0) -> str:
    """Appends its run id to `marker` (the side effect we count), then sleeps."""
    return (
        "import os, time\n"
        f"open({str(marker)!r}, 'a').write(os.environ['SKILLFLEET_RUN_ID'] + '\\n')\n"
        "print('started', os.getpid(), os.getuid(), flush=True)\n"
        f"time.sleep({seconds})\n"
        "print('finished', flush=True)\n"
    )


def stdout_text(running, run_id: str) -> str:
    return "".join(e.data["text"] for e in read_events(running.redis, run_id) if e.kind == "stdout")


def body(node: str) -> dict:
    return {
        "arguments": {
            "skill_name": "counter",
            "script": "scripts/count.py",
            "arguments": {"node": node},
        }
    }


@pytest.fixture
def settings_for(tmp_path: Path, database_url: str):
    def build(redis_url: str = REDIS_URL, **changes: object) -> Settings:
        return Settings(
            data_dir=tmp_path / "var", database_url=database_url, redis_url=redis_url, **changes
        )

    return build


def test_a_killed_worker_leaves_its_run_interrupted_and_it_never_runs_again(
    settings_for, tmp_path: Path, scratch: Path
):
    marker = shared_file(scratch / "runs.log")
    with fleet(settings_for(visibility_timeout=3, **QUICK)) as running:
        node = f"t-{uuid.uuid4().hex[:8]}"
        running.start("control", "worker", "control")
        running.start("beat", "beat")
        running.start_node(node)
        running.import_skill(
            "counter", READ_NODE, {"scripts/count.py": counting_script(marker, 60)}
        )
        with running.http() as client:
            run_id = client.post("/api/tools/run_skill_script", json=body(node)).json()["run_id"]
            # The line may come in pieces (the script writes unbuffered): wait for it whole.
            started = wait_until(
                lambda: re.search(r"started (\d+) (\d+)\n", stdout_text(running, run_id)),
                30,
                "the script to start",
            )
            script_pid, script_uid = int(started[1]), int(started[2])
            running.kill(node, signal.SIGKILL)
            killed_at = time.monotonic()
            wait_until(
                lambda: run_ended(script_pid, script_uid), 10, "the script to die with its worker"
            )
            run = wait_until(
                lambda: (
                    (r := client.get(f"/api/runs/{run_id}").json())["status"] == "interrupted" and r
                ),
                30,
                "the reaper to answer interrupted",
            )
            assert time.monotonic() - killed_at < 30
            assert "started" in run["stdout"]
            # The same node comes back; the unacknowledged message is delivered again. kombu
            # gives it back once it is older than the visibility timeout, when a worker starts
            # (then only every 100 s): on a busy machine the reaper and the restart could come
            # sooner than that, so the restart waits for it, as a real one comes later still.
            timeout = running.settings.visibility_timeout
            wait_until(lambda: taken_before(running, timeout), 30, "the message to come due")
            running.start_node(node, label=f"{node}-again")
            wait_until(
                lambda: "run already claimed or ended" in running.log_text(f"{node}-again"),
                40,
                "the redelivered message to reach the new worker",
            )
            assert client.get(f"/api/runs/{run_id}").json()["status"] == "interrupted"
    assert marker.read_text().split() == [run_id]


def taken_before(running: Fleet, seconds: float) -> bool:
    """Whether the messages workers took and never acknowledged were all taken more than
    `seconds` ago (kombu's Redis transport indexes them by when, in `unacked_index`)."""
    taken = running.redis.zrange("unacked_index", 0, -1, withscores=True)
    return bool(taken) and all(when < time.time() - seconds for _, when in taken)


def test_redis_going_away_answers_503_and_nothing_runs_twice(
    settings_for, tmp_path: Path, scratch: Path
):
    marker = shared_file(scratch / "runs.log")
    with own_redis(tmp_path / "redis") as server:
        with fleet(settings_for(redis_url=server.url, **QUICK)) as running:
            node = f"t-{uuid.uuid4().hex[:8]}"
            running.start_node(node)
            running.import_skill(
                "counter", READ_NODE, {"scripts/count.py": counting_script(marker)}
            )
            with running.http() as client:
                first = client.post(
                    "/api/tools/run_skill_script", params={"wait": 30}, json=body(node)
                )
                assert first.json()["status"] == "done"
                server.stop()
                down = client.post("/api/tools/run_skill_script", json=body(node))
                assert down.status_code == 503
                assert down.json()["code"] == "service_unavailable"
                events = client.get(f"/api/runs/{first.json()['run_id']}/events")
                assert events.status_code == 503
                server.start()
                running.wait_for_queue(f"node.{node}", limit=30)
                after = client.post(
                    "/api/tools/run_skill_script", params={"wait": 30}, json=body(node)
                )
                assert after.status_code == 200 and after.json()["status"] == "done", after.text
                # The refused call is not a tool failure, and nothing is left open.
                calls = client.get("/api/calls").json()
                assert [c["error_code"] for c in calls if c["status"] != "done"] in (
                    [],
                    ["service_unavailable"],
                ), calls
        lines = marker.read_text().split()
        assert len(lines) == len(set(lines)) == 2


@pytest.mark.timeout(300)
@pytest.mark.fenced("kombu")
def test_a_worker_rides_out_redis_going_away_and_its_run_in_flight_ends_interrupted(
    settings_for, tmp_path: Path, scratch: Path
):
    marker = shared_file(scratch / "runs.log")
    with own_redis(tmp_path / "redis") as server:
        with fleet(settings_for(redis_url=server.url, **QUICK)) as running:
            node = f"t-{uuid.uuid4().hex[:8]}"
            running.start("control", "worker", "control")
            running.start("beat", "beat")
            worker = running.start_node(node)
            running.import_skill(
                "counter", READ_NODE, {"scripts/count.py": counting_script(marker, 300)}
            )
            with running.http() as client:
                run_id = client.post("/api/tools/run_skill_script", json=body(node)).json()[
                    "run_id"
                ]
                wait_until(marker.read_text, 30, "the script to start")
                server.stop()
                health = client.get("/api/health")
                assert health.status_code == 503
                assert health.json()["code"] == "redis_unavailable"
                assert "Redis" in health.json()["message"]
                time.sleep(OUTAGE_SECONDS)
                server.start()
                assert worker.poll() is None, running.log_text(node)[-3000:]
                try:
                    running.wait_for_queue(f"node.{node}", limit=60)
                except AssertionError:
                    raise AssertionError(running.log_text(node)[-5000:]) from None
                run = wait_until(
                    lambda: (
                        (r := client.get(f"/api/runs/{run_id}").json())["status"] != "running" and r
                    ),
                    30,
                    "the run in flight to end",
                )
                assert run["status"] == "interrupted", run
                assert client.get("/api/health").status_code == 200
                marker.write_text("")
                after = client.post(  # its script runs 300 s: the answer says it started
                    "/api/tools/run_skill_script", params={"wait": 1}, json=body(node)
                )
                assert after.status_code == 200, after.text
                assert after.json()["status"] == "running"  # the new run started, not the old
        assert run_id not in marker.read_text()


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
def test_two_hundred_concurrent_calls_make_two_hundred_runs_each_executed_once(
    settings_for, tmp_path: Path, scratch: Path
):
    marker = shared_file(scratch / "runs.log")
    with fleet(settings_for()) as running:
        node = f"t-{uuid.uuid4().hex[:8]}"
        running.start_node(node, concurrency=16)
        running.import_skill("counter", READ_NODE, {"scripts/count.py": counting_script(marker)})

        def one(_index: int) -> dict:
            with httpx.Client(
                verify=TLS,
                base_url=running.url,
                headers={"Authorization": f"Bearer {running.owner_token}"},
                timeout=120,
            ) as client:
                response = client.post(
                    "/api/tools/run_skill_script", params={"wait": 60}, json=body(node)
                )
                assert response.status_code == 200, response.text
                return dict(response.json())

        with concurrent.futures.ThreadPoolExecutor(max_workers=50) as pool:
            envelopes = list(pool.map(one, range(200)))
    run_ids = {envelope["run_id"] for envelope in envelopes}
    assert len(run_ids) == 200
    statuses = [(e["status"], (e.get("error") or {}).get("code")) for e in envelopes]
    assert statuses == [("done", None)] * 200, sorted(set(statuses))
    lines = marker.read_text().split()
    assert sorted(lines) == sorted(run_ids)

"""A Redis failover under a real fleet: the API, the control worker, beat and a node worker,
all finding the primary through three sentinels, and the primary SIGKILLed mid-run.

What docs/operations.md ("Redis failover") promises, checked: the run in flight ends
`succeeded` or `interrupted` and runs once; its stream, followed with Last-Event-ID across
the failover, ends with exactly one exit; a call waiting with `?wait=` gets its answer; a new
call works within 30 s of the kill.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import shared_file
from fleet import Fleet, fleet, sentinel_redis, wait_until

from store.settings import Settings

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

# A lost worker's runs are answered within seconds; its message comes back soon after.
QUICK = {
    "heartbeat_seconds": 0.5,
    "worker_alive_seconds": 5.0,
    "housekeeping_seconds": 0.5,
    "visibility_timeout": 5,
}
READ_NODE = {"skillfleet.tier": "read", "skillfleet.execution": "node"}
FAILOVER_LIMIT = 30.0
END_STATES = ("succeeded", "failed", "timed_out", "interrupted", "cancelled")


def ticking_script(marker: Path, ticks: int) -> str:
    """Appends its run id to `marker` (counted: a run must start once), then ticks."""
    return (
        "import os, time\n"
        f"open({str(marker)!r}, 'a').write(os.environ['SKILLFLEET_RUN_ID'] + '\\n')\n"
        f"for i in range({ticks}):\n"
        "    print(f'tick {i}', flush=True)\n"
        "    time.sleep(0.2)\n"
    )


def body(node: str, script: str) -> dict[str, Any]:
    arguments = {"skill_name": "ticker", "script": script, "arguments": {"node": node}}
    return {"arguments": arguments, "chat_id": f"failover-{uuid.uuid4().hex[:6]}"}


# kombu's own Sentinel channel stops a worker for good when the primary dies with a message in
# its hand, as its plain Redis channel does (relay/fenced/kombu_redis.py): no new call works.
@pytest.mark.fenced("kombu")
@pytest.mark.timeout(300)
def test_a_failover_mid_run_ends_it_once_resumes_its_stream_and_answers_every_wait(
    tmp_path: Path, database_url: str, scratch: Path
):
    marker = shared_file(scratch / "runs.log")
    with sentinel_redis(tmp_path / "redis") as found:
        settings = Settings(
            data_dir=tmp_path / "var", database_url=database_url, **QUICK, **found.settings()
        )
        with fleet(settings) as running:
            node = f"t-{uuid.uuid4().hex[:8]}"
            running.start("control", "worker", "control")
            running.start("beat", "beat")
            running.start_node(node)
            running.import_skill(
                "ticker",
                READ_NODE,
                {
                    "scripts/long.py": ticking_script(marker, 50),  # 10 s
                    "scripts/short.py": ticking_script(marker, 10),  # 2 s
                },
            )
            with running.http(timeout=120) as client:
                started = client.post(
                    "/api/tools/run_skill_script", json=body(node, "scripts/long.py")
                )
                run_id = started.json()["run_id"]
                stream: dict[str, Any] = {"events": [], "reconnects": 0}
                follower = threading.Thread(target=follow, args=(running, run_id, stream))
                follower.start()
                wait_until(lambda: len(stream["events"]) >= 3, 30, "the run's stream to flow")
                waited: dict[str, Any] = {}
                waiter = threading.Thread(target=wait_call, args=(running, node, waited))
                waiter.start()
                time.sleep(1.5)  # the waiting call's run has started (its script ticks 10 s)

                killed_at = time.monotonic()
                found.kill_primary()
                promoted = found.wait_for_failover()
                new = wait_until(
                    lambda: new_call(client, node), FAILOVER_LIMIT, "a new call to work", 0.5
                )
                worked = time.monotonic() - killed_at
                print(f"failover: promoted after {promoted:.1f} s, a new call done {worked:.1f} s")
                assert worked < FAILOVER_LIMIT, (promoted, worked)
                assert new["status"] == "done", new

                waiter.join(120)
                assert waited.get("code") == 200, waited
                answer = waited["body"]
                assert answer["status"] != "running", answer
                call = client.get(f"/api/calls/{answer['call_id']}").json()
                assert call["status"] == answer["status"], (call, answer)

                follower.join(120)
                assert not follower.is_alive()
                exits = [e for e in stream["events"] if e[1] == "exit"]
                assert len(exits) == 1, stream
                ids = [e[0] for e in stream["events"]]
                assert len(ids) == len(set(ids)), stream  # nothing twice across reconnects

                run = wait_until(
                    lambda: (
                        (r := client.get(f"/api/runs/{run_id}").json())["status"] in END_STATES
                        and r
                    ),
                    60,
                    "the run to end",
                )
                assert run["status"] in ("succeeded", "interrupted"), run
                resumed, status = stream["reconnects"], answer["status"]
                print(f"run ended {run['status']}, stream resumed {resumed}x, wait got {status}")
                # Past the visibility timeout: a message back from Redis finds the run ended.
                time.sleep(QUICK["visibility_timeout"] * 2 + 2)
                assert client.get(f"/api/runs/{run_id}").json()["status"] == run["status"]
    assert marker.read_text().split().count(run_id) == 1


def follow(running: Fleet, run_id: str, stream: dict[str, Any]) -> None:
    """Follow a run's events to its exit, resuming with Last-Event-ID whenever they break."""
    last: str | None = None
    deadline = time.monotonic() + 120
    with running.http(timeout=30) as client:
        while time.monotonic() < deadline:
            headers = {"Last-Event-ID": last} if last else {}
            try:
                with client.stream("GET", f"/api/runs/{run_id}/events", headers=headers) as got:
                    if got.status_code != 200:
                        raise httpx.HTTPError(f"status {got.status_code}")
                    entry = kind = None
                    for line in got.iter_lines():
                        if line.startswith("id:"):
                            entry = line[3:].strip()
                        elif line.startswith("event:"):
                            kind = line[6:].strip()
                        elif line.startswith("data:"):
                            stream["events"].append((entry, kind))
                            last = entry or last
                            if kind == "exit":
                                return
            except httpx.HTTPError:
                pass
            stream["reconnects"] += 1
            time.sleep(0.5)


def wait_call(running: Fleet, node: str, waited: dict[str, Any]) -> None:
    """A call whose run spans the failover, waited for with `?wait=`."""
    with running.http(timeout=120) as client:
        response = client.post(
            "/api/tools/run_skill_script",
            params={"wait": 60},
            json=body(node, "scripts/long.py"),
        )
    waited.update(code=response.status_code, body=response.json())


def new_call(client: httpx.Client, node: str) -> dict[str, Any] | None:
    try:
        response = client.post(
            "/api/tools/run_skill_script", params={"wait": 20}, json=body(node, "scripts/short.py")
        )
    except httpx.HTTPError:
        return None
    if response.status_code != 200 or response.json()["status"] != "done":
        return None
    return dict(response.json())

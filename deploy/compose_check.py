"""Checks a running docker-compose deployment the way its users would (deploy/compose-test.sh).

Every step talks to the stack through its published loopback ports or `docker-compose exec`:
scripts on edge1 and edge2 by node name, a Spark run, an approval answered over REST, a few
hundred open streams and waiting calls, Flower behind basic auth, /metrics, a node agent
killed mid-run, a stream, a wait and the failed-login limit across the two API replicas, and
the Redis primary killed while a run streams and calls wait.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
import zipfile
from collections.abc import Callable
from typing import Any

import httpx

COMPOSE = ["docker-compose", "--file", "docker-compose.yml"]
SERVICES_WITH_WORKERS = ("control", "spark", "edge1", "edge2")
REDIS_SERVICES = ("redis", "redis-replica")
# The address each Redis service has on the fleet's network (docker-compose.yml), which is how
# the sentinels name the primary.
FLEET_NET = os.environ.get("SKILLFLEET_FLEET_NET", "172.29.76")
REDIS_ADDRESSES = {"redis": f"{FLEET_NET}.10", "redis-replica": f"{FLEET_NET}.11"}
# A new call works within this long of the primary's death.
FAILOVER_LIMIT = 30.0

WHERE = "import os, socket\nprint(os.environ['SKILLFLEET_RUN_ID'], socket.gethostname())\n"
SPARK = "import os, sys\nprint('spark', os.getuid(), sys.version_info[0])\n"
ASK = "print('approved and ran')\n"
SLOW = (
    "import os, time\n"
    "open('/data/slow-runs', 'a').write(os.environ['SKILLFLEET_RUN_ID'] + '\\n')\n"
    "print('started', flush=True)\n"
    "time.sleep(300)\n"
)


def say(text: str) -> None:
    print(f"compose-check: {text}", file=sys.stderr, flush=True)


def wait_until(check: Callable[[], Any], limit: float, what: str, every: float = 0.5) -> Any:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {limit:.0f} s waiting for {what}")


def compose(*arguments: str) -> str:
    done = subprocess.run(
        [*COMPOSE, *arguments], capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        raise AssertionError(f"docker-compose {' '.join(arguments)} failed: {done.stderr}")
    return done.stdout


def secret(name: str) -> str:
    return compose("exec", "-T", "api-1", "cat", f"/secrets/{name}").strip()


def redis_primary() -> str:
    """The Redis service that answers as the primary now."""
    for service in REDIS_SERVICES:
        try:
            if compose("exec", "-T", service, "redis-cli", "role").split()[:1] == ["master"]:
                return service
        except AssertionError:
            continue  # killed, or not up yet
    raise AssertionError("no Redis service answers as the primary")


def sentinels_name() -> str:
    """The primary's host as the sentinels give it (the first that answers)."""
    for service in ("sentinel-1", "sentinel-2", "sentinel-3"):
        try:
            found = compose(
                "exec", "-T", service, "redis-cli", "-p", "26379",
                "sentinel", "get-master-addr-by-name", "mymaster",
            )  # fmt: skip
        except AssertionError:
            continue
        if found.split():
            return found.split()[0]
    raise AssertionError("no sentinel names a primary")


def skill_zip(name: str, metadata: dict[str, str], script: str) -> bytes:
    header = "\n".join(f"    {key}: {value}" for key, value in metadata.items())
    skill_md = (
        f"---\nname: {name}\ndescription: Compose check {name}.\nmetadata:\n{header}\n---\n\n"
        f"# {name}\n\nRun the script.\n"
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(f"{name}/SKILL.md", skill_md)
        archive.writestr(f"{name}/scripts/main.py", script)
    return buffer.getvalue()


class Stack:
    def __init__(self, api: str, flower: str) -> None:
        self.owner = secret("owner.token")
        self.flower = flower
        self.client = httpx.Client(
            base_url=api, headers={"Authorization": f"Bearer {self.owner}"}, timeout=60
        )

    def import_skill(self, name: str, metadata: dict[str, str], script: str) -> None:
        data = skill_zip(name, metadata, script)
        response = self.client.post("/api/skills", files={"file": ("s.zip", data)})
        assert response.status_code == 201, response.text

    def ensure_skill(self, name: str, metadata: dict[str, str], script: str) -> None:
        """Import the skill unless an earlier check did (`--only` runs a check alone)."""
        if self.client.get(f"/api/skills/{name}").status_code == 404:
            self.import_skill(name, metadata, script)

    def call(self, skill: str, node: str | None = None, wait: int = 60) -> dict[str, Any]:
        arguments: dict[str, Any] = {"skill_name": skill, "script": "scripts/main.py"}
        arguments["arguments"] = {"node": node} if node else {}
        body = {"arguments": arguments, "chat_id": f"compose-{uuid.uuid4().hex[:8]}"}
        response = self.client.post("/api/tools/run_skill_script", params={"wait": wait}, json=body)
        assert response.status_code == 200, response.text
        return dict(response.json())

    def run(self, run_id: str) -> dict[str, Any]:
        response = self.client.get(f"/api/runs/{run_id}")
        assert response.status_code == 200, response.text
        return dict(response.json())

    def nodes_alive(self) -> set[str]:
        rows = self.client.get("/api/nodes").json()
        return {row["name"] for row in rows if row["alive"]}


def check_nodes(stack: Stack) -> None:
    wanted = {"edge1", "edge2", "spark"}
    wait_until(lambda: wanted <= stack.nodes_alive(), 180, f"{sorted(wanted)} alive")
    say("edge1, edge2 and the Spark are alive")


def check_launcher() -> None:
    """The node agents start scripts through skillfleet-launch, which the image carries."""
    code = "from workers.runners.node import LAUNCHER; print(LAUNCHER)"
    found = compose("exec", "-T", "edge1", "python3", "-c", code).strip()
    assert found == "/usr/local/bin/skillfleet-launch", found
    say(f"edge1 starts scripts through {found}")


def check_runs_by_node_name(stack: Stack) -> None:
    stack.import_skill("where", {"skillfleet.tier": "read"}, WHERE)
    for node in ("edge1", "edge2"):
        # A node agent syncs the new package within its sync interval: retry until it holds it.
        answer = wait_until(
            lambda node=node: _done(stack.call("where", node)), 120, f"a run on {node}", every=2
        )
        run = stack.run(answer["run_id"])
        assert run["stdout"].split() == [answer["run_id"], node], run
        say(f"ran on {node}: {run['stdout'].strip()}")


def check_spark(stack: Stack) -> None:
    stack.import_skill(
        "on-spark", {"skillfleet.tier": "read", "skillfleet.execution": "spark"}, SPARK
    )
    answer = wait_until(lambda: _done(stack.call("on-spark")), 120, "a Spark run", every=2)
    run = stack.run(answer["run_id"])
    assert run["stdout"] == "spark 65534 3\n", run
    assert run["isolation"] == "container", run
    say("a Spark run succeeded in its own container")


def check_approval(stack: Stack) -> None:
    stack.import_skill("ask-first", {"skillfleet.tier": "change"}, ASK)
    answer = stack.call("ask-first", "edge2", wait=0)
    assert answer["status"] == "pending_approval", answer
    decided = stack.client.post(
        f"/api/approvals/{answer['approval_id']}", json={"decision": "approve"}
    )
    assert decided.status_code == 200, decided.text

    def ended() -> dict[str, Any] | None:
        call = stack.client.get(f"/api/calls/{answer['call_id']}").json()
        return call if call["status"] in ("done", "failed", "denied") else None

    call = wait_until(ended, 120, "the approved call to end", every=1)
    assert call["status"] == "done", call
    assert stack.run(call["run_id"])["stdout"] == "approved and ran\n"
    say("an approved call ran")


STREAMS = 100  # of each: owner feeds, watchers of one run's output, calls waiting for the owner
TICKS = (
    "import time\nfor i in range(40):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.5)\n"
)


def check_many_streams(stack: Stack) -> None:
    """Hundreds of open streams and waiting calls on the API's live tier, and the API answers."""
    stack.import_skill("ticks", {"skillfleet.tier": "read"}, TICKS)
    stack.import_skill("ask-many", {"skillfleet.tier": "change"}, ASK)
    agents = [
        stack.client.post("/api/tokens", json={"role": "agent", "label": f"streams-{i}"}).json()
        for i in range(2)
    ]
    ticking = wait_until(lambda: _running(stack.call("ticks", "edge1", wait=0), stack), 120,
                         "a ticking run", every=2)  # fmt: skip
    seen = asyncio.run(_open_many(stack, ticking["run_id"], [a["token"] for a in agents]))
    assert seen["health"] == 200 and seen["tool"] == "done", seen
    assert seen["answers"] == ["done"] * STREAMS, seen["answers"]
    assert seen["ticks"] == [True] * STREAMS
    for agent in agents:
        stack.client.delete(f"/api/tokens/{agent['id']}")
    say(f"{3 * STREAMS} open streams and waiting calls: health and tool calls answered, "
        "every waiting call got its approved answer")  # fmt: skip


async def _open_many(stack: Stack, run_id: str, agents: list[str]) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=4 * STREAMS, max_keepalive_connections=0)

    def client(token: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=str(stack.client.base_url), limits=limits, timeout=120,
            headers={"Authorization": f"Bearer {token}"},
        )  # fmt: skip

    async with (
        client(stack.owner) as owner,
        client(agents[0]) as watcher,
        client(agents[1]) as waiter,
    ):
        opened = asyncio.Event()
        count = [0]

        async def feed() -> None:
            async with owner.stream("GET", "/api/events") as response:
                assert response.status_code == 200, response.status_code
                count[0] += 1
                if count[0] == STREAMS:
                    opened.set()
                async for _line in response.aiter_lines():
                    pass

        async def watch() -> bool:
            async with watcher.stream("GET", f"/api/runs/{run_id}/events") as response:
                assert response.status_code == 200, response.status_code
                async for line in response.aiter_lines():
                    if "tick 3" in line:
                        return True
            return False

        async def wait_call(index: int) -> str:
            arguments = {"skill_name": "ask-many", "script": "scripts/main.py"}
            arguments["arguments"] = {"node": "edge2"}
            body = {"arguments": arguments, "chat_id": f"many-{index}"}
            path = "/api/tools/run_skill_script"
            answer = await waiter.post(path, params={"wait": 60}, json=body)
            return str(answer.json()["status"])

        feeds = [asyncio.create_task(feed()) for _ in range(STREAMS)]
        watchers = [asyncio.create_task(watch()) for _ in range(STREAMS)]
        await asyncio.wait_for(opened.wait(), 60)
        waiters = [asyncio.create_task(wait_call(i)) for i in range(STREAMS)]
        pending: list[dict[str, Any]] = []
        deadline = time.monotonic() + 60
        while len(pending) < STREAMS and time.monotonic() < deadline:
            listed = await owner.get(
                "/api/approvals", params={"status": "pending", "page_size": 500}
            )
            pending = [a for a in listed.json() if a["tool"] == "run_skill_script"]
            await asyncio.sleep(0.5)
        health = (await owner.get("/api/health")).status_code
        tool = (await owner.post("/api/tools/list_skills", json={})).json()["status"]
        for approval in pending:
            await owner.post(f"/api/approvals/{approval['id']}", json={"decision": "approve"})
        answers = await asyncio.wait_for(asyncio.gather(*waiters), 120)
        ticks = await asyncio.wait_for(asyncio.gather(*watchers), 120)
        for task in feeds:
            task.cancel()
        await asyncio.gather(*feeds, return_exceptions=True)
    return {"health": health, "tool": tool, "answers": answers, "ticks": ticks}


def check_flower(stack: Stack) -> None:
    password = secret("flower.password")
    with httpx.Client(base_url=stack.flower, timeout=30) as client:
        refused = client.get("/api/workers")
        assert refused.status_code == 401, refused.status_code

        def workers() -> dict[str, Any] | None:
            response = client.get("/api/workers?refresh=1", auth=("admin", password))
            assert response.status_code == 200, response.status_code
            found = response.json()
            return found if len(found) >= len(SERVICES_WITH_WORKERS) else None

        names = sorted(wait_until(workers, 90, "Flower to list every worker", every=2))
        for label in ("control-", "spark-", "node-edge1-", "node-edge2-"):
            assert any(name.startswith(label) for name in names), names

        # A run made now, while Flower watches: its task is named for the run and its queue.
        run_id = _done(stack.call("where", "edge2"))["run_id"]

        def run_task() -> dict[str, Any] | None:
            tasks = client.get("/api/tasks", auth=("admin", password)).json()
            mine = [t for t in tasks.values() if t.get("name") == f"run {run_id} on node.edge2"]
            return mine[0] if mine else None

        task = wait_until(run_task, 60, f"Flower to show the task of run {run_id}", every=2)
        # The message carries the run id only: no script arguments, no secrets.
        assert task.get("args") in (f"['{run_id}']", f"('{run_id}',)"), task
        assert task.get("kwargs") in ("{}", None), task
    say(f"Flower: 401 without credentials; workers {names}; task {task['name']!r} {task['args']}")


def check_inspect_ping() -> None:
    output = compose("exec", "-T", "control", "celery", "-A", "relay.app", "inspect", "ping")
    answered = re.findall(r"^->\s+(\S+): OK$", output, flags=re.MULTILINE)
    for label in ("control-", "spark-", "node-edge1-", "node-edge2-"):
        assert any(name.startswith(label) for name in answered), output
    say("celery inspect ping: every worker answers")


def check_metrics(stack: Stack) -> None:
    first = stack.client.get("/metrics")
    assert first.status_code == 200, first.text
    content_type = first.headers["content-type"]
    assert content_type.startswith("text/plain; version="), first.headers
    text = first.text
    for name in (
        "skillfleet_tool_calls_total",
        "skillfleet_policy_decisions_total",
        "skillfleet_approvals_waiting",
        "skillfleet_runs_total",
        "skillfleet_run_duration_seconds_bucket",
        "skillfleet_run_queue_wait_seconds_bucket",
        "skillfleet_queue_depth",
        "skillfleet_node_heartbeat_age_seconds",
        "skillfleet_sse_streams_open",
    ):
        assert name in text, f"{name} missing from /metrics"
    # Every gunicorn worker answers with the same totals.
    scrapes = [stack.client.get("/metrics", headers={"Connection": "close"}) for _ in range(6)]
    assert {scrape.headers["content-type"] for scrape in scrapes} == {content_type}
    totals = {_sample(scrape.text, "skillfleet_runs_total") for scrape in scrapes}
    assert len(totals) == 1, totals
    say(f"/metrics: every metric present; runs total {totals.pop()} on every scrape")


def check_killed_node(stack: Stack) -> None:
    stack.import_skill("slow", {"skillfleet.tier": "read"}, SLOW)
    answer = wait_until(
        lambda: _running(stack.call("slow", "edge1", wait=0), stack), 120, "a slow run", every=2
    )
    run_id = answer["run_id"]
    wait_until(lambda: stack.run(run_id)["status"] == "running", 60, "the slow run to start")
    compose("kill", "edge1")
    run = wait_until(
        lambda: (r := stack.run(run_id))["status"] not in ("queued", "running") and r,
        60,
        "the killed run to end",
    )
    assert run["status"] == "interrupted", run
    compose("start", "edge1")
    wait_until(lambda: "edge1" in stack.nodes_alive(), 120, "edge1 back")
    # Past the visibility timeout the unacknowledged message comes back; the claim refuses it.
    time.sleep(20)
    assert stack.run(run_id)["status"] == "interrupted"
    started = compose("exec", "-T", "edge1", "cat", "/data/slow-runs").split()
    assert started.count(run_id) == 1, started
    events = compose(
        "exec", "-T", redis_primary(), "redis-cli", "--raw", "XRANGE",
        f"skillfleet:run:{run_id}:events", "-", "+",
    )  # fmt: skip
    assert events.split().count("exit") == 1, events
    say("edge1 killed mid-run: the run is interrupted, exactly once")


# Run inside the compose network (the control container, the app image): the replicas'
# own addresses, which the host can't reach. Prints one JSON object.
ACROSS_REPLICAS = r"""
import json, sys, threading, time
import httpx

owner, run_id, skill = sys.argv[1], sys.argv[2], sys.argv[3]
one, two = "http://api-1:8750", "http://api-2:8750"
auth = {"Authorization": f"Bearer {owner}"}
found = {}

# A stream followed on api-1, resumed on api-2 from the last entry api-1 sent.
def follow(base, headers, until):
    seen = []
    with httpx.stream("GET", f"{base}/api/runs/{run_id}/events", headers=headers,
                      timeout=60) as response:
        assert response.status_code == 200, response.status_code
        entry = None
        for line in response.iter_lines():
            if line.startswith("id:"):
                entry = line[3:].strip()
            elif line.startswith("data:"):
                seen.append((entry, line[5:].strip()))
                if until(seen):
                    break
    return seen

first = follow(one, auth, lambda seen: sum("tick" in d for _, d in seen) >= 3)
last_id = first[-1][0]
second = follow(two, {**auth, "Last-Event-ID": last_id},
                lambda seen: any("tick" in d for _, d in seen))
found["stream"] = {"first": [d for _, d in first], "second": [d for _, d in second],
                   "ids": [e for e, _ in first + second]}

# A wait held by api-1, its approval answered on api-2.
answer = {}
def wait():
    body = {"arguments": {"skill_name": skill, "script": "scripts/main.py",
                          "arguments": {"node": "edge2"}}, "chat_id": "across-replicas"}
    response = httpx.post(f"{one}/api/tools/run_skill_script", params={"wait": 60},
                          json=body, headers=auth, timeout=90)
    result = response.json()
    # A wait that ran out before the approval came: wait again on the call, on api-1.
    while response.status_code == 200 and result.get("status") in (
            "deciding", "pending_approval", "running") and result.get("call_id"):
        response = httpx.get(f"{one}/api/calls/{result['call_id']}", params={"wait": 60},
                             headers=auth, timeout=90)
        result = response.json()
    answer.update(code=response.status_code, body=result)
waiter = threading.Thread(target=wait)
waiter.start()
deadline = time.monotonic() + 60
approved = None
while approved is None and time.monotonic() < deadline:
    pending = httpx.get(f"{two}/api/approvals", params={"status": "pending"}, headers=auth,
                        timeout=30).json()
    mine = [a for a in pending if a.get("chat_id") == "across-replicas"] or [
        a for a in pending if a["tool"] == "run_skill_script"]
    if mine:
        approved = httpx.post(f"{two}/api/approvals/{mine[0]['id']}",
                              json={"decision": "approve"}, headers=auth, timeout=30).status_code
    time.sleep(0.5)
waiter.join(120)
found["wait"] = {"approved": approved, "code": answer.get("code"),
                 "status": (answer.get("body") or {}).get("status")}

# Wrong tokens counted across both: the limit (SKILLFLEET_AUTH_FAILURES, 20) is reached by
# ten on each, and the next request on either is refused.
bad = {"Authorization": "Bearer sf_wrong_token_across_replicas"}
codes = [httpx.get(f"{base}/api/skills", headers=bad, timeout=30).status_code
         for _ in range(10) for base in (one, two)]
time.sleep(1)  # the lockout reaches the other replica through Redis's pub/sub
found["auth"] = {"codes": codes,
                 "after": [httpx.get(f"{base}/api/skills", headers=bad, timeout=30).status_code
                           for base in (one, two)]}
print(json.dumps(found))
"""


def check_replicas(stack: Stack) -> None:
    """A stream, a wait and the failed-login limit across api-1 and api-2."""
    ticking = wait_until(lambda: _running(stack.call("ticks", "edge2", wait=0), stack), 120,
                         "a ticking run", every=2)  # fmt: skip
    output = compose(
        "exec", "-T", "control", "python3", "-c", ACROSS_REPLICAS, stack.owner,
        ticking["run_id"], "ask-many",
    )  # fmt: skip
    found = json.loads(output.strip().splitlines()[-1])
    stream = found["stream"]
    ids = stream["ids"]
    assert ids == sorted(ids, key=_entry_key) and len(ids) == len(set(ids)), stream
    first_ticks = [tick for d in stream["first"] for tick in _ticks(d)]
    second_ticks = [tick for d in stream["second"] for tick in _ticks(d)]
    assert first_ticks and second_ticks and second_ticks[0] == first_ticks[-1] + 1, stream
    assert found["wait"] == {"approved": 200, "code": 200, "status": "done"}, found["wait"]
    codes, after = found["auth"]["codes"], found["auth"]["after"]
    assert set(codes) == {401}, codes
    assert after == [429, 429], after
    say(f"across api-1 and api-2: a stream resumed (ticks {first_ticks[-1]} then "
        f"{second_ticks[0]}), a wait answered after an approval on the other, wrong tokens "
        "counted once for both")  # fmt: skip


ONCE = (
    "import os, time\n"
    "open('/data/failover-runs', 'a').write(os.environ['SKILLFLEET_RUN_ID'] + '\\n')\n"
    "for i in range(30):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.5)\n"
)
WAITERS = 5


def check_redis_failover(stack: Stack) -> None:
    """Kill the Redis primary while a run streams and calls wait for their approvals."""
    stack.ensure_skill("ticks-once", {"skillfleet.tier": "read"}, ONCE)
    stack.ensure_skill("where", {"skillfleet.tier": "read"}, WHERE)
    stack.ensure_skill("ask-many", {"skillfleet.tier": "change"}, ASK)
    primary = redis_primary()
    replica = next(service for service in REDIS_SERVICES if service != primary)
    answer = wait_until(
        lambda: _running(stack.call("ticks-once", "edge1", wait=0), stack), 120,
        "a ticking run", every=2,
    )  # fmt: skip
    run_id = answer["run_id"]
    stream: dict[str, Any] = {"events": [], "reconnects": 0}
    follower = threading.Thread(target=_follow, args=(stack, run_id, stream), daemon=True)
    follower.start()
    answers: list[dict[str, Any]] = []
    waiters = [
        threading.Thread(target=_wait_call, args=(stack, f"failover-{i}", answers), daemon=True)
        for i in range(WAITERS)
    ]
    for waiter in waiters:
        waiter.start()

    def pending() -> list[dict[str, Any]] | None:
        listed = stack.client.get("/api/approvals", params={"status": "pending"}).json()
        mine = [a for a in listed if a["tool"] == "run_skill_script"]
        return mine if len(mine) >= WAITERS else None

    approvals = wait_until(pending, 60, f"{WAITERS} calls waiting for approval")
    wait_until(lambda: len(stream["events"]) >= 3, 60, "the run's stream to flow")
    killed_at = time.monotonic()
    compose("kill", primary)
    say(f"killed the Redis primary ({primary}) while a run streams and {WAITERS} calls wait")
    wait_until(lambda: sentinels_name() == REDIS_ADDRESSES[replica], 30,
               "the sentinels to fail over")  # fmt: skip
    wait_until(lambda: redis_primary() == replica, 30, f"{replica} to answer as the primary")
    promoted = time.monotonic() - killed_at

    def answered(approval: dict[str, Any]) -> bool:
        try:
            response = stack.client.post(
                f"/api/approvals/{approval['id']}", json={"decision": "approve"}
            )
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    for approval in approvals:
        wait_until(lambda approval=approval: answered(approval), FAILOVER_LIMIT,
                   "an approval to be answered after the failover")  # fmt: skip
    new_call = wait_until(lambda: _new_call(stack), FAILOVER_LIMIT, "a new call to work")
    worked = time.monotonic() - killed_at
    assert worked <= FAILOVER_LIMIT, worked
    for waiter in waiters:
        waiter.join(120)
    assert [a.get("status") for a in answers] == ["done"] * WAITERS, answers
    follower.join(120)
    assert not follower.is_alive(), stream
    exits = [e for e in stream["events"] if e[1] == "exit"]
    assert len(exits) == 1, stream
    run = wait_until(
        lambda: (r := stack.run(run_id))["status"] not in ("queued", "running") and r,
        60, "the run to end",
    )  # fmt: skip
    assert run["status"] in ("succeeded", "interrupted"), run
    time.sleep(20)  # past the visibility timeout: a message back from Redis finds it ended
    assert stack.run(run_id)["status"] == run["status"]
    started = compose("exec", "-T", "edge1", "cat", "/data/failover-runs").split()
    assert started.count(run_id) == 1, started
    compose("start", primary)
    wait_until(lambda: _role(primary) == "slave", 60, f"{primary} back as a replica")
    say(f"Redis primary killed: {replica} promoted after {promoted:.1f} s, a new call worked "
        f"after {worked:.1f} s ({new_call}), every waiting call answered, the run ended "
        f"{run['status']} once, its stream resumed {stream['reconnects']} time(s) and ended; "
        f"{primary} came back as a replica")  # fmt: skip


def _follow(stack: Stack, run_id: str, stream: dict[str, Any]) -> None:
    """Follow a run's stream to its exit, resuming with Last-Event-ID whenever it breaks."""
    last: str | None = None
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        headers = {"Last-Event-ID": last} if last else {}
        try:
            with stack.client.stream(
                "GET", f"/api/runs/{run_id}/events", headers=headers, timeout=60
            ) as response:
                if response.status_code != 200:
                    raise httpx.HTTPError(str(response.status_code))
                entry, kind = None, None
                for line in response.iter_lines():
                    if line.startswith("id:"):
                        entry = line[3:].strip()
                    elif line.startswith("event:"):
                        kind = line[6:].strip()
                    elif line.startswith("data:"):
                        stream["events"].append((entry, kind, line[5:].strip()))
                        last = entry or last
                        if kind == "exit":
                            return
        except httpx.HTTPError:
            pass
        stream["reconnects"] += 1
        time.sleep(1)


def _wait_call(stack: Stack, chat: str, answers: list[dict[str, Any]]) -> None:
    arguments = {"skill_name": "ask-many", "script": "scripts/main.py",
                 "arguments": {"node": "edge2"}}  # fmt: skip
    body = {"arguments": arguments, "chat_id": chat}
    with httpx.Client(base_url=str(stack.client.base_url), timeout=90,
                      headers={"Authorization": f"Bearer {stack.owner}"}) as client:  # fmt: skip
        response = client.post("/api/tools/run_skill_script", params={"wait": 60}, json=body)
        answer = response.json() if response.status_code == 200 else {"code": response.status_code}
        # A wait that ran out before the approval came answers the call as it stands: wait again.
        while answer.get("status") in ("deciding", "pending_approval", "running") and answer.get(
            "call_id"
        ):
            again = client.get(f"/api/calls/{answer['call_id']}", params={"wait": 60})
            if again.status_code != 200:
                answer = {"code": again.status_code}
                break
            answer = {**answer, "status": again.json()["status"]}
    answers.append(answer)


def _new_call(stack: Stack) -> str | None:
    try:
        answer = stack.call("where", "edge2", wait=20)
    except (AssertionError, httpx.HTTPError):
        return None
    return str(answer["run_id"]) if answer["status"] == "done" else None


def _role(service: str) -> str | None:
    try:
        return compose("exec", "-T", service, "redis-cli", "role").split()[0]
    except (AssertionError, IndexError):
        return None


def _entry_key(entry: str) -> tuple[int, int]:
    ms, _, seq = entry.partition("-")
    return int(ms), int(seq or 0)


def _ticks(data: str) -> list[int]:
    """The tick numbers in one entry's data (an entry may carry several lines)."""
    return [int(n) for n in re.findall(r"tick (\d+)", data)]


def _done(answer: dict[str, Any]) -> dict[str, Any] | None:
    if answer["status"] == "done":
        return answer
    error = json.dumps(answer.get("error") or {})
    if "package" in error or "not_held" in error or "no node agent" in error:
        return None  # the node has not synced the new skill yet
    raise AssertionError(answer)


def _running(answer: dict[str, Any], stack: Stack) -> dict[str, Any] | None:
    if answer["status"] == "running":
        return answer
    return _done(answer)


def _sample(text: str, name: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--api", required=True)
    parser.add_argument("--flower", required=True)
    parser.add_argument(
        "--only", default="", help="comma-separated check names (nodes,replicas,...): just these"
    )
    options = parser.parse_args()
    wait_until(lambda: _answers(options.api + "/api/health"), 180, "the API to answer", every=1)
    stack = Stack(options.api, options.flower)
    checks: dict[str, Callable[[], None]] = {
        "nodes": lambda: check_nodes(stack),
        "launcher": check_launcher,
        "runs_by_node_name": lambda: check_runs_by_node_name(stack),
        "spark": lambda: check_spark(stack),
        "approval": lambda: check_approval(stack),
        "many_streams": lambda: check_many_streams(stack),
        "killed_node": lambda: check_killed_node(stack),
        "inspect_ping": check_inspect_ping,
        "flower": lambda: check_flower(stack),
        "metrics": lambda: check_metrics(stack),
        "replicas": lambda: check_replicas(stack),
        "redis_failover": lambda: check_redis_failover(stack),
    }
    chosen = [name for name in options.only.split(",") if name] or list(checks)
    unknown = sorted(set(chosen) - set(checks))
    if unknown:
        parser.error(f"no such check: {', '.join(unknown)} (one of {', '.join(checks)})")
    if chosen[0] != "nodes":
        check_nodes(stack)  # every other check needs the nodes alive
    for name in chosen:
        checks[name]()
    return 0


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    sys.exit(main())

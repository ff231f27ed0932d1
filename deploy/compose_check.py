"""Checks a running docker-compose deployment the way its users would (deploy/compose-test.sh).

Every step talks to the stack through its published loopback ports or `docker-compose exec`:
scripts on edge1 and edge2 by node name, a Spark run, an approval answered over REST, a few
hundred open streams and waiting calls, Flower behind basic auth, /metrics, and a node agent
killed mid-run.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import re
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import Callable
from typing import Any

import httpx

COMPOSE = ["docker-compose", "--file", "docker-compose.yml"]
SERVICES_WITH_WORKERS = ("control", "spark", "edge1", "edge2")

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
    return compose("exec", "-T", "api", "cat", f"/secrets/{name}").strip()


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
        "exec", "-T", "redis", "redis-cli", "--raw", "XRANGE", f"skillfleet:run:{run_id}:events",
        "-", "+",
    )  # fmt: skip
    assert events.split().count("exit") == 1, events
    say("edge1 killed mid-run: the run is interrupted, exactly once")


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
    options = parser.parse_args()
    wait_until(lambda: _answers(options.api + "/api/health"), 180, "the API to answer", every=1)
    stack = Stack(options.api, options.flower)
    check_nodes(stack)
    check_launcher()
    check_runs_by_node_name(stack)
    check_spark(stack)
    check_approval(stack)
    check_many_streams(stack)
    check_killed_node(stack)
    check_inspect_ping()
    check_flower(stack)
    check_metrics(stack)
    return 0


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: the API with many long-lived connections open, against the same API idle.

Run with `python bench/streams.py [--sizes 500,2000]`. It starts a real `skillfleet api`
(gunicorn, two uvicorn workers) and a node worker on a temporary SQLite data dir and the Redis at
REDIS_URL (default redis://127.0.0.1:6379/13), then, first with nothing open (the idle figures)
and then with each size of open connections (a third each: owner feeds, watchers of running
scripts' output, tool calls waiting for the owner's answer):

- `GET /api/health`: p50 and p99 of sequential requests, and the ratio to idle;
- a `list_skills` call: p50, and the ratio to idle;
- output lines: from a script printing a line (its own timestamp) to each watcher receiving it,
  p50 and p99 over every watcher and line;
- answers: from the owner answering an approval (deny) to its waiting call returning, p50/p99;
- memory: the API workers' resident memory per open connection;
- revocation: from deleting a token to the end of each of its 100 open feeds.

The clients are raw asyncio connections in this process (an SSE line or a JSON answer needs no
more), so the figures measure the server, not an HTTP library. This process collects its
garbage only between sizes: a full collection over thousands of connections' objects stops
every watcher at once for 30-50 ms, and was counted as the server's line latency.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.runs import free_port, skill_zip  # noqa: E402

SKILLFLEET = [sys.executable, "-m", "skillfleet"]
NODE = f"bench-{os.getpid()}"
JSON_TYPE = {"Content-Type": "application/json"}
PER_TOKEN = 150  # under the default limit of 200 streams per token
HEALTH_SAMPLES = 200
TOOL_SAMPLES = 50
WATCHED_RUNS = 8
WATCHERS_CONNECT = 8.0  # seconds the watched scripts wait before their first line
LINES = 20
# The watched script waits for its watchers to connect, then prints a stamped line 10 times a s.
STAMPED = (
    "import json, os, time\n"
    "time.sleep(json.loads(os.environ.get('SKILLFLEET_ARGS') or '{}').get('delay', 0))\n"
    f"for _ in range({LINES}):\n"
    "    print(repr(time.time()), flush=True)\n"
    "    time.sleep(0.1)\n"
)
DATA = re.compile(rb"data: (\{[^\n]*\})\n")


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000


class System:
    """`skillfleet api` and a node worker as real processes on a temporary data dir."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("SKILLFLEET_")},
            "SKILLFLEET_DATA_DIR": str(root / "var"),
            "SKILLFLEET_PORT": str(self.port),
            "SKILLFLEET_URL": self.url,
            "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/13"),
            "PYTHONPATH": str(ROOT),
        }
        self.processes: list[subprocess.Popen[bytes]] = []

    def cli(self, *arguments: str, env: dict[str, str] | None = None) -> str:
        result = subprocess.run(
            [*SKILLFLEET, *arguments], env=env or self.env, check=True, capture_output=True,
            text=True,
        )  # fmt: skip
        return result.stdout.strip().splitlines()[-1]

    def start(self, *arguments: str, env: dict[str, str] | None = None) -> None:
        log = open(self.root / f"{arguments[0]}.log", "wb")  # noqa: SIM115
        self.processes.append(
            subprocess.Popen([*SKILLFLEET, *arguments], env=env or self.env, stdout=log, stderr=log)
        )

    def __enter__(self) -> System:
        self.cli("db", "upgrade")
        # The feeds are another owner's (quiet but for keepalives): each waiting call's approval
        # would otherwise go to every feed, a load of its own.
        self.feed_tokens = [
            self.cli("tokens", "create", "--owner", f"{NODE}-feeds", "--role", "owner")
            for _ in range(6)
        ]
        self.agent_tokens = [
            self.cli("tokens", "create", "--owner", NODE, "--role", "agent") for _ in range(12)
        ]
        owner = self.cli("tokens", "create", "--owner", NODE, "--role", "owner")
        self.headers = {"Authorization": f"Bearer {owner}"}
        key = self.cli("keys", "show")
        self.start("api", "--workers", "2")
        self._wait(lambda: httpx.get(f"{self.url}/api/health").status_code == 200)
        node_env = dict(self.env, SKILLFLEET_MANIFEST_KEY=key)
        node_env["SKILLFLEET_NODE_TOKEN"] = self.cli("nodes", "add", NODE, "--owner", NODE)
        self.start("worker", "node", "--name", NODE, "--concurrency", "16", env=node_env)
        self._wait(self._node_ready)
        for name, tier in (("stamped", "read"), ("wiper", "destructive")):
            data = skill_zip(name, "node", {"scripts/run.py": STAMPED}, tier)
            answer = httpx.post(
                f"{self.url}/api/skills", headers=self.headers, files={"file": ("s.zip", data)}
            )
            assert answer.status_code == 201, answer.text
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()

    def api_memory(self) -> int:
        """Resident bytes of the API's worker processes (gunicorn's children)."""
        total = 0
        for child in psutil.Process(self.processes[0].pid).children(recursive=True):
            total += child.memory_info().rss
        return total

    def _node_ready(self) -> bool:
        nodes = httpx.get(f"{self.url}/api/nodes", headers=self.headers).json()
        return any(n["name"] == NODE and n.get("alive") for n in nodes)

    def _wait(self, check: Any, limit: float = 60) -> None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            try:
                if check():
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("the system did not start; see the logs in " + str(self.root))


@dataclass
class Connection(asyncio.Protocol):
    """One raw HTTP/1.1 connection: what it received, and when."""

    buffer: bytes = b""
    received: bytes = b""
    status: int = 0
    opened_at: float = 0.0
    ended: asyncio.Future[float] | None = None
    lines: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        now = time.time()
        self.buffer += data
        self.received += data
        if not self.status and b"\r\n" in self.buffer:
            self.status = int(self.buffer.split(b" ", 2)[1])
            self.opened_at = now
        for match in DATA.finditer(self.buffer):
            self.lines.append((now, json.loads(match[1])))
        cut = self.buffer.rfind(b"\n")
        tail = self.buffer[cut + 1 :]
        ended = self.buffer.endswith(b"0\r\n\r\n")
        self.buffer = tail
        if ended and self.ended is not None and not self.ended.done():
            self.ended.set_result(now)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.ended is not None and not self.ended.done():
            self.ended.set_result(time.time())


async def open_connection(
    port: int, method: str, path: str, token: str, body: bytes = b""
) -> Connection:
    loop = asyncio.get_running_loop()
    _, connection = await loop.create_connection(Connection, "127.0.0.1", port)
    connection.ended = loop.create_future()
    request = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    connection.transport.write(request + body)
    return connection


async def timed_requests(system: System, count: int, method: str, path: str, body: Any) -> list:
    samples = []
    async with httpx.AsyncClient(base_url=system.url, headers=system.headers, timeout=60) as client:
        for _ in range(count):
            started = time.perf_counter()
            answer = await client.request(method, path, json=body)
            samples.append(time.perf_counter() - started)
            assert answer.status_code == 200, answer.text
    return samples


async def idle_figures(system: System) -> dict[str, float]:
    health = await timed_requests(system, HEALTH_SAMPLES, "GET", "/api/health", None)
    tool = await timed_requests(system, TOOL_SAMPLES, "POST", "/api/tools/list_skills", {})
    return {
        "health_p50": pct(health, 0.5),
        "health_p99": pct(health, 0.99),
        "tool_p50": statistics.median(tool) * 1000,
    }


def call_body(skill: str, chat: str, delay: float = 0) -> bytes:
    script_arguments = {"node": NODE, "delay": delay}
    arguments = {"skill_name": skill, "script": "scripts/run.py", "arguments": script_arguments}
    return json.dumps({"arguments": arguments, "chat_id": chat}).encode()


async def loaded_figures(system: System, size: int) -> dict[str, float]:
    third = size // 3
    memory_before = system.api_memory()
    port = system.port
    feeds = [
        await open_connection(port, "GET", "/api/events", system.feed_tokens[i // PER_TOKEN])
        for i in range(third)
    ]
    waiters = []
    for i in range(third):
        body = call_body("wiper", f"bench-wait-{size}-{i}")
        token = system.agent_tokens[i // PER_TOKEN]
        waiters.append(
            await open_connection(port, "POST", "/api/tools/run_skill_script?wait=60", token, body)
        )
    await all_asked(system, len(waiters))  # the burst of calls answered: the API is quiet again
    # The watched runs start, and every watcher follows one of them from its first line.
    async with httpx.AsyncClient(
        base_url=system.url, headers=system.headers, timeout=120
    ) as client:
        runs = []
        for i in range(WATCHED_RUNS):
            body = call_body("stamped", f"bench-watch-{size}-{i}", delay=WATCHERS_CONNECT)
            answer = await client.post(
                "/api/tools/run_skill_script", content=body, headers=JSON_TYPE
            )
            assert "run_id" in answer.json(), answer.text
            runs.append(answer.json()["run_id"])
    watchers = [
        await open_connection(
            port,
            "GET",
            f"/api/runs/{runs[i % WATCHED_RUNS]}/events",
            system.agent_tokens[6 + i // PER_TOKEN],
        )
        for i in range(size - 2 * third)
    ]
    opened = feeds + waiters + watchers
    await asyncio.sleep(1)
    refused = [c.status for c in opened if c.status not in (0, 200)]
    assert not refused, f"{len(refused)} connections refused: {refused[:5]}"
    memory_after = system.api_memory()
    loaded = await idle_figures(system)
    # Every watcher gets every line; then the owner answers each waiting call.
    await asyncio.wait_for(asyncio.gather(*(w.ended for w in watchers if w.ended is not None)), 120)
    latencies = [
        received - float(data["text"])
        for watcher in watchers
        for received, data in watcher.lines
        if "text" in data and data["text"].strip().replace(".", "").isdigit()
    ]
    expected = LINES * len(watchers)
    assert len(latencies) == expected, (len(latencies), expected)
    late = min(float(d["text"]) for w in watchers for _, d in w.lines if "text" in d)
    assert max(w.opened_at for w in watchers) < late, "watchers connected after the first line"
    answers = await answer_all(system, size, waiters)
    for connection in opened:
        connection.transport.close()
    return {
        **loaded,
        "open": len(opened),
        "line_p50": pct(latencies, 0.5),
        "line_p99": pct(latencies, 0.99),
        "answer_p50": pct(answers, 0.5),
        "answer_p99": pct(answers, 0.99),
        "answer_max": max(answers) * 1000,
        "kib_per_connection": (memory_after - memory_before) / len(opened) / 1024,
    }


async def all_asked(system: System, count: int) -> list[dict[str, Any]]:
    """The pending approvals, once there are `count` of them."""
    async with httpx.AsyncClient(
        base_url=system.url, headers=system.headers, timeout=120
    ) as client:
        pending: list[dict[str, Any]] = []
        deadline = time.monotonic() + 180
        while len(pending) < count and time.monotonic() < deadline:
            listed = await client.get(
                "/api/approvals", params={"status": "pending", "page_size": 1000}
            )
            pending = listed.json()
            await asyncio.sleep(0.5)
    assert len(pending) >= count, (len(pending), count)
    return pending


async def answer_all(system: System, size: int, waiters: list[Connection]) -> list[float]:
    """Deny every approval the waiting calls asked for; the time from each answer to its
    call's return."""
    pending = await all_asked(system, len(waiters))
    async with httpx.AsyncClient(
        base_url=system.url, headers=system.headers, timeout=120
    ) as client:
        answered_at: dict[str, float] = {}
        for approval in pending:
            answered_at[approval["call_id"]] = time.time()
            answer = await client.post(
                f"/api/approvals/{approval['id']}", json={"decision": "deny"}
            )
            assert answer.status_code == 200, answer.text
    await asyncio.wait_for(asyncio.gather(*(w.ended for w in waiters if w.ended)), 60)
    delays = []
    for waiter in waiters:
        assert waiter.ended is not None
        body = waiter.received.decode(errors="replace")
        call_id = re.search(r'"call_id":"([^"]+)"', body)
        assert call_id, body[-300:]
        delays.append(waiter.ended.result() - answered_at[call_id[1]])
    return delays


async def revocation_figures(system: System, count: int = 100) -> dict[str, float]:
    """`count` feeds of one token, the token deleted: from the deletion to each feed's end."""
    async with httpx.AsyncClient(base_url=system.url, headers=system.headers) as client:
        made = (await client.post("/api/tokens", json={"role": "owner", "label": "tab"})).json()
        feeds = [
            await open_connection(system.port, "GET", "/api/events", made["token"])
            for _ in range(count)
        ]
        await asyncio.sleep(1)
        assert all(feed.status == 200 for feed in feeds)
        deleted_at = time.time()
        assert (await client.delete(f"/api/tokens/{made['id']}")).status_code == 204
    ended = await asyncio.wait_for(asyncio.gather(*(f.ended for f in feeds if f.ended)), 60)
    delays = [when - deleted_at for when in ended]
    return {"revoked_p50": pct(delays, 0.5), "revoked_max": max(delays) * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="500,2000")
    sizes = [int(size) for size in parser.parse_args().sizes.split(",")]
    gc.disable()  # the clients' pauses are no figure of the server's (collected between sizes)
    with tempfile.TemporaryDirectory(prefix="bench-streams-") as folder, System(Path(folder)) as s:
        idle = asyncio.run(idle_figures(s))
        rows = [("idle", idle)]
        print("idle", json.dumps(idle), flush=True)
        for size in sizes:
            gc.collect()
            rows.append((str(size), asyncio.run(loaded_figures(s, size))))
            print(size, json.dumps(rows[-1][1]), flush=True)
        gc.collect()
        revoked = asyncio.run(revocation_figures(s))
    print(
        f"{'open':>6} {'health p50':>11} {'p99':>7} {'x idle':>7} {'list_skills':>12} "
        f"{'x idle':>7} {'line p50':>9} {'p99':>7} {'answer p50':>11} {'p99':>7} {'KiB/conn':>9}"
    )
    for label, row in rows:
        print(
            f"{label:>6} {row['health_p50']:>9.2f}ms {row['health_p99']:>5.2f}ms "
            f"{row['health_p99'] / idle['health_p99']:>6.2f}x {row['tool_p50']:>10.2f}ms "
            f"{row['tool_p50'] / idle['tool_p50']:>6.2f}x "
            + (
                f"{row['line_p50']:>7.1f}ms {row['line_p99']:>5.1f}ms "
                f"{row['answer_p50']:>9.1f}ms {row['answer_p99']:>5.1f}ms "
                f"{row['kib_per_connection']:>9.1f}"
                if "line_p50" in row
                else ""
            )
        )
    print(
        f"a deleted token's 100 open feeds ended {revoked['revoked_p50']:.0f} ms (p50), "
        f"{revoked['revoked_max']:.0f} ms (max) after the deletion"
    )
    print(json.dumps({**{label: row for label, row in rows}, "revoked": revoked}))


if __name__ == "__main__":
    main()

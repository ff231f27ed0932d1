"""Two API processes behind one address behave as one: a stream resumed on the other process, a
wait held by one answered when the other approves its call, wrong tokens counted for both.

The proxy is a plain TCP proxy (each connection to the next process in turn, or to the one a
test pins), as the compose deployment's HAProxy is in front of its two API containers; the
processes share the database and Redis and nothing else.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import re
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import TLS
from fleet import Fleet, LiveServer, fleet, sqlite_settings, wait_until

from api import create_app
from api.services import Services

pytestmark = pytest.mark.fleet

NODE = "replicas-node"
READ_NODE = {"skillfleet.tier": "read", "skillfleet.execution": "node"}
CHANGE_NODE = {"skillfleet.tier": "change", "skillfleet.execution": "node"}
TICKS = 30
TICKER = (
    "import time\n"
    f"for i in range({TICKS}):\n"
    "    print(f'tick {i}', flush=True)\n"
    "    time.sleep(0.1)\n"
)


class Proxy:
    """Each connection goes to the next API process in turn, or to the pinned one."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports
        self.turns = itertools.count()
        self.pinned: int | None = None
        self.served: collections.Counter[int] = collections.Counter()
        self.loop = asyncio.new_event_loop()
        self.server = self.loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", 0)
        )
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """Close the listener and every connection still piped, then the loop: a pipe left
        pending would close its writer when collected, on a loop already closed."""

        async def shut() -> None:
            self.server.close()
            piping = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in piping:
                task.cancel()
            await asyncio.gather(*piping, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shut(), self.loop).result(timeout=5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        index = self.pinned if self.pinned is not None else next(self.turns) % len(self.ports)
        self.served[index] += 1
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(
                "127.0.0.1", self.ports[index]
            )
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        sink.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    folder = tmp_path_factory.mktemp("replicas")
    # The proxy stands for one that adds X-Forwarded-For (the test sends it, as HAProxy would).
    with fleet(sqlite_settings(folder, sqlite_template, trusted_proxies=1)) as running:
        running.start_node(NODE)
        running.import_skill("ticker", READ_NODE, {"scripts/main.py": TICKER})
        running.import_skill("asked", CHANGE_NODE, {"scripts/main.py": "print('approved')\n"})
        yield running


@pytest.fixture(scope="module")
def proxy(served: Fleet) -> Iterator[Proxy]:
    other = LiveServer(create_app(services=Services.build(served.settings)))
    found = Proxy([_port(served.url), _port(other.url)])
    yield found
    found.stop()
    other.stop()


def client(served: Fleet, proxy: Proxy, pinned: int | None, **headers: str) -> httpx.Client:
    """A client whose connections go through the proxy to process `pinned` (None: in turn)."""
    proxy.pinned = pinned
    auth = {"Authorization": f"Bearer {served.owner_token}", **headers}
    return httpx.Client(verify=TLS, base_url=proxy.url, headers=auth, timeout=60)


def call(skill: str) -> dict[str, Any]:
    arguments = {"skill_name": skill, "script": "scripts/main.py", "arguments": {"node": NODE}}
    return {"arguments": arguments, "chat_id": f"replicas-{uuid.uuid4().hex[:6]}"}


def test_a_stream_read_on_one_process_resumes_on_the_other(served: Fleet, proxy: Proxy):
    with client(served, proxy, 0) as first:
        run_id = first.post("/api/tools/run_skill_script", json=call("ticker")).json()["run_id"]
        before, last = read_events(first, run_id, None, stop_at_ticks=3)
    served_before = proxy.served[1]
    with client(served, proxy, 1) as second:
        after, _ = read_events(second, run_id, last, stop_at_ticks=None)
    assert proxy.served[1] > served_before  # the second part came from the other process
    ticks = [tick for _, _, data in before + after for tick in _ticks(data)]
    assert ticks == list(range(TICKS))  # none lost, none twice across the two processes
    assert [kind for _, kind, _ in before + after].count("exit") == 1
    ids = [entry for entry, _, _ in before + after]
    assert len(ids) == len(set(ids))


def test_a_wait_on_one_process_is_answered_when_the_other_approves(served: Fleet, proxy: Proxy):
    answer: dict[str, Any] = {}
    body = call("asked")

    def wait() -> None:
        with client(served, proxy, 0) as first:
            response = first.post("/api/tools/run_skill_script", params={"wait": 60}, json=body)
        answer.update(code=response.status_code, body=response.json())

    proxy.pinned, before = 0, proxy.served[0]
    waiter = threading.Thread(target=wait)
    waiter.start()
    # Its connection is made before the next client pins the other process.
    wait_until(lambda: proxy.served[0] > before, 10, "the wait to reach process 0")

    def pending(other: httpx.Client) -> dict[str, Any] | None:
        listed = other.get("/api/approvals", params={"status": "pending"}).json()
        mine = [a for a in listed if a["chat_id"] == body["chat_id"]]
        return mine[0] if mine else None

    with client(served, proxy, 1) as second:
        approval = wait_until(lambda: pending(second), 30, "the call's approval", every=0.1)
        decided = second.post(f"/api/approvals/{approval['id']}", json={"decision": "approve"})
        assert decided.status_code == 200, decided.text
    waiter.join(90)
    assert answer["code"] == 200 and answer["body"]["status"] == "done", answer


def test_wrong_tokens_through_either_process_count_toward_one_limit(served: Fleet, proxy: Proxy):
    address = f"198.51.100.{uuid.uuid4().int % 250 + 1}"
    limit = served.settings.auth_failures
    codes = []
    for turn in range(limit):
        with client(served, proxy, turn % 2, **{"X-Forwarded-For": address}) as either:
            either.headers["Authorization"] = "Bearer sf_not_a_token"
            codes.append(either.get("/api/skills").status_code)
    assert codes == [401] * limit
    for index in (0, 1):
        with client(served, proxy, index, **{"X-Forwarded-For": address}) as either:
            refused = wait_until(
                lambda either=either: either.get("/api/skills").status_code == 429, 5, "429"
            )
            assert refused
    assert proxy.served[0] and proxy.served[1]


def read_events(
    http: httpx.Client, run_id: str, last: str | None, stop_at_ticks: int | None
) -> tuple[list[tuple[str, str, str]], str | None]:
    """(id, kind, data) of the run's events after `last`, until the exit or until
    `stop_at_ticks` ticks were read; and the last id read."""
    headers = {"Last-Event-ID": last} if last else {}
    events: list[tuple[str, str, str]] = []
    with http.stream("GET", f"/api/runs/{run_id}/events", headers=headers) as response:
        assert response.status_code == 200, response.read()
        entry = kind = ""
        for line in response.iter_lines():
            if line.startswith("id:"):
                entry = line[3:].strip()
            elif line.startswith("event:"):
                kind = line[6:].strip()
            elif line.startswith("data:"):
                events.append((entry, kind, line[5:].strip()))
                last = entry
                ticks = sum(len(_ticks(data)) for _, _, data in events)
                if kind == "exit" or (stop_at_ticks is not None and ticks >= stop_at_ticks):
                    break
    return events, last


def _ticks(data: str) -> list[int]:
    return [int(n) for n in re.findall(r"tick (\d+)", data)]


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])

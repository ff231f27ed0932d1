"""Many waiting clients: open streams and long-polls served by the live tier (api/asgi.py) of a
real API under uvicorn, with a real node worker, Redis and database.

Hundreds of owner feeds, run watchers and waiting calls stay open while health, a tool call
and approvals still answer; every waiter gets its answer; a token's streams are capped, and
closing or revoking them frees everything.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import socket
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import REDIS_URL, TLS
from fleet import Fleet, fleet, wait_until

from api.bodyread import PREREAD_BUDGET_BYTES
from api.livejobs import kind_of
from relay import naming
from store.settings import Settings
from store.tokens import token_digest

pytestmark = [pytest.mark.redis, pytest.mark.fleet]

TICKER = (
    "import json, os, time\n"
    "args = json.loads(os.environ['SKILLFLEET_ARGS'])\n"
    "for i in range(args.get('count', 3)):\n"
    "    print(f'line {i}', flush=True)\n"
    "    time.sleep(args.get('every', 0))\n"
)
READ_NODE = {"skillfleet.tier": "read", "skillfleet.execution": "node"}
WRITE_NODE = {"skillfleet.tier": "destructive", "skillfleet.execution": "node"}
FEEDS, WATCHERS, WAITERS = 100, 100, 100


def settings_in(folder: Path, **limits: Any) -> Settings:
    """Settings of a fleet of this module's own: a fresh SQLite file, the test Redis."""
    from store.migrate import upgrade

    settings = Settings(
        data_dir=folder / "var",
        database_url=f"sqlite:///{folder / 'fleet.db'}",
        redis_url=REDIS_URL,
        **limits,
    )
    upgrade(settings.database)
    return settings


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    settings = settings_in(
        tmp_path_factory.mktemp("live"), stream_limit=FEEDS + 5, stream_keepalive=1
    )
    with fleet(settings) as started:
        node = f"live-{uuid.uuid4().hex[:6]}"
        started.start_node(node, concurrency=4)
        started.import_skill("ticker", READ_NODE, {"scripts/tick.py": TICKER})
        started.import_skill("wiper", WRITE_NODE, {"scripts/tick.py": TICKER})
        started.env["TEST_NODE"] = node
        yield started


def agent_token(running: Fleet) -> tuple[int, str]:
    with running.http() as client:
        made = client.post("/api/tokens", json={"role": "agent", "label": "live"}).json()
    return made["id"], made["token"]


def slots_of(running: Fleet, token: str) -> int:
    return int(running.redis.zcard(naming.stream_slots(token_digest(token))))


def tier(running: Fleet):  # the API's ASGI app, served in this process
    return running.server.tier


async def read_events(response: httpx.Response, count: int) -> list[dict]:
    """The first `count` data lines of an SSE response, as JSON."""
    found: list[dict] = []
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            found.append(json.loads(line[6:]))
            if len(found) == count:
                break
    return found


def run_call(node: str, skill: str, chat: str, **arguments: object) -> dict:
    return {
        "arguments": {
            "skill_name": skill,
            "script": "scripts/tick.py",
            "arguments": {"node": node, **arguments},
        },
        "chat_id": chat,
    }


def test_hundreds_of_open_streams_and_waits_leave_the_api_answering(running: Fleet):
    node = running.env["TEST_NODE"]
    feed_token = running.owner_token
    _, watch_token = agent_token(running)
    _, wait_token = agent_token(running)

    async def scenario() -> dict:
        limits = httpx.Limits(max_connections=1000, max_keepalive_connections=0)
        # Longer than the longest wait (60 s), so that a wait is always answered before its
        # client gives up: a client that gives up while its call waits withdraws its approval.
        timeout = httpx.Timeout(90)

        def client(token: str) -> httpx.AsyncClient:
            headers = {"Authorization": f"Bearer {token}"}
            return httpx.AsyncClient(
                base_url=running.url, headers=headers, limits=limits, timeout=timeout
            )

        async with (
            client(feed_token) as owner,
            client(watch_token) as watcher,
            client(wait_token) as waiter,
        ):

            async def follow_feed(ready: asyncio.Event) -> list[dict]:
                """The feed's events until it told of every waiting call's answer."""
                async with owner.stream("GET", "/api/events") as response:
                    assert response.status_code == 200
                    ready.set()
                    found: list[dict] = []
                    async for line in response.aiter_lines():
                        if line.startswith("data: "):
                            found.append(json.loads(line[6:]))
                            answered = [e for e in found if e.get("status") == "approved"]
                            if len(answered) == WAITERS:
                                return found
                    return found

            async def watch_run(run_id: str, ready: asyncio.Event) -> list[dict]:
                url = f"/api/runs/{run_id}/events"
                async with watcher.stream("GET", url) as response:
                    assert response.status_code == 200
                    ready.set()
                    return await read_events(response, 1000)  # until the run's exit

            async def wait_for_call(index: int) -> dict:
                body = run_call(node, "wiper", f"wait-{index}", count=1)
                answer = await waiter.post(
                    "/api/tools/run_skill_script", params={"wait": 60}, json=body
                )
                envelope = answer.json()
                # A wait that ends first leaves the call waiting: its agent waits again.
                while envelope["status"] in ("pending_approval", "running"):
                    again = await waiter.get(
                        f"/api/calls/{envelope['call_id']}", params={"wait": 60}
                    )
                    envelope = again.json()
                return dict(envelope)

            ready = [asyncio.Event() for _ in range(FEEDS)]
            feeds = [asyncio.create_task(follow_feed(r)) for r in ready]
            await asyncio.wait_for(asyncio.gather(*(r.wait() for r in ready)), 60)
            waiters = [asyncio.create_task(wait_for_call(i)) for i in range(WAITERS)]

            # Every waiting call is put to the owner while all of that stays open.
            pending: list[dict] = []
            deadline = time.monotonic() + 60
            while len(pending) < WAITERS and time.monotonic() < deadline:
                listed = await owner.get(
                    "/api/approvals", params={"status": "pending", "page_size": WAITERS}
                )
                pending = listed.json()
                await asyncio.sleep(0.2)
            assert len(pending) == WAITERS, len(pending)

            # A run that prints a line a second for a while, for the watchers. It starts now,
            # so that it outlasts the count below however long the calls took to be put to the
            # owner on a busy machine (its watchers' streams end with it).
            slow = run_call(node, "ticker", "live", count=20, every=1)
            started = (await watcher.post("/api/tools/run_skill_script", json=slow)).json()
            watching = [asyncio.Event() for _ in range(WATCHERS)]
            watchers = [asyncio.create_task(watch_run(started["run_id"], w)) for w in watching]
            await asyncio.wait_for(asyncio.gather(*(w.wait() for w in watching)), 60)

            health = await owner.get("/api/health")
            tool = await owner.post("/api/tools/list_skills", json={})
            # Streams are the tier's; a wait is the tier's, or holds its request's thread
            # while half the threads are free.
            live = tier(running)
            open_now = len(live.open) + live.threads.busy
            kinds = Counter(kind_of(serving.handoff.job) for serving in live.open)
            assert open_now >= FEEDS + WATCHERS + WAITERS - 5, (kinds, live.threads.busy)

            for approval in pending:
                answered = await owner.post(
                    f"/api/approvals/{approval['id']}", json={"decision": "approve"}
                )
                assert answered.status_code == 200, answered.text
            answers = await asyncio.wait_for(asyncio.gather(*waiters), 90)
            heard = await asyncio.wait_for(asyncio.gather(*feeds), 30)
            lines = await asyncio.wait_for(asyncio.gather(*watchers), 60)
            return {
                "run_id": started["run_id"],
                "health": health,
                "tool": tool,
                "answers": answers,
                "heard": heard,
                "lines": lines,
            }

    seen = asyncio.run(scenario())

    everyone_answered(seen, stream_of(running, seen["run_id"]))
    # Closing every connection frees every slot and every subscription.
    still = lambda: [type(s.handoff.job).__name__ for s in tier(running).open]  # noqa: E731
    try:
        wait_until(lambda: not tier(running).open, 30, "every stream to close")
    except AssertionError as e:
        raise AssertionError(f"{e}: {still()}") from None
    assert tier(running).hub.subscriptions == 0
    # A stream gives its slot back just after it leaves the tier's open set.
    wait_until(lambda: slots_of(running, running.owner_token) == 0, 30, "every slot to free")


def stream_of(running: Fleet, run_id: str) -> list[str]:
    """The run's stream as Redis holds it, one line per entry, for a failure's report."""
    entries = running.redis.xrange(naming.run_stream(run_id))
    return [f"{entry_id!r} {fields!r}" for entry_id, fields in entries]


def everyone_answered(seen: dict, stream: list[str]) -> None:
    """Health and the tool call answered; every waiter, feed and watcher got all it waited for."""

    assert seen["health"].status_code == 200
    assert seen["tool"].json()["status"] == "done"
    assert [a["status"] for a in seen["answers"]] == ["done"] * WAITERS
    assert all(a["result"]["exit_code"] == 0 for a in seen["answers"])
    for events in seen["heard"]:
        assert len([e for e in events if e.get("status") == "approved"]) == WAITERS
    expected = "".join(f"line {i}\n" for i in range(20))
    printed = ["".join(e["text"] for e in events if "text" in e) for events in seen["lines"]]
    short = [i for i, text in enumerate(printed) if text != expected]
    report = "\n".join(
        [f"{len(short)} of {WATCHERS} watchers missed output; the first heard:", printed[short[0]]]
        + ["the stream holds:", *stream]
        if short
        else []
    )
    assert not short, report
    assert all(events[-1]["status"] == "succeeded" for events in seen["lines"])


def test_a_body_on_its_way_holds_no_request_thread_and_is_read_whole_once_in(running: Fleet):
    live = tier(running)
    host, port = running.url.removeprefix("http://").split(":")
    body = b"{}" + b" " * 98
    head = (
        f"POST /api/tools/list_skills HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Bearer {running.owner_token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=30) as slow:
        slow.sendall(head.encode() + body[:40])
        # Read on the event loop (api/bodyread.py): no view waits in a thread for the rest.
        wait_until(lambda: live.threads.busy == 0 and live.bodies.held == len(body), 5, "a read")
        slow.sendall(body[40:])
        answer = b""
        while chunk := slow.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert b'"status":"done"' in answer.replace(b" ", b"")
    # Given back as the request's coroutine ends, which may be just after the answer went out.
    wait_until(lambda: live.bodies.held == 0, 5, "the body's bytes to be given back")


def test_past_the_read_bodies_budget_a_body_goes_to_the_view_as_it_comes(running: Fleet):
    live = tier(running)
    live.bodies.most = 0  # as if other clients' bodies held all of it
    try:
        with running.http() as owner_client:
            answer = owner_client.post("/api/tools/list_skills", json={"arguments": {}})
    finally:
        live.bodies.most = PREREAD_BUDGET_BYTES
    assert answer.status_code == 200 and answer.json()["status"] == "done"


def test_past_its_limit_a_token_gets_429_too_many_streams_until_one_closes(running: Fleet):
    _, token = agent_token(running)
    limit = running.settings.stream_limit
    headers = {"Authorization": f"Bearer {token}"}
    with running.http() as owner_client:
        run = owner_client.post(
            "/api/tools/run_skill_script",
            json=run_call(running.env["TEST_NODE"], "ticker", "cap", count=200, every=0.5),
        ).json()
    path = f"/api/runs/{run['run_id']}/events"
    try:
        sockets = [open_stream(running, path, token) for _ in range(limit)]
        wait_until(lambda: slots_of(running, token) == limit, 30, "every stream to hold a slot")
        with httpx.Client(verify=TLS, base_url=running.url, headers=headers, timeout=30) as client:
            refused = client.get(path)
            assert refused.status_code == 429
            assert refused.json()["code"] == "too_many_streams"
            assert int(refused.headers["Retry-After"]) > 0
            # Nor may it wait on a call: the same slots.
            waited = client.get(f"/api/calls/{run['call_id']}", params={"wait": 5})
            assert waited.status_code == 429
            # A call it makes runs, and is answered as it stands rather than refused.
            body = run_call(running.env["TEST_NODE"], "ticker", "cap", count=1)
            made = client.post("/api/tools/run_skill_script", params={"wait": 30}, json=body)
            assert made.status_code == 200, made.text
            assert made.json()["status"] in ("running", "done") and made.json()["call_id"]
            sockets.pop().close()
            wait_until(lambda: slots_of(running, token) == limit - 1, 30, "the slot to free")
            with client.stream("GET", path) as again:
                assert again.status_code == 200
    finally:
        for sock in sockets:
            sock.close()
    try:
        wait_until(lambda: slots_of(running, token) == 0, 30, "every slot to free")
    except AssertionError as e:
        raise AssertionError(f"{e}: {slots_of(running, token)} {len(tier(running).open)}") from None


def waited_with_slots(running: Fleet, token: str) -> tuple[dict, int]:
    """A tool call's answer after `?wait=` for a run that outlasts the grace, and the most
    stream slots its token held meanwhile (a hand-off takes one; a wait in its thread none)."""
    body = run_call(running.env["TEST_NODE"], "ticker", "grace", count=3, every=0.4)
    headers = {"Authorization": f"Bearer {token}"}
    with (
        httpx.Client(verify=TLS, base_url=running.url, headers=headers, timeout=60) as client,
        concurrent.futures.ThreadPoolExecutor(1) as pool,
    ):
        answer = pool.submit(
            lambda: client.post("/api/tools/run_skill_script", params={"wait": 30}, json=body)
        )
        most = 0
        while not answer.done():
            most = max(most, slots_of(running, token))
            time.sleep(0.02)
        return answer.result().json(), most


def test_a_wait_past_the_grace_keeps_its_thread_while_half_the_threads_are_free(running: Fleet):
    _, token = agent_token(running)
    threads = tier(running).threads
    assert running.settings.wait_grace < 1.2  # the run lasts longer

    answer, slots = waited_with_slots(running, token)
    assert (answer["status"], answer["result"]["stdout"]) == ("done", "line 0\nline 1\nline 2\n")
    assert slots == 0  # no hand-off

    with contextlib.ExitStack() as busy:
        for _ in range(threads.size // 2):  # held as requests hold them: with the wait's, more
            busy.enter_context(threads.serving())  # than half of them are busy
        answer, slots = waited_with_slots(running, token)
    assert (answer["status"], answer["result"]["stdout"]) == ("done", "line 0\nline 1\nline 2\n")
    assert slots == 1  # handed off to the live tier, which held a slot while it waited
    wait_until(lambda: slots_of(running, token) == 0, 30, "the slot to free")


def test_revoking_a_token_closes_its_feed_and_run_streams(running: Fleet):
    with running.http() as owner_client:
        owner = owner_client.post("/api/tokens", json={"role": "owner", "label": "tab"}).json()
        agent = owner_client.post("/api/tokens", json={"role": "agent", "label": "bot"}).json()
        run = owner_client.post(
            "/api/tools/run_skill_script",
            json=run_call(running.env["TEST_NODE"], "ticker", "revoke", count=200, every=0.5),
        ).json()
    streams = ((owner, "/api/events"), (agent, f"/api/runs/{run['run_id']}/events"))
    with contextlib.ExitStack() as opened:
        followed = []
        for made, path in streams:
            headers = {"Authorization": f"Bearer {made['token']}"}
            client = opened.enter_context(
                httpx.Client(verify=TLS, base_url=running.url, headers=headers, timeout=30)
            )
            stream = opened.enter_context(client.stream("GET", path))
            assert stream.status_code == 200
            lines = stream.iter_lines()
            assert next(lines)  # the first line is in: the stream is open
            followed.append((client, lines))
        with running.http() as owner_client:
            for made, _path in streams:
                assert owner_client.delete(f"/api/tokens/{made['id']}").status_code == 204
        for client, lines in followed:
            rest = list(lines)  # ends: the server closed the stream
            assert len(rest) < 200
            assert client.get("/api/tools").status_code == 401
    tokens = [made["token"] for made, _path in streams]
    wait_until(lambda: not any(slots_of(running, t) for t in tokens), 30, "the slots to free")


def open_stream(running: Fleet, path: str, token: str) -> socket.socket:
    """A raw connection that asks for `path` and then never reads what comes."""
    host, port = running.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\r\n"
    sock.sendall(request.encode())
    return sock


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """A fleet whose streams have short limits: idle, absolute and send time."""
    settings = settings_in(
        tmp_path_factory.mktemp("strict"),
        stream_keepalive=0.2,
        stream_idle=1,
        stream_max=4,
        stream_send_timeout=1,
        header_timeout=1,
    )
    with fleet(settings) as started:
        yield started


def owner_id_of(running: Fleet) -> int:
    from sqlalchemy import select

    from store.models import ApiToken

    with running.services.sessions() as session:
        row = session.scalar(
            select(ApiToken).where(ApiToken.token_hash == token_digest(running.owner_token))
        )
        assert row is not None and row.owner_id is not None
        return row.owner_id


def test_a_quiet_feed_ends_after_the_idle_limit_and_frees_its_slot(strict: Fleet):
    with strict.http(timeout=30) as client:
        with client.stream("GET", "/api/events") as stream:
            assert stream.status_code == 200
            lines = list(stream.iter_lines())  # ends by itself
    assert lines[0] == "retry: 1000"
    assert ": keep-alive" in lines
    wait_until(lambda: slots_of(strict, strict.owner_token) == 0, 30, "the slot to free")


def test_a_busy_feed_ends_at_the_absolute_limit(strict: Fleet):
    owner = owner_id_of(strict)
    key = naming.owner_events(owner)
    with strict.http(timeout=30) as client:
        with client.stream("GET", "/api/events") as stream:
            assert stream.status_code == 200
            heard = 0
            for line in stream.iter_lines():
                if line.startswith("retry") or line.startswith("data: "):
                    heard += 1
                    strict.redis.xadd(key, {"kind": "test.tick", "data": "{}"})
                    time.sleep(0.1)
            # Never idle, yet it ended: the absolute limit (4 s at 10 events a second).
    assert 5 < heard < 100


def test_a_client_that_never_reads_is_dropped_and_frees_its_slot(strict: Fleet):
    owner = owner_id_of(strict)
    key = naming.owner_events(owner)
    sock = open_stream(strict, "/api/events", strict.owner_token)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        wait_until(lambda: slots_of(strict, strict.owner_token) == 1, 30, "the stream to open")
        blob = json.dumps({"text": "x" * 60_000})
        for _ in range(200):  # far more than the socket buffers hold
            strict.redis.xadd(key, {"kind": "test.big", "data": blob})
            if slots_of(strict, strict.owner_token) == 0:
                break
            time.sleep(0.02)
        wait_until(lambda: slots_of(strict, strict.owner_token) == 0, 30, "the reader's drop")
        assert not strict.server.tier.open
    finally:
        sock.close()
        strict.redis.delete(key)


@pytest.mark.fenced("uvicorn")
def test_a_client_trickling_its_headers_is_disconnected_and_others_are_served(strict: Fleet):
    host, port = strict.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as slow:
        slow.sendall(b"GET /api/health HTTP/1.1\r\nHost: x\r\n")
        with httpx.Client(verify=TLS, base_url=strict.url) as client:
            assert client.get("/api/health").status_code == 200
        for _ in range(60):  # a header line now and then, never the blank line that ends them
            try:
                slow.sendall(b"X-Slow: 1\r\n")
                if slow.recv(1024) == b"":
                    break
            except (TimeoutError, OSError):
                break
        else:
            raise AssertionError("the trickling client was never disconnected")
    with socket.create_connection((host, int(port)), timeout=30) as silent:
        assert silent.recv(1024) == b""  # connected and sent nothing: closed too


def test_a_stream_followed_from_a_long_backlog_gets_every_entry_once(running: Fleet):
    from relay.streams import RunStream

    with running.http() as owner_client:
        run = owner_client.post(
            "/api/tools/run_skill_script",
            json=run_call(running.env["TEST_NODE"], "ticker", "backlog", count=1),
        ).json()
        ended = owner_client.get(f"/api/calls/{run['call_id']}", params={"wait": 30}).json()
        assert ended["status"] == "done"
    # A run whose stream holds far more than a subscriber may queue (5,000 entries).
    key = naming.run_stream(run["run_id"])
    running.redis.delete(key)
    pipe = running.redis.pipeline(transaction=False)
    for index in range(5000):
        pipe.xadd(key, {"kind": "stdout", "data": json.dumps({"text": f"{index}\n"})})
    pipe.execute()
    RunStream(running.redis, run["run_id"]).exit("succeeded", 0)
    with running.http() as client:
        with client.stream("GET", f"/api/runs/{run['run_id']}/events") as stream:
            texts = [
                json.loads(line[6:]).get("text")
                for line in stream.iter_lines()
                if line.startswith("data: ")
            ]
    assert texts[:-1] == [f"{index}\n" for index in range(5000)]


@pytest.mark.fenced("uvicorn")
def test_a_body_that_never_comes_is_cut_off_and_holds_no_thread(strict: Fleet):
    host, port = strict.url.removeprefix("http://").split(":")
    head = (
        f"POST /api/tools/list_skills HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Bearer {strict.owner_token}\r\nContent-Type: application/json\r\n"
        "Content-Length: 100\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=30) as stalled:
        stalled.sendall(head.encode())
        assert stalled.recv(1024) == b""  # closed: the rest of the body never came


@pytest.mark.fenced("uvicorn")
def test_a_request_sent_behind_an_open_stream_does_not_keep_it_alive(running: Fleet):
    with running.http() as owner_client:
        token = owner_client.post("/api/tokens", json={"role": "owner"}).json()["token"]
    sock = open_stream(running, "/api/events", token)
    try:
        wait_until(lambda: slots_of(running, token) == 1, 30, "the stream to open")
        host = running.url.removeprefix("http://").split(":")[0]
        sock.sendall(f"GET /api/health HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        time.sleep(0.2)
    finally:
        sock.close()
    # Closed long before the feed's idle limit (15 minutes here) would end it.
    wait_until(lambda: slots_of(running, token) == 0, 30, "the stream to close")

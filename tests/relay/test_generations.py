"""The generation watch: requests read the token and skills generations from memory, kept
current by pub/sub, and ask Redis whenever the watch can't vouch for what it holds."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import redis
from conftest import REDIS_URL
from fleet import wait_until

from relay.generations import GenerationWatch, bump


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def client(request: pytest.FixtureRequest, redis_client: redis.Redis) -> Iterator[redis.Redis]:
    """A client like the processes' own (short timeouts, health checks), on either protocol."""
    connection = redis.Redis.from_url(
        REDIS_URL, socket_timeout=5, health_check_interval=30, protocol=request.param
    )
    yield connection
    connection.close()


@pytest.fixture
def keys(redis_client: redis.Redis) -> Iterator[tuple[str, str]]:
    run = uuid.uuid4().hex
    names = (f"test:{run}:tokens", f"test:{run}:skills")
    yield names
    redis_client.delete(*names)


def live(watch: GenerationWatch) -> GenerationWatch:
    """Wait until the watch answers from memory (it subscribes on its first read)."""

    def from_memory() -> bool:
        asked = watch.asked
        watch.read()
        return watch.asked == asked

    wait_until(from_memory, 5, "the watch to answer from memory")
    return watch


def test_every_bump_is_seen_by_the_next_read_without_asking_redis(client, keys):
    watch = live(GenerationWatch(client, keys))
    asked = watch.asked
    for number in range(1, 201):
        bump(client, keys[number % 2])  # as another process would, then at once a request
        assert watch.read() == (str(number // 2).encode(), str((number + 1) // 2).encode())
    assert watch.asked == asked
    watch.close()


def test_the_values_are_the_counters_whether_asked_or_watched(client, keys):
    bump(client, keys[0])
    asking = GenerationWatch(client, keys)
    assert asking.read() == (b"1", b"0")  # the first read subscribes and asks
    assert asking.asked == 1
    assert live(asking).read() == (b"1", b"0")
    asking.close()


def test_a_watch_whose_connection_was_killed_asks_redis_until_it_is_back(
    client, keys, redis_client
):
    watch = live(GenerationWatch(client, keys))
    host, port = watch._pubsub.connection._sock.getsockname()  # noqa: SLF001 - the one to cut
    assert redis_client.client_kill_filter(addr=f"{host}:{port}") == 1
    bump(redis_client, keys[0])  # the watch can't hear this one
    asked = watch.asked

    assert watch.read() == (b"1", b"0")

    assert watch.asked == asked + 1
    # It subscribes again (after RETRY_SECONDS) and answers from memory once more.
    assert live(watch).read() == (b"1", b"0")
    bump(client, keys[1])
    assert watch.read() == (b"1", b"1")
    watch.close()


def test_a_watch_not_heard_from_lately_asks_redis_and_pings(client, keys):
    watch = live(GenerationWatch(client, keys, ping_seconds=0.05, live_seconds=0.2))
    bump(client, keys[0])
    time.sleep(0.3)  # quiet since: nothing proves the subscription still hears
    asked = watch.asked

    assert watch.read() == (b"1", b"0")

    assert watch.asked == asked + 1
    assert live(watch).read() == (b"1", b"0")  # the ping's answer proved it again
    watch.close()


def test_without_redis_there_are_no_generations(keys):
    away = redis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=1)
    watch = GenerationWatch(away, keys)

    assert watch.read() is None
    assert watch.read() is None  # and no retry storm: it subscribes again after a pause


def test_bumps_in_another_database_are_not_heard(client, keys):
    watch = live(GenerationWatch(client, keys))
    base, _, db = REDIS_URL.rpartition("/")
    other = redis.Redis.from_url(f"{base}/{(int(db or 0) + 1) % 16}")  # not the tests' one
    try:
        bump(other, keys[0])
        assert watch.read() == (b"0", b"0")
    finally:
        other.delete(keys[0])
        other.close()
    watch.close()


class Relay:
    """A TCP stand-in between a client and the test Redis, on loopback, which can silence the
    subscriptions it carries: their bytes are dropped both ways from then on and nothing is
    closed, as on a network that lost the route. Other connections, and later subscriptions,
    keep working."""

    def __init__(self) -> None:
        target = urlsplit(REDIS_URL)
        self.target = (target.hostname or "127.0.0.1", target.port or 6379)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.subscriptions: list[threading.Event] = []  # each set once the connection is cut
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/{urlsplit(REDIS_URL).path.strip('/') or 0}"

    def _accept(self) -> None:
        while True:
            try:
                near, _ = self.listener.accept()
            except OSError:
                return
            far = socket.create_connection(self.target)
            cut = threading.Event()
            threading.Thread(target=self._pump, args=(near, far, cut, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(far, near, cut, False), daemon=True).start()

    def silence(self) -> int:
        """Cut every subscription carried so far; returns how many."""
        for cut in self.subscriptions:
            cut.set()
        return len(self.subscriptions)

    def _pump(
        self, source: socket.socket, sink: socket.socket, cut: threading.Event, upstream: bool
    ) -> None:
        while data := self._receive(source):
            if upstream and b"SUBSCRIBE" in data.upper() and cut not in self.subscriptions:
                self.subscriptions.append(cut)
            if not cut.is_set():
                try:
                    sink.sendall(data)
                except OSError:  # the other side closed first
                    break
        sink.close()

    @staticmethod
    def _receive(source: socket.socket) -> bytes:
        try:
            return source.recv(65536)
        except OSError:
            return b""

    def close(self) -> None:
        self.listener.close()


def test_a_watch_cut_off_silently_stops_answering_and_subscribes_again(redis_client, keys):
    relay = Relay()
    client = redis.Redis.from_url(relay.url(), socket_timeout=5)
    watch = live(GenerationWatch(client, keys, ping_seconds=0.05, live_seconds=0.2))
    assert relay.silence() == 1  # the subscription hears nothing more, and nothing says so
    bump(redis_client, keys[0])
    time.sleep(0.3)  # past the live window: no PING it sends now is answered

    assert watch.read() == (b"1", b"0")  # asked Redis, on a connection that still works
    # It gives up on the silent subscription, makes a new one (through the stand-in too, not
    # cut) and answers from memory again.
    assert live(watch).read() == (b"1", b"0")
    assert len(relay.subscriptions) == 2
    asked = watch.asked
    bump(redis_client, keys[1])
    # The stand-in forwards the bump's message from a thread of its own, so the message can
    # trail Redis's answer to the bump's PING (it can't without a hop between them): wait.
    wait_until(lambda: watch.read() == (b"1", b"1"), 5, "the new subscription to hear a bump")
    assert watch.asked == asked  # heard on the new subscription, not asked
    watch.close()
    client.close()
    relay.close()

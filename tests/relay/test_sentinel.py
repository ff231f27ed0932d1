"""Redis through Sentinel: the settings, and every kind of client following a real failover.

The failover runs on redis-server processes of the test's own (tests/fleet.py SentinelRedis):
a primary, a replica and three sentinels on loopback; the primary is SIGKILLed and each client
must reach the promoted replica by itself, with no restart.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import kombu.exceptions
import pytest
import redis
from fleet import sentinel_redis, wait_until
from kombu.transport import redis as kombu_redis_transport
from redis.backoff import NoBackoff
from redis.retry import Retry

from relay import hub
from relay.app import create_celery, sentinel_url
from relay.connections import redis_client, same_server, settings_of
from relay.fenced import kombu_redis
from relay.notifier import _sender
from relay.streams import blocking_client
from skillfleet.up import run_up
from store.settings import Settings, SettingsError

SENTINELS = "sentinel-1:26379, sentinel-2:26380,[::1]:26381"
# A client must reach the new primary within this long of the old one's death.
FAILOVER_LIMIT = 30.0


def test_sentinels_are_read_from_the_environment():
    found = Settings.from_env(
        {"SKILLFLEET_REDIS_SENTINELS": SENTINELS, "SKILLFLEET_REDIS_SENTINEL_MASTER": "main-1"}
    )
    assert found.redis_sentinels == (
        ("sentinel-1", 26379),
        ("sentinel-2", 26380),
        ("::1", 26381),
    )
    assert found.redis_sentinel_master == "main-1"
    plain = Settings.from_env({})
    assert plain.redis_sentinels == () and plain.redis_sentinel_master == "mymaster"
    # With sentinels and no REDIS_URL: database 0 of the primary, not the embedded socket.
    assert found.redis == "redis:///0"


@pytest.mark.parametrize(
    "raw",
    [
        "sentinel-1",  # no port
        "sentinel-1:",
        ":26379",
        "sentinel-1:0",
        "sentinel-1:65536",
        "sentinel-1:port",
        "sentinel-1:26379,bad",
        "a" * 300 + ":26379",
    ],
)
def test_a_bad_sentinel_list_is_refused_with_the_setting_named(raw: str):
    with pytest.raises(SettingsError, match="SKILLFLEET_REDIS_SENTINELS"):
        Settings.from_env({"SKILLFLEET_REDIS_SENTINELS": raw})


@pytest.mark.parametrize("name", ["../x", "a b", "x\x00", "m" * 101, "mäster"])
def test_a_bad_master_name_is_refused(name: str):
    with pytest.raises(SettingsError, match="SKILLFLEET_REDIS_SENTINEL_MASTER"):
        Settings.from_env(
            {"SKILLFLEET_REDIS_SENTINELS": "s:26379", "SKILLFLEET_REDIS_SENTINEL_MASTER": name}
        )


def test_celery_asks_the_sentinels_for_broker_and_backend_through_the_fenced_transport():
    settings = Settings.from_env(
        {
            "SKILLFLEET_REDIS_SENTINELS": "s1:26379,[::1]:26380",
            "REDIS_URL": "redis://user:p%40ss@ignored:6379/3",
        }
    )
    url = "sentinel://user:p%40ss@s1:26379/3;sentinel://user:p%40ss@[::1]:26380/3"
    assert sentinel_url(settings) == url
    app = create_celery(settings, current=False)
    assert app.conf.broker_url == url and app.conf.result_backend == url
    assert app.conf.broker_transport == kombu_redis.SENTINEL_ALIAS
    for options in (app.conf.broker_transport_options, app.conf.result_backend_transport_options):
        assert options["master_name"] == "mymaster"
        assert options["visibility_timeout"] == settings.visibility_timeout
    with app.connection_for_write() as connection:
        assert isinstance(connection.transport, kombu_redis.SentinelTransport)
        assert connection.transport.Channel is kombu_redis.SentinelChannel
    plain = create_celery(dataclasses.replace(settings, fenced_kombu=False), current=False)
    assert plain.conf.broker_transport is None
    with plain.connection_for_write() as connection:
        assert type(connection.transport) is kombu_redis_transport.SentinelTransport


def test_skillfleet_up_refuses_sentinels_before_it_starts_anything(tmp_path: Path):
    settings = Settings(data_dir=tmp_path / "var", redis_sentinels=(("127.0.0.1", 1),))
    with pytest.raises(click.ClickException, match="SKILLFLEET_REDIS_SENTINELS"):
        run_up(settings)
    assert not (tmp_path / "var").exists()


@pytest.mark.redis
@pytest.mark.slow
def test_every_client_kind_follows_a_failover(tmp_path: Path):
    """The process's client, a blocking reader and a pub/sub listener made from it, the live
    tier's asyncio client, Celery's broker and result backend, and the notifier's own Celery app:
    each works before the primary is killed and reaches the promoted replica after."""
    with sentinel_redis(tmp_path / "redis") as found:
        settings = Settings(data_dir=tmp_path / "var", **found.settings())
        client = redis_client(settings)
        reader = blocking_client(client)
        listener = same_server(client, retry=Retry(NoBackoff(), 0))
        assert settings_of(reader) is settings and settings_of(listener) is settings
        app = create_celery(settings, current=False)
        sender = _sender(same_server(client))  # a client without an app gets one like it
        assert sender.conf.broker_url == app.conf.broker_url
        loop = asyncio.new_event_loop()
        live = loop.run_until_complete(_async_client(settings))
        queue, stream, task_id = f"q-{uuid.uuid4().hex[:6]}", f"s-{uuid.uuid4().hex[:6]}", "t-1"

        client.set("before", "1")
        reader.xadd(stream, {"n": "1"})
        app.send_task("skillfleet.nothing", queue=queue)
        app.backend.store_result(task_id, 41, "SUCCESS")
        assert loop.run_until_complete(live.get("before")) == b"1"
        # The replica has every write above: WAIT waits for the offset of this connection's
        # last write, which comes after all of them.
        client.set("synced", "1")
        assert client.wait(1, 5000) == 1
        assert client.connection_pool.get_master_address()[1] == found.primary.port

        killed_at = time.monotonic()
        found.kill_primary()
        promoted = found.wait_for_failover()

        def soon(what: str, action: Callable[[], Any]) -> Any:
            return wait_until(
                lambda: _works(action), FAILOVER_LIMIT - (time.monotonic() - killed_at), what, 0.2
            )[1]

        soon("the client", lambda: client.set("after", "2"))
        assert client.connection_pool.get_master_address()[1] == found.replica.port
        entries = soon("the blocking reader", lambda: reader.xread({stream: "0-0"}, block=100))
        assert [e[1] for e in entries[0][1]] == [{b"n": b"1"}]
        soon("the listener", lambda: _heard(listener, client))
        soon("the broker", lambda: app.send_task("skillfleet.nothing", queue=queue))
        soon("the notifier's app", lambda: sender.send_task("skillfleet.nothing", queue=queue))
        assert client.llen(queue) == 3  # one from before, replicated; two sent after
        soon("the result backend", lambda: app.backend.store_result("t-2", 42, "SUCCESS"))
        assert app.backend.get_task_meta(task_id)["result"] == 41
        assert app.backend.get_task_meta("t-2")["result"] == 42
        value = soon("the live tier", lambda: loop.run_until_complete(live.get("after")))
        assert value == b"2"
        took = time.monotonic() - killed_at
        print(f"failover: promoted after {promoted:.1f} s, every client through after {took:.1f} s")
        assert took < FAILOVER_LIMIT, (promoted, took)
        loop.run_until_complete(live.aclose())
        loop.close()
        for each in (client, reader, listener):
            each.close()


async def _async_client(settings: Settings) -> Any:
    return hub.async_client(settings)


def _works(action: Callable[[], Any]) -> tuple[bool, Any] | None:
    """(True, what `action` returned), or None while the failover still refuses it."""
    try:
        return True, action()
    except (redis.RedisError, OSError, kombu.exceptions.OperationalError):
        return None


def _heard(listener: redis.Redis, client: redis.Redis) -> bool:
    """A message published through `client` reaches a subscription of `listener`."""
    channel = f"c-{uuid.uuid4().hex[:6]}"
    with listener.pubsub() as pubsub:
        pubsub.subscribe(channel)
        assert pubsub.get_message(timeout=2)["type"] == "subscribe"
        client.publish(channel, "hello")
        message = pubsub.get_message(timeout=2)
    if message is None or message["data"] != b"hello":
        raise redis.ConnectionError("not heard")
    return True

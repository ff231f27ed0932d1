"""The sets of workers in Redis forget a worker that was killed without a word."""

from __future__ import annotations

import time
import uuid

import redis
from conftest import REDIS_URL

from relay import heartbeat, naming


def test_a_beat_drops_workers_gone_for_an_hour_from_the_sets_it_writes():
    client = redis.Redis.from_url(REDIS_URL)
    queue = naming.node_queue(f"t-{uuid.uuid4().hex[:8]}")
    gone, recent = f"gone-{uuid.uuid4().hex}", f"recent-{uuid.uuid4().hex}"
    long_ago = time.time() - heartbeat.FORGET_SECONDS - 60
    for key in (naming.all_workers(), naming.queue_workers(queue)):
        client.zadd(key, {gone: long_ago, recent: time.time() - 60})

    beating = heartbeat.Instance(role="node", queue=queue, name=queue.removeprefix("node."))
    heartbeat.beat(client, beating)
    try:
        for key in (naming.all_workers(), naming.queue_workers(queue)):
            assert client.zscore(key, gone) is None
            assert client.zscore(key, recent) is not None
    finally:
        heartbeat.stop(client, beating)
        client.zrem(naming.all_workers(), recent)


def test_a_worker_counts_alive_for_its_own_window_whatever_the_reader_s_settings():
    client = redis.Redis.from_url(REDIS_URL)
    queue = naming.node_queue(f"t-{uuid.uuid4().hex[:8]}")
    short = heartbeat.Instance(role="node", queue=queue, name="short")
    long = heartbeat.Instance(role="node", queue=queue, name="long")
    heartbeat.beat(client, short, alive_seconds=0.3)
    heartbeat.beat(client, long, alive_seconds=60)
    try:
        assert set(heartbeat.live_workers(client, queue)) == {short.id, long.id}
        deadline = time.monotonic() + 10
        while heartbeat.is_alive(client, short.id) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not heartbeat.is_alive(client, short.id)
        assert heartbeat.is_alive(client, long.id)
        assert heartbeat.live_workers(client, queue) == [long.id]
        listed = {w["id"]: w["alive"] for w in heartbeat.workers(client) if w["queue"] == queue}
        assert listed == {short.id: False, long.id: True}
    finally:
        heartbeat.stop(client, short)
        heartbeat.stop(client, long)


def test_a_beater_beats_at_its_setting_s_pace():
    client = redis.Redis.from_url(REDIS_URL)
    queue = naming.node_queue(f"t-{uuid.uuid4().hex[:8]}")
    instance = heartbeat.Instance(role="node", queue=queue, name="quick")
    beater = heartbeat.Beater(client, instance, every=0.05, alive_seconds=0.2)
    beater.start()
    try:
        first = client.zscore(naming.queue_workers(queue), instance.id)
        deadline = time.monotonic() + 10
        while client.zscore(naming.queue_workers(queue), instance.id) == first:
            assert time.monotonic() < deadline, "no second beat"
            time.sleep(0.01)
    finally:
        beater.stop()
    assert heartbeat.live_workers(client, queue) == []

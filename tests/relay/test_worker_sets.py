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

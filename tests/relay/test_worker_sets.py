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


def test_a_beater_s_first_beat_already_says_what_its_refresh_found():
    # A node's standard environment, found built as the worker starts: the banner reads it
    # from the first beat, not one two seconds later.
    client = redis.Redis.from_url(REDIS_URL)
    queue = naming.node_queue(f"t-{uuid.uuid4().hex[:8]}")
    instance = heartbeat.Instance(role="node", queue=queue, name="first", features=["skills"])

    def refresh(current: heartbeat.Instance) -> None:
        current.features = ["skills", "standard-env"]

    beater = heartbeat.Beater(client, instance, refresh=refresh, every=3600)
    beater.start()
    try:
        listed = [w for w in heartbeat.workers(client) if w["id"] == instance.id]
        assert [w["features"] for w in listed] == [["skills", "standard-env"]]
    finally:
        beater.stop()


def test_a_node_s_workers_are_read_without_reading_the_rest_of_the_fleet():
    # 1,000 nodes mean 1,000 heartbeats: a page of one owner's nodes reads its own only.
    client = redis.Redis.from_url(REDIS_URL)
    tag = uuid.uuid4().hex[:8]
    mine = [f"mine-{tag}-{n}" for n in range(2)]
    others = [f"other-{tag}-{n}" for n in range(40)]
    serving = heartbeat.Instance(role="node", queue=naming.node_queue(mine[0]), name=mine[0])
    idle = heartbeat.Instance(role="node", queue=naming.node_queue(mine[1]), name=mine[1])
    fleet = [heartbeat.Instance(role="node", queue=naming.node_queue(n), name=n) for n in others]
    heartbeat.beat(client, serving)
    heartbeat.beat(client, idle, serving=False)  # beating, but offering no queue
    for instance in fleet:
        heartbeat.beat(client, instance)
    try:
        before = _calls(client, "hgetall")
        found = heartbeat.workers_named(client, mine)
        read = _calls(client, "hgetall") - before

        assert sorted((w["name"], w["serving"]) for w in found) == [(mine[0], "1"), (mine[1], "0")]
        # Its own two (the server's count is shared: other tests may read a few meanwhile).
        assert 2 <= read < len(others)
    finally:
        for instance in (serving, idle, *fleet):
            heartbeat.stop(client, instance)
        assert heartbeat.workers_named(client, mine) == []


def _calls(client: redis.Redis, command: str) -> int:
    stats = client.info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0))


def test_the_reaper_s_check_finds_the_lost_among_many_workers_in_one_answer():
    client = redis.Redis.from_url(REDIS_URL)
    queue = naming.node_queue(f"t-{uuid.uuid4().hex[:8]}")
    alive = heartbeat.Instance(role="node", queue=queue, name=queue.removeprefix("node."))
    ran_out = heartbeat.Instance(role="node", queue=queue, name=queue.removeprefix("node."))
    ran_out.pid += 1
    heartbeat.beat(client, alive, alive_seconds=60)
    heartbeat.beat(client, ran_out, alive_seconds=60)
    client.zadd(naming.all_workers(), {ran_out.id: time.time() - 1})  # its window ran out
    never = f"never-{uuid.uuid4().hex}@nowhere:1:1"
    try:
        lost = heartbeat.lost_among(client, [alive.id, ran_out.id, never, alive.id])
    finally:
        heartbeat.stop(client, alive)
        heartbeat.stop(client, ran_out)

    assert lost == {ran_out.id, never}
    assert heartbeat.lost_among(client, []) == set()


def test_a_node_s_name_counts_alive_until_its_last_worker_stops():
    client = redis.Redis.from_url(REDIS_URL)
    name = f"t-{uuid.uuid4().hex[:8]}"
    first = heartbeat.Instance(role="node", queue=naming.node_queue(name), name=name)
    second = heartbeat.Instance(role="node", queue=naming.node_queue(name), name=name)
    second.pid += 1
    heartbeat.beat(client, first, alive_seconds=60)
    heartbeat.beat(client, second, alive_seconds=60)
    try:
        assert client.zscore(naming.beating_names(), name) is not None
        heartbeat.stop(client, first)
        assert client.zscore(naming.beating_names(), name) is not None
    finally:
        heartbeat.stop(client, second)
    assert client.zscore(naming.beating_names(), name) is None

"""relay.held: commands held within a block ride the next round trip that takes them; what none
takes is sent as the block ends, once."""

from __future__ import annotations

import uuid
from typing import Any

import redis

from relay import held


def key() -> str:
    return f"test:held:{uuid.uuid4().hex}"


def incr(counter: str, times: int = 1) -> held.Add:
    def add(pipe: Any) -> None:
        for _ in range(times):
            pipe.incr(counter)

    return add


def test_held_commands_ride_the_next_round_trip_that_takes_them_and_the_rest_go_at_the_end(
    redis_client: redis.Redis,
):
    taken, left = key(), key()
    alone: list[str] = []

    def send_alone(add: held.Add, name: str) -> None:
        alone.append(name)
        pipe = redis_client.pipeline(transaction=False)
        add(pipe)
        pipe.execute()

    assert not held.hold(incr(taken), lambda: None)  # outside a block nothing is held
    with held.holding():
        first = incr(taken)
        assert held.hold(first, lambda: send_alone(first, "first"))
        own = redis_client.pipeline(transaction=False)
        for add in held.take():
            add(own)
        own.get(taken)
        assert own.execute() == [1, b"1"]  # one round trip: the held command, then ours
        assert held.take() == []
        second = incr(left, times=2)
        held.hold(second, lambda: send_alone(second, "second"))
        assert redis_client.get(left) is None  # held, not sent
    assert alone == ["second"] and redis_client.get(left) == b"2"  # sent as the block ended
    redis_client.delete(taken, left)


def test_send_held_sends_at_once_what_no_round_trip_will_take(redis_client: redis.Redis):
    counter = key()

    def alone() -> None:
        redis_client.incr(counter)

    with held.holding():
        held.hold(incr(counter), alone)
        held.send_held()
        assert redis_client.get(counter) == b"1"
    assert redis_client.get(counter) == b"1"  # not sent twice
    redis_client.delete(counter)


def test_recorded_commands_are_asked_for_at_once_and_sent_once_later(redis_client: redis.Redis):
    counter = key()
    asked: list[str] = []

    def count(pipe: Any) -> None:
        pipe.incr(counter)
        asked.append("count")  # a writer's own bookkeeping, as a count marking itself sent

    add = held.recorded(count, incr(counter, times=2))
    assert asked == ["count"] and redis_client.get(counter) is None  # asked for, not sent
    pipe = redis_client.pipeline(transaction=False)
    add(pipe)
    assert pipe.execute() == [1, 2, 3]
    assert asked == ["count"]
    redis_client.delete(counter)

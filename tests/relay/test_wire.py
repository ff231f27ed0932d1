"""relay.wire: a run's round trips on kept connections answer as redis-py's pipeline does."""

from __future__ import annotations

import concurrent.futures
import os
import uuid

import pytest
import redis

from relay import wire


def key() -> str:
    return f"test:wire:{uuid.uuid4().hex}"


def connection_id(client: redis.Redis) -> int:
    pipe = client.pipeline(transaction=False)
    pipe.client_id()
    return int(wire.execute(pipe)[0])


def test_replies_are_those_of_the_pipeline(redis_client):
    stream, counter = key(), key()

    def staged() -> redis.client.Pipeline:
        pipe = redis_client.pipeline(transaction=False)
        pipe.xadd(stream, {"kind": "stdout", "data": "{}"}, maxlen=100, approximate=True)
        pipe.hincrby(counter, "calls", 1)
        pipe.expire(stream, 60)
        pipe.xread({stream: "0-0"}, count=1)
        return pipe

    ours = wire.execute(staged())
    theirs = staged().execute()
    assert [type(reply) for reply in ours] == [type(reply) for reply in theirs]
    assert (ours[1], theirs[1]) == (1, 2)
    assert ours[3] == theirs[3]  # the same first entry, parsed the same way
    redis_client.delete(stream, counter)


def test_an_error_reply_is_raised_or_returned_and_the_connection_stays_in_step(redis_client):
    text = key()
    redis_client.set(text, "not a list")
    pipe = redis_client.pipeline(transaction=False)
    pipe.lpush(text, "x")
    pipe.get(text)
    with pytest.raises(redis.ResponseError, match=r"Command # 1 \(LPUSH"):
        wire.execute(pipe)
    pipe.lpush(text, "x")
    pipe.get(text)
    replies = wire.execute(pipe, raise_on_error=False)
    assert isinstance(replies[0], redis.ResponseError) and replies[1] == b"not a list"
    pipe.get(text)
    assert wire.execute(pipe) == [b"not a list"]  # no reply of an earlier call left unread
    redis_client.delete(text)


def test_a_connection_the_server_closed_while_idle_is_made_again(redis_client):
    first = connection_id(redis_client)
    assert redis_client.client_kill_filter(_id=str(first)) == 1
    # The connection's retry policy retries nothing: the closed one must not be used at all.
    second = connection_id(redis_client)
    assert second != first


def test_a_transaction_is_refused(redis_client):
    pipe = redis_client.pipeline(transaction=True)
    pipe.get(key())
    with pytest.raises(ValueError, match="plain pipelines only"):
        wire.execute(pipe)


def test_fifty_callers_at_once_each_get_their_own_replies(redis_client):
    counter = key()

    def one(index: int) -> tuple[int, list[bytes]]:
        pipe = redis_client.pipeline(transaction=False)
        mine = f"{counter}:{index}"
        pipe.rpush(mine, *[str(index)] * 20)
        pipe.lrange(mine, 0, -1)
        pipe.incr(counter)
        replies = wire.execute(pipe)
        redis_client.delete(mine)
        return replies[2], replies[1]

    with concurrent.futures.ThreadPoolExecutor(max_workers=50) as pool:
        results = list(pool.map(one, range(50)))
    assert sorted(number for number, _items in results) == list(range(1, 51))
    assert all(items == [str(index).encode()] * 20 for index, (_n, items) in enumerate(results))
    redis_client.delete(counter)


def test_a_forked_child_makes_connections_of_its_own(redis_client):
    parent = connection_id(redis_client)  # a spare connection of this process now
    reading, writing = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        try:
            os.write(writing, str(connection_id(redis_client)).encode())
        finally:
            os._exit(0)
    os.close(writing)
    seen = os.read(reading, 64).decode()
    os.close(reading)
    os.waitpid(child, 0)
    assert seen and int(seen) != parent
    assert connection_id(redis_client) == parent  # the parent's connection still in step


def test_held_pipelines_ride_the_next_round_trip_that_takes_them_and_the_rest_go_at_the_end(
    redis_client,
):
    taken, left = key(), key()
    sent: list[int] = []

    def send(pipe: redis.client.Pipeline) -> None:
        sent.append(len(pipe))
        wire.execute(pipe)

    outside = redis_client.pipeline(transaction=False)
    assert not wire.hold(outside)  # outside a block nothing is held
    with wire.holding(send):
        first = redis_client.pipeline(transaction=False)
        first.incr(taken)
        assert wire.hold(first)
        own = redis_client.pipeline(transaction=False)
        own.command_stack.extend(wire.take_held())
        own.get(taken)
        assert wire.execute(own) == [1, b"1"]  # one round trip: the held command, then ours
        assert wire.take_held() == []
        second = redis_client.pipeline(transaction=False)
        second.incr(left)
        second.incr(left)
        wire.hold(second)
        assert redis_client.get(left) is None  # held, not sent
    assert sent == [2] and redis_client.get(left) == b"2"  # sent as the block ended
    redis_client.delete(taken, left)


def test_send_held_sends_at_once_what_no_round_trip_will_take(redis_client):
    counter = key()
    with wire.holding(wire.execute):
        pipe = redis_client.pipeline(transaction=False)
        pipe.incr(counter)
        wire.hold(pipe)
        wire.send_held()
        assert redis_client.get(counter) == b"1"
    assert redis_client.get(counter) == b"1"  # not sent twice
    redis_client.delete(counter)

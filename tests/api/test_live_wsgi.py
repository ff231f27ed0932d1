"""The live tier under a plain WSGI server: a stream's body comes from an event loop of its own,
which must end everything it started before it closes."""

from __future__ import annotations

import asyncio

from api import live


def test_a_stream_s_own_loop_cancels_what_its_body_left_running_before_it_closes():
    seen: list[str] = []

    async def left_running() -> None:  # as a hub's read whose stop was cut short
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    async def body() -> None:
        asyncio.get_running_loop().create_task(left_running())
        await asyncio.sleep(0)

    loop = asyncio.new_event_loop()
    live._run_until_done(loop, loop.create_task(body()))
    # Closed with the task pending, its coroutine would be thrown GeneratorExit when collected
    # (redis-py then fails on the closed loop), never cancelled.
    assert seen == ["cancelled"]
    assert loop.is_closed()


def test_a_stream_s_own_loop_closes_when_its_body_is_cancelled():
    loop = asyncio.new_event_loop()
    task = loop.create_task(asyncio.sleep(60))
    loop.call_soon(task.cancel)
    live._run_until_done(loop, task)
    assert task.cancelled() and loop.is_closed()

"""The bodies of what stays open, produced asynchronously: a run's, a turn's, a chat's (the AI
SDK's protocol, api/chatstream.py) and the owner's SSE streams, and the answer of a call waited
for (`?wait=`).

Each reads Redis through the process's stream hub (relay/hub.py) and the database, briefly,
on a thread (`asyncio.to_thread`). A stream sends a comment every `SKILLFLEET_STREAM_KEEPALIVE`
seconds while nothing happens, and ends when nothing but comments went out for the idle limit
(`SKILLFLEET_STREAM_IDLE`): its client reconnects with Last-Event-ID and misses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from api.chatstream import chat_frames
from api.livejobs import FollowChat, FollowFeed, FollowRun, FollowTurn, Job, WaitCall
from api.schemas import CallSchema, ToolResultSchema
from api.services import Services
from api.sse import KEEPALIVE, frame
from broker.calls import OPEN_STATES, CallOutcome
from broker.runs import answer_of, get_run
from relay import naming
from relay.hub import OUTAGES, Overflow, StreamHub, Subscription
from relay.streams import END_KINDS, TURN_END_KINDS, Event
from store import jsoncodec
from store.lifecycle.runs import END_STATES
from store.limits import MAX_WAIT_SECONDS
from store.models import Run, ToolCall
from store.states import CallStatus

FEED_OPENING = "retry: 1000\n\n"
# A waiting call reads its row again this often without news of it (an expiry, a lost event).
RECHECK_SECONDS = 30.0
# A quiet run's stream asks the database whether the run ended every this many keepalives.
ROW_CHECK_EVERY = 4


def exit_of(run: Run) -> Event:
    """The exit event of an ended run, as its row records it."""
    end = {"status": run.status, "exit_code": run.exit_code, "error": run.error}
    return Event("0-3", "exit", end)


@dataclass
class _OwnerNews:
    subscription: Subscription | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    calls: dict[str, set[asyncio.Event]] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None


class CallNews:
    """News of the calls waiting in this process, from their owners' feeds: one subscription
    per owner, which wakes only the calls an event names (an owner with hundreds of waiting
    calls costs one wake-up per event, not hundreds)."""

    def __init__(self, hub: StreamHub) -> None:
        self.hub = hub
        self.owners: dict[int, _OwnerNews] = {}

    async def listen(self, owner_id: int, call_id: str) -> asyncio.Event:
        """An event set whenever the owner's feed tells of `call_id` from now on."""
        owner = self.owners.get(owner_id)
        if owner is None:
            owner = self.owners[owner_id] = _OwnerNews()
            key = naming.owner_events(owner_id)
            try:
                owner.subscription, _ = await self.hub.subscribe(key, await self.hub.last_id(key))
            except BaseException:
                del self.owners[owner_id]
                owner.ready.set()
                raise
            owner.task = asyncio.create_task(self._follow(owner), name="call-news")
            owner.ready.set()
        else:
            await owner.ready.wait()
            if owner.subscription is None:
                return await self.listen(owner_id, call_id)  # its subscribing failed
        news = asyncio.Event()
        owner.calls.setdefault(call_id, set()).add(news)
        return news

    def forget(self, owner_id: int, call_id: str, news: asyncio.Event) -> None:
        owner = self.owners.get(owner_id)
        if owner is None:
            return
        waiting = owner.calls.get(call_id, set())
        waiting.discard(news)
        if not waiting:
            owner.calls.pop(call_id, None)
        if not owner.calls and owner.ready.is_set():
            del self.owners[owner_id]
            if owner.task is not None:
                owner.task.cancel()
            if owner.subscription is not None:
                owner.subscription.close()

    async def _follow(self, owner: _OwnerNews) -> None:
        assert owner.subscription is not None
        while True:
            try:
                events = await owner.subscription.next(RECHECK_SECONDS)
            except Overflow:  # fell behind: every waiting call reads its row again
                events = []
                for waiting in owner.calls.values():
                    for news in waiting:
                        news.set()
            for event in events:
                for news in owner.calls.get(str(event.data.get("call_id")), ()):
                    news.set()


@dataclass
class LiveContext:
    hub: StreamHub
    services: Services
    calls: CallNews


def body_of(job: Job, context: LiveContext) -> AsyncIterator[bytes]:
    """The chunks of the response that `job` stands for."""
    if isinstance(job, FollowRun):
        return _encoded(run_frames(context, job))
    if isinstance(job, FollowTurn):
        return _encoded(turn_frames(context, job))
    if isinstance(job, FollowFeed):
        return _encoded(feed_frames(context, job))
    if isinstance(job, FollowChat):
        return _encoded(chat_frames(context.hub, context.services, job))
    return _answer(context, job)


async def _encoded(frames: AsyncIterator[str]) -> AsyncIterator[bytes]:
    try:
        async with contextlib.aclosing(frames):  # type: ignore[type-var]
            async for text in frames:
                yield text.encode()
    except (IdleStream, Overflow):
        return  # the client reconnects with Last-Event-ID


async def run_frames(context: LiveContext, job: FollowRun) -> AsyncIterator[str]:
    """A run's events until its exit; the client always gets the run's final state.

    A run that ended without its exit event in the stream (the stream was lost with Redis) ends
    with the state recorded in its row, checked after a Redis outage and every few keepalives.
    """
    hub = context.hub
    subscription, events = await hub.subscribe(naming.run_stream(job.run_id), job.after)
    try:
        outages, quiet = hub.outages, 0
        while True:
            for event in events:
                yield frame(event)
                if event.kind in END_KINDS:
                    return
            events = await _next(context, subscription)
            if events:
                quiet = 0
                continue
            quiet += 1
            if hub.outages != outages or quiet % ROW_CHECK_EVERY == 0:
                outages = hub.outages
                ended = await asyncio.to_thread(_ended, context.services, job.run_id)
                if ended is not None:
                    async for text in _finish_from_row(hub, subscription, ended):
                        yield text
                    return
            yield KEEPALIVE
    finally:
        subscription.close()


async def turn_frames(context: LiveContext, job: FollowTurn) -> AsyncIterator[str]:
    """A turn's text and tool events until its end."""
    subscription, events = await context.hub.subscribe(naming.turn_stream(job.turn_id), job.after)
    try:
        while True:
            for event in events:
                yield frame(event)
                if event.kind in TURN_END_KINDS:
                    return
            events = await _next(context, subscription)
            if not events:
                yield KEEPALIVE
    finally:
        subscription.close()


async def feed_frames(context: LiveContext, job: FollowFeed) -> AsyncIterator[str]:
    """The owner's events, from `job.after` on, until the idle limit."""
    key = naming.owner_events(job.owner_id)
    after = await context.hub.last_id(key) if job.after == "$" else job.after
    subscription, events = await context.hub.subscribe(key, after)
    try:
        yield FEED_OPENING  # the client knows the stream is open, and how soon to reconnect
        while True:
            for event in events:
                yield frame(event)
            events = await _next(context, subscription)
            if not events:
                yield KEEPALIVE
    finally:
        subscription.close()


class IdleStream(Exception):
    """Raised when a stream sent nothing but keepalives for the idle limit."""


async def _next(context: LiveContext, subscription: Subscription) -> list[Event]:
    """The subscription's next events, [] after a keepalive's time without; IdleStream once
    the stream has been quiet for the idle limit."""
    events = await subscription.next(context.services.settings.stream_keepalive)
    now = time.monotonic()
    if events:
        subscription.quiet_since = now
        return events
    if now - subscription.quiet_since >= context.services.settings.stream_idle:
        raise IdleStream(subscription.key)
    return []


def _ended(found: Services, run_id: str) -> Run | None:
    run = get_run(found.sessions, run_id)
    return run if run.status in END_STATES else None


async def _finish_from_row(hub: StreamHub, subscription: Subscription, run: Run) -> Any:
    """What the stream still holds, then the row's end if the stream lacks it."""
    try:
        rest = await hub.read_after(subscription.key, subscription.position)
    except OUTAGES:
        rest = []
    for event in rest:
        yield frame(event)
        if event.kind in END_KINDS:
            return
    yield frame(exit_of(run))


# Made once: a schema's construction copies its fields, and it only dumps here.
_CALL = CallSchema()
_RESULT = ToolResultSchema()


async def _answer(context: LiveContext, job: WaitCall) -> AsyncIterator[bytes]:
    if job.shape == "call":
        call = await wait_for_call(context, job)
        body = _CALL.dump(call)
    else:
        outcome = await wait_for_outcome(context, job)
        body = _RESULT.dump(outcome.envelope())
    yield jsoncodec.response_body(body, str) + b"\n"


async def wait_for_outcome(context: LiveContext, job: WaitCall) -> CallOutcome:
    """The call's envelope once it ended or the wait ran out; a run's end entry answers
    without a database read when it carries the call's answer (RunStream.exit)."""
    answer, run_id = await _wait(context, job)
    if isinstance(answer, dict):
        error = answer.get("error")
        return CallOutcome(job.call_id, answer["status"], answer.get("result"), error, None, run_id)
    return CallOutcome.of(answer)


async def wait_for_call(context: LiveContext, job: WaitCall) -> ToolCall:
    answer, _run_id = await _wait(context, job)
    if isinstance(answer, dict):
        return await asyncio.to_thread(_call_row, context.services, job)
    return answer


def _call_row(found: Services, job: WaitCall) -> ToolCall:
    return found.broker.get_call(job.owner_id, job.call_id)


async def _wait(
    context: LiveContext, job: WaitCall
) -> tuple[ToolCall | dict[str, Any], str | None]:
    """The call's row once it ended or the time ran out, or the answer its run's end carried;
    with the id of the run it waited for, if any.

    News of the call comes from the owner's feed (an approval answered, a run started or
    ended: `CallNews`) and from its run's end stream; the row is read again after each, and
    every RECHECK_SECONDS without any.
    """
    hub = context.hub
    deadline = time.monotonic() + min(max(job.seconds, 0), MAX_WAIT_SECONDS)
    run_id = waited = job.run_id
    news: asyncio.Event | None = None
    try:
        while True:
            left = deadline - time.monotonic()
            if run_id is not None and left > 0:
                # Bounded too: an end entry lost with a Redis primary (docs/operations.md) is
                # found in the row at the next read.
                end = await _run_end(hub, run_id, min(left, RECHECK_SECONDS))
                if end is not None and "run" in end.data:
                    return answer_of(end.data["run"]), run_id
                waited, run_id = run_id, None
            if news is None:  # listening before the row is read: no news can fall between
                news = await context.calls.listen(job.owner_id, job.call_id)
            call = await asyncio.to_thread(_call_row, context.services, job)
            left = deadline - time.monotonic()
            if call.status not in OPEN_STATES or left <= 0:
                return call, waited
            if call.status == CallStatus.RUNNING and call.run_id:
                run_id = call.run_id
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(left, RECHECK_SECONDS)):
                    await news.wait()
            news.clear()
    finally:
        if news is not None:
            context.calls.forget(job.owner_id, job.call_id, news)


async def _run_end(hub: StreamHub, run_id: str, seconds: float) -> Event | None:
    """The run's end entry, once written, or None when `seconds` pass first."""
    subscription, events = await hub.subscribe(naming.run_end(run_id), "0-0")
    try:
        deadline = time.monotonic() + seconds
        while not events:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            events = await subscription.next(left)
        return events[0]
    finally:
        subscription.close()

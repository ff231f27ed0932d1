"""Redis commands held for a request's next round trip.

Within `holding()`, a writer that would send commands in a round trip of their own (a call's
owner events and the decision's count, relay/feed.py) may `hold` them instead: the block's next
round trip that takes them (`take`) puts them on its own pipeline first. A tool call that waits
for its run so sends them with the wait's first read (relay.streams.wait_for_end). What no
round trip took is sent, each in its own round trip, as the block ends.

Commands are held as functions that put them on a pipeline, so they travel through redis-py's
public pipeline API.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

Add = Callable[[Any], object]  # puts commands on a pipeline


@dataclass(frozen=True)
class _Held:
    add: Add
    alone: Callable[[], object]  # sends them in a round trip of their own


# The commands held in this block; outside one None.
_held: ContextVar[list[_Held] | None] = ContextVar("skillfleet_held", default=None)


@contextmanager
def holding() -> Iterator[None]:
    """Let `hold` keep commands within the block; those still held at its end are sent."""
    token = _held.set([])
    try:
        yield
    finally:
        send_held()
        _held.reset(token)


def hold(add: Add, alone: Callable[[], object]) -> bool:
    """Keep `add`'s commands for a later round trip of this `holding` block (`alone` sends
    them if none takes them); False outside one."""
    held = _held.get()
    if held is None:
        return False
    held.append(_Held(add, alone))
    return True


def take() -> list[Add]:
    """What is held so far, to put on one's own pipeline first; it is no longer held."""
    held = _held.get()
    if not held:
        return []
    taken = [item.add for item in held]
    held.clear()
    return taken


def send_held() -> None:
    """Send what is held now, each in a round trip of its own."""
    held = _held.get()
    while held:
        held.pop(0).alone()


def recorded(*adds: Add) -> Add:
    """Call `adds` now, on a stand-in that records the pipeline commands they ask for; the
    function returned puts those commands on a real pipeline later.

    A writer's side effects (a count marking itself sent) happen when it is held, as they would
    when its commands were put on a pipeline at once.
    """
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    class Recorder:
        def __getattr__(self, name: str) -> Callable[..., Recorder]:
            def command(*args: Any, **kwargs: Any) -> Recorder:
                calls.append((name, args, kwargs))
                return self

            return command

    recorder = Recorder()
    for add in adds:
        add(recorder)

    def replay(pipe: Any) -> None:
        for name, args, kwargs in calls:
            getattr(pipe, name)(*args, **kwargs)

    return replay

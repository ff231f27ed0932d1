"""What a view hands to the live tier (api/live.py): a stream to follow or a call to wait for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class FollowRun:
    run_id: str
    after: str


@dataclass(frozen=True)
class FollowTurn:
    turn_id: str
    after: str


@dataclass(frozen=True)
class FollowChat:
    """A chat turn's stream in the AI SDK's UI message stream protocol (api/chatstream.py)."""

    turn_id: str


@dataclass(frozen=True)
class FollowFeed:
    owner_id: int
    after: str  # an entry id, or "$" for only what comes next


@dataclass(frozen=True)
class WaitCall:
    owner_id: int
    call_id: str
    run_id: str | None
    seconds: float
    shape: Literal["envelope", "call"]  # POST /api/tools/<tool> or GET /api/calls/<id>
    # A client that leaves while the call waits for the owner's approval withdraws it.
    withdraw: bool = True


Job = FollowRun | FollowTurn | FollowChat | FollowFeed | WaitCall


def kind_of(job: Job) -> str:
    """The job's label in skillfleet_sse_streams_open."""
    kinds = {
        FollowRun: "run",
        FollowTurn: "turn",
        FollowChat: "chat",
        FollowFeed: "feed",
        WaitCall: "wait",
    }
    return kinds[type(job)]

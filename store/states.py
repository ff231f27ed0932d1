"""Every state machine of skillfleet: each one's states and the moves it allows.

Calls, runs, job runs, turns, approvals and edit plans each keep a `status`. Its values are the
enum here; the schema refuses any other (a CHECK constraint built by `check`); and only the
writers in `store/lifecycle/` change it, each by a conditional UPDATE from the states that may
move to the new one (`Machine.sources`), so of two writers racing exactly one wins and a move
the table does not list changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

from store.errors import StoreError

S = TypeVar("S", bound=StrEnum)


class IllegalTransition(StoreError):
    """Raised when a writer asks for a move its state machine does not allow."""

    code = "illegal_transition"
    status = 409


class CallStatus(StrEnum):
    DECIDING = "deciding"
    PENDING_APPROVAL = "pending_approval"
    PENDING_QUESTION = "pending_question"  # ask_owner / request_secret: waits for an answer
    RUNNING = "running"
    DONE = "done"
    DENIED = "denied"
    FAILED = "failed"
    EXPIRED = "expired"


class RunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"


class JobRunStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNANSWERED = "unanswered"
    SKIPPED = "skipped"
    INTERRUPTED = "interrupted"


class TurnStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    TIMED_OUT = "timed_out"
    INTERRUPTED = "interrupted"


class ApprovalStatus(StrEnum):
    PENDING = "pending"
    ANSWERING = "answering"  # claimed by one answer; the others find it taken
    APPROVED = "approved"
    APPROVED_FOR_CHAT = "approved_for_chat"
    DENIED = "denied"
    EXPIRED = "expired"
    STALE = "stale"
    WITHDRAWN = "withdrawn"  # the agent stopped waiting for it: nothing runs, nobody answers


class QuestionStatus(StrEnum):
    PENDING = "pending"
    ANSWERING = "answering"  # claimed by one answer; the others find it taken
    ANSWERED = "answered"
    UNANSWERED = "unanswered"  # nobody answered in time
    CANCELLED = "cancelled"  # the turn or job run that asked was stopped


class EditPlanStatus(StrEnum):
    PENDING = "pending"
    APPLIED = "applied"
    DENIED = "denied"
    STALE = "stale"
    FAILED = "failed"
    EXPIRED = "expired"


@dataclass(frozen=True)
class Machine(Generic[S]):
    """One state machine: the states a row is created in and the moves from each state."""

    name: str
    table: str
    states: type[S]
    initial: tuple[S, ...]
    moves: Mapping[S, frozenset[S]]

    def __post_init__(self) -> None:
        unknown = {s for targets in self.moves.values() for s in targets} - set(self.states)
        assert not unknown and set(self.moves) <= set(self.states), (self.name, unknown)

    @property
    def ends(self) -> tuple[S, ...]:
        """The states nothing moves out of."""
        return tuple(s for s in self.states if not self.moves.get(s))

    @property
    def open(self) -> tuple[S, ...]:
        """The states a row can still leave."""
        return tuple(s for s in self.states if self.moves.get(s))

    def allows(self, old: str, new: str) -> bool:
        return new in self.moves.get(self.states(old), frozenset())

    def sources(self, new: S) -> tuple[S, ...]:
        """The states that may move to `new`: a writer's UPDATE matches only these."""
        found = tuple(s for s in self.states if new in self.moves.get(s, frozenset()))
        if not found:
            raise IllegalTransition(f"No {self.name} may move to {new}.")
        return found

    def check(self, old: str, new: S) -> S:
        """`new`, if a row in `old` may move there; else IllegalTransition."""
        if not self.allows(old, new):
            raise IllegalTransition(f"A {self.name} that is {old} can't become {new}.")
        return new

    def created(self, state: S) -> S:
        """`state`, if a new row may start in it; else IllegalTransition."""
        if state not in self.initial:
            raise IllegalTransition(f"A {self.name} is never created {state}.")
        return state


def _moves(pairs: Iterable[tuple[S, Iterable[S]]]) -> dict[S, frozenset[S]]:
    return {source: frozenset(targets) for source, targets in pairs}


_C = CallStatus
CALLS = Machine(
    "tool call",
    "tool_calls",
    CallStatus,
    # A call is decided in memory, then saved in what it became: its first move is its row.
    initial=(_C.DECIDING,),
    moves=_moves(
        [
            (
                _C.DECIDING,
                [
                    _C.PENDING_APPROVAL,
                    _C.PENDING_QUESTION,
                    _C.RUNNING,
                    _C.DONE,
                    _C.DENIED,
                    _C.FAILED,
                ],
            ),
            (
                _C.PENDING_APPROVAL,
                [_C.PENDING_QUESTION, _C.RUNNING, _C.DONE, _C.DENIED, _C.FAILED, _C.EXPIRED],
            ),
            (_C.PENDING_QUESTION, [_C.DONE, _C.FAILED, _C.EXPIRED]),
            (_C.RUNNING, [_C.DONE, _C.FAILED]),
        ]
    ),
)

_R = RunStatus
RUNS = Machine(
    "run",
    "runs",
    RunStatus,
    initial=(_R.QUEUED,),
    moves=_moves(
        [
            (_R.QUEUED, [_R.RUNNING, _R.CANCELLED, _R.FAILED]),
            (_R.RUNNING, [_R.SUCCEEDED, _R.FAILED, _R.TIMED_OUT, _R.CANCELLED, _R.INTERRUPTED]),
        ]
    ),
)

_J = JobRunStatus
JOB_RUNS = Machine(
    "job run",
    "job_runs",
    JobRunStatus,
    initial=(_J.QUEUED, _J.SKIPPED),
    moves=_moves(
        [
            (_J.QUEUED, [_J.RUNNING, _J.FAILED]),
            (_J.RUNNING, [_J.WAITING, _J.SUCCEEDED, _J.FAILED, _J.UNANSWERED, _J.INTERRUPTED]),
            (_J.WAITING, [_J.RUNNING, _J.FAILED, _J.UNANSWERED]),
        ]
    ),
)

_T = TurnStatus
TURNS = Machine(
    "turn",
    "turns",
    TurnStatus,
    initial=(_T.QUEUED,),
    moves=_moves(
        [
            (_T.QUEUED, [_T.RUNNING, _T.STOPPED, _T.FAILED]),
            (_T.RUNNING, [_T.SUCCEEDED, _T.FAILED, _T.STOPPED, _T.TIMED_OUT, _T.INTERRUPTED]),
        ]
    ),
)

_A = ApprovalStatus
APPROVALS = Machine(
    "approval",
    "approvals",
    ApprovalStatus,
    initial=(_A.PENDING,),
    moves=_moves(
        [
            (_A.PENDING, [_A.ANSWERING, _A.EXPIRED, _A.WITHDRAWN]),
            (_A.ANSWERING, [_A.APPROVED, _A.APPROVED_FOR_CHAT, _A.DENIED, _A.STALE]),
            # Approved, but the skill moved before the call could run: void.
            (_A.APPROVED, [_A.STALE]),
            (_A.APPROVED_FOR_CHAT, [_A.STALE]),
        ]
    ),
)

_Q = QuestionStatus
QUESTIONS = Machine(
    "question",
    "questions",
    QuestionStatus,
    initial=(_Q.PENDING,),
    moves=_moves(
        [
            (_Q.PENDING, [_Q.ANSWERING, _Q.UNANSWERED, _Q.CANCELLED]),
            (_Q.ANSWERING, [_Q.ANSWERED, _Q.PENDING]),  # back to pending when the answer fails
        ]
    ),
)

_E = EditPlanStatus
EDIT_PLANS = Machine(
    "edit plan",
    "edit_plans",
    EditPlanStatus,
    initial=(_E.PENDING,),
    moves=_moves([(_E.PENDING, [_E.APPLIED, _E.DENIED, _E.STALE, _E.FAILED, _E.EXPIRED])]),
)

MACHINES: tuple[Machine[Any], ...] = (
    CALLS, RUNS, JOB_RUNS, TURNS, APPROVALS, QUESTIONS, EDIT_PLANS,
)  # fmt: skip


def check(states: type[StrEnum]) -> str:
    """The SQL of the CHECK constraint that holds a `status` column to `states`."""
    return "status IN (" + ", ".join(f"'{s}'" for s in states) + ")"


def diagram(machine: Machine[Any]) -> str:
    """The machine as a mermaid state diagram (docs/architecture.md shows each one)."""
    lines = ["stateDiagram-v2"]
    lines += [f"    [*] --> {state}" for state in machine.initial]
    for source in machine.states:
        lines += [
            f"    {source} --> {target}"
            for target in machine.states
            if target in machine.moves.get(source, frozenset())
        ]
    lines += [f"    {state} --> [*]" for state in machine.ends]
    return "\n".join(lines)


def diagrams() -> str:
    """Every machine's diagram under a heading naming its table, as docs/architecture.md has
    them between its `state machines` markers."""
    return "\n\n".join(
        f"### {machine.name.capitalize()}s (`{machine.table}.status`)\n\n"
        f"```mermaid\n{diagram(machine)}\n```"
        for machine in MACHINES
    )

"""The sampler of skillfleet's traces (imported only when traces are on, store/tracing.py).

A trace is a request, a task or a call. Without a parent, a Redis command or a SQL statement
(a heartbeat, the stream hub's reads, the Celery transport's upkeep) is no trace of its own, nor
is a task that runs on the clock (housekeeping every few seconds): they would bury the calls.
Nor is the SQLAlchemy instrumentation's `connect` span, a connection taken from the pool, which
says nothing the statements after it don't, at the cost of a span in every transaction.
Everything else is as OTEL_TRACES_SAMPLER chose.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.context import Context
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind, get_current_span
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes

POOL_CONNECT = "connect"
DROPPED = SamplingResult(Decision.DROP)


class InTraces(Sampler):
    """`chosen`'s decisions, but no root span for a client call or for a span named in
    `quiet`."""

    def __init__(self, chosen: Sampler, quiet: frozenset[str]) -> None:
        self.chosen = chosen
        self.quiet = quiet

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        if kind == SpanKind.CLIENT and name == POOL_CONNECT:
            return DROPPED
        root = not get_current_span(parent_context).get_span_context().is_valid
        if root and (kind == SpanKind.CLIENT or name in self.quiet):
            return DROPPED
        return self.chosen.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        return f"InTraces{{{self.chosen.get_description()}}}"

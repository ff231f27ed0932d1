"""The sampler of skillfleet's traces (imported only when traces are on, store/tracing.py).

A trace is a request, a task or a call. Without a parent, a Redis command or a SQL statement
(a heartbeat, the stream hub's reads, the Celery transport's upkeep) is no trace of its own, nor
is a task that runs on the clock (housekeeping every few seconds): they would bury the calls.
Everything else is as OTEL_TRACES_SAMPLER chose.

It runs for every span a process starts (a run makes some thirty), so the common case is
answered at once: a span under a parent, with a `parentbased_*` sampler (the default), follows
its parent's decision as the SDK's ParentBased would with its default delegates, without
looking the parent up a second time and asking a delegate.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.context import Context
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind, get_current_span
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes

DROPPED = SamplingResult(Decision.DROP)


class InTraces(Sampler):
    """`chosen`'s decisions, but no root span for a client call or for a span named in
    `quiet`. `follows_parent` says `chosen` is a ParentBased sampler with its default
    delegates: a span with a parent is then sampled when its parent is."""

    def __init__(self, chosen: Sampler, quiet: frozenset[str], follows_parent: bool) -> None:
        self.chosen = chosen
        self.quiet = quiet
        self.follows_parent = follows_parent

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
        parent = get_current_span(parent_context).get_span_context()
        if not parent.is_valid:
            if kind == SpanKind.CLIENT or name in self.quiet:
                return DROPPED
        elif self.follows_parent:
            if parent.trace_flags.sampled:
                return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes, parent.trace_state)
            return SamplingResult(Decision.DROP, None, parent.trace_state)
        return self.chosen.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        return f"InTraces{{{self.chosen.get_description()}}}"

"""Fleet metrics read from the database and Redis at scrape time.

Counts that several processes on several machines change (calls, runs, approvals, queues,
heartbeats, and the fleet counters of relay/counters.py: policy decisions, deliveries) are read
from where they are kept, so every API process gives the same totals on every scrape. Metrics of
the API processes themselves (open SSE streams) are Prometheus multiprocess metrics: see
api/metrics.py.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

import redis
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from relay import counters, naming
from relay.connections import reply_text
from store.db import SessionFactory
from store.lifecycle.runs import END_STATES
from store.models import Approval, Node, Run, ToolCall
from store.states import ApprovalStatus

DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
QUEUE_WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# A queue's messages are a Redis list named like the queue, and those of priority steps 3, 6 and
# 9 lists with these suffixes: the layout Celery's documentation gives for inspecting Redis
# queues ("Monitoring and Management", "Redis message priorities"), not a private name.
PRIORITY_SUFFIXES = ("", "\x06\x163", "\x06\x166", "\x06\x169")


class FleetCollector(Collector):
    """Collects the fleet's state from the database and Redis each time it is scraped."""

    def __init__(self, sessions: SessionFactory, client: redis.Redis) -> None:
        self.sessions = sessions
        self.client = client

    def collect(self) -> Iterator[Metric]:
        with self.sessions() as session:
            calls = session.execute(
                select(ToolCall.tool, ToolCall.status, func.count()).group_by(
                    ToolCall.tool, ToolCall.status
                )
            ).all()
            waiting = session.scalar(
                select(func.count())
                .select_from(Approval)
                .where(Approval.status == ApprovalStatus.PENDING)
            )
            runs = session.execute(
                select(Run.execution, Run.status, func.count())
                .where(Run.status.in_(END_STATES))
                .group_by(Run.execution, Run.status)
            ).all()
            times = session.execute(
                select(Run.execution, Run.created_at, Run.started_at, Run.finished_at).where(
                    Run.started_at.is_not(None)
                )
            ).all()
            nodes = list(session.scalars(select(Node.name)))
        yield _counter(
            "skillfleet_tool_calls", "Tool calls by tool and status.", ["tool", "status"], calls
        )
        approvals = GaugeMetricFamily(
            "skillfleet_approvals_waiting", "Approvals waiting for the owner's answer."
        )
        approvals.add_metric([], float(waiting or 0))
        yield approvals
        yield _counter(
            "skillfleet_runs", "Ended runs by runner and final state.", ["runner", "state"], runs
        )
        yield from _run_histograms(times)
        yield from self._redis_metrics(nodes)

    def _redis_metrics(self, nodes: list[str]) -> Iterator[Metric]:
        try:
            roles = {naming.CONTROL, naming.SPARK, naming.SANDBOX}
            # The Spark and sandbox workers hold node tokens under their role's name.
            queues = sorted(roles | {naming.node_queue(n) for n in nodes if n not in roles})
            with self.client.pipeline(transaction=False) as pipe:
                for queue in queues:
                    for suffix in PRIORITY_SUFFIXES:
                        pipe.llen(queue + suffix)
                lengths = pipe.execute()
            beats: list[Any] = list(
                self.client.zrange(naming.all_workers(), 0, -1, withscores=True)
            )
            counted = counters.read(self.client)
        except redis.RedisError:
            return  # Redis is away: the database's metrics still answer
        depth = GaugeMetricFamily(
            "skillfleet_queue_depth", "Messages waiting in each run queue.", labels=["queue"]
        )
        steps = len(PRIORITY_SUFFIXES)
        for index, queue in enumerate(queues):
            depth.add_metric([queue], float(sum(lengths[index * steps : (index + 1) * steps])))
        yield depth
        yield _heartbeat_ages(beats)
        for counter, counts in counted:
            yield _counter(
                counter.name,
                counter.documentation,
                list(counter.labels),
                ((*values, count) for values, count in sorted(counts.items())),
            )


def _counter(
    name: str, documentation: str, labels: list[str], rows: Iterable[Any]
) -> CounterMetricFamily:
    family = CounterMetricFamily(name, documentation, labels=labels)
    for *values, count in rows:
        family.add_metric([str(v) for v in values], float(count))
    return family


def _heartbeat_ages(beats: Iterable[Any]) -> GaugeMetricFamily:
    """Seconds since each node's (or role's) newest heartbeat, from instance ids `name@…`."""
    newest: dict[str, float] = {}
    for member, score in beats:
        instance = reply_text(member)
        name = instance.split("@", 1)[0]
        newest[name] = max(newest.get(name, 0.0), float(score))
    family = GaugeMetricFamily(
        "skillfleet_node_heartbeat_age_seconds",
        "Seconds since each node's (or worker role's) last heartbeat.",
        labels=["node"],
    )
    now = time.time()
    for name, beat in sorted(newest.items()):
        family.add_metric([name], max(0.0, now - beat))
    return family


def _run_histograms(
    rows: Iterable[tuple[str, datetime, datetime | None, datetime | None]],
) -> Iterator[HistogramMetricFamily]:
    durations: dict[str, list[float]] = defaultdict(list)
    waits: dict[str, list[float]] = defaultdict(list)
    for runner, created, started, finished in rows:
        if started is None:
            continue
        waits[runner].append(max(0.0, (started - created).total_seconds()))
        if finished is not None:
            durations[runner].append(max(0.0, (finished - started).total_seconds()))
    yield _histogram(
        "skillfleet_run_duration_seconds",
        "Seconds from a run's start to its end, by runner.",
        DURATION_BUCKETS,
        durations,
    )
    yield _histogram(
        "skillfleet_run_queue_wait_seconds",
        "Seconds a run waited in its queue before a worker started it, by runner.",
        QUEUE_WAIT_BUCKETS,
        waits,
    )


def _histogram(
    name: str, documentation: str, bounds: tuple[float, ...], samples: dict[str, list[float]]
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, documentation, labels=["runner"])
    for runner, values in sorted(samples.items()):
        buckets = [(_bound(b), float(sum(1 for v in values if v <= b))) for b in bounds]
        buckets.append(("+Inf", float(len(values))))
        family.add_metric([runner], buckets, sum(values))
    return family


def _bound(value: float) -> str:
    return str(float(value))

"""Fleet metrics read from the database and Redis at scrape time.

Counts that several processes on several machines change (calls, runs, approvals, queues,
heartbeats, and the fleet counters and run histograms of relay/counters.py: policy decisions,
deliveries, run durations and queue waits) are read from where they are kept, so every API
process gives the same totals on every scrape. Metrics of the API processes themselves (open
SSE streams) are Prometheus multiprocess metrics: see api/metrics.py.

A scrape costs the same with 10 nodes or 1,000: the per-node series are capped at
METRICS_NODE_SERIES (store/limits.py), the node queues with the most runs waiting and the nodes
whose heartbeats ran out first, and the fleet-wide series count the rest
(docs/operations.md#metrics).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
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

from relay import counters, heartbeat, naming
from store.db import SessionFactory
from store.lifecycle.runs import END_STATES
from store.limits import METRICS_NODE_SERIES
from store.models import Approval, Run, ToolCall
from store.states import ApprovalStatus, RunStatus

# The queues of the worker roles, read from Redis; node queues' depths come from the runs table.
RUNNER_QUEUES = (naming.CONTROL, naming.SANDBOX, naming.SPARK)
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
            # The runs waiting, by queue: as many rows as queues with a backlog (runs.status
            # is indexed), however many runs ended before.
            queued = session.execute(
                select(Run.queue, func.count())
                .where(Run.status == RunStatus.QUEUED)
                .group_by(Run.queue)
            ).all()
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
        yield from self._redis_metrics({queue: int(count) for queue, count in queued})

    def _redis_metrics(self, queued: dict[str, int]) -> Iterator[Metric]:
        try:
            with self.client.pipeline(transaction=False) as pipe:
                for queue in RUNNER_QUEUES:
                    for suffix in PRIORITY_SUFFIXES:
                        pipe.llen(queue + suffix)
                lengths = pipe.execute()
            health = heartbeat.fleet_health(self.client, METRICS_NODE_SERIES)
            counted = counters.read(self.client)
            observed = counters.read_histograms(self.client)
        except redis.RedisError:
            return  # Redis is away: the database's metrics still answer
        steps = len(PRIORITY_SUFFIXES)
        depths = {
            queue: sum(lengths[index * steps : (index + 1) * steps])
            for index, queue in enumerate(RUNNER_QUEUES)
        }
        yield from _queue_depths(depths, queued)
        yield from _heartbeats(health)
        for counter, counts in counted:
            yield _counter(
                counter.name,
                counter.documentation,
                list(counter.labels),
                ((*values, count) for values, count in sorted(counts.items())),
            )
        for histogram, found in observed:
            family = HistogramMetricFamily(
                histogram.name, histogram.documentation, labels=list(histogram.labels)
            )
            for values, seen in found.items():
                buckets = [(bound, float(count)) for bound, count in seen.buckets]
                family.add_metric(list(values), buckets, seen.sum)
            yield family


def _queue_depths(runners: dict[str, int], queued: dict[str, int]) -> Iterator[Metric]:
    """The worker roles' queues, and the METRICS_NODE_SERIES node queues with the most runs
    waiting; every node queue's runs together in `skillfleet_node_runs_queued`."""
    depth = GaugeMetricFamily(
        "skillfleet_queue_depth",
        "Messages waiting in each worker role's queue (control, spark, sandbox), and runs "
        f"waiting in each node queue (the {METRICS_NODE_SERIES} with the most).",
        labels=["queue"],
    )
    for queue, count in sorted(runners.items()):
        depth.add_metric([queue], float(count))
    nodes = {
        queue: count for queue, count in queued.items() if queue.startswith(naming.NODE_PREFIX)
    }
    deepest = sorted(nodes.items(), key=lambda item: (-item[1], item[0]))[:METRICS_NODE_SERIES]
    for queue, count in sorted(deepest):
        depth.add_metric([queue], float(count))
    yield depth
    total = GaugeMetricFamily(
        "skillfleet_node_runs_queued", "Runs waiting in every node queue together."
    )
    total.add_metric([], float(sum(nodes.values())))
    yield total


def _heartbeats(health: heartbeat.FleetHealth) -> Iterator[Metric]:
    """Each of the METRICS_NODE_SERIES nodes (or worker roles) whose newest heartbeat ran out
    first: seconds past its alive window (0 while alive); and how many are alive or overdue."""
    ages = GaugeMetricFamily(
        "skillfleet_node_heartbeat_age_seconds",
        "Seconds since each node's (or worker role's) newest heartbeat ran past its alive "
        f"window, 0 while alive: the {METRICS_NODE_SERIES} that ran out first.",
        labels=["node"],
    )
    now = time.time()
    for name, until in sorted(health.worst):
        ages.add_metric([name], max(0.0, now - until))
    yield ages
    states = GaugeMetricFamily(
        "skillfleet_node_heartbeats",
        "Nodes and worker roles whose newest heartbeat still counts them alive (alive), or "
        "ran out within the last hour (overdue).",
        labels=["state"],
    )
    states.add_metric(["alive"], float(health.alive))
    states.add_metric(["overdue"], float(health.overdue))
    yield states


def _counter(
    name: str, documentation: str, labels: list[str], rows: Iterable[Any]
) -> CounterMetricFamily:
    family = CounterMetricFamily(name, documentation, labels=labels)
    for *values, count in rows:
        family.add_metric([str(v) for v in values], float(count))
    return family

"""GET /metrics: Prometheus metrics of the whole fleet, the same totals from every API process.

Open when the API listens on loopback only (or SKILLFLEET_METRICS_PUBLIC=1); otherwise it needs
the metrics token or an owner's token.

Two sources: the fleet's state and the fleet counters (policy decisions, deliveries: see
relay/counters.py) read from the database and Redis at scrape time (api/collector.py), and the
API processes' own metrics (open SSE streams, argument repairs). Under gunicorn these are
Prometheus multiprocess metrics (PROMETHEUS_MULTIPROC_DIR, set by skillfleet/serving.py), summed
over every worker process; in a single process they are the default registry.
"""

from __future__ import annotations

from flask import Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Gauge,
    generate_latest,
)
from prometheus_client.multiprocess import MultiProcessCollector

from api.auth import require_metrics_access
from api.blueprint import Blueprint
from api.collector import FleetCollector
from api.schemas import file_response
from api.services import services

blp = Blueprint("metrics", __name__, description="Prometheus metrics")

SSE_STREAMS_OPEN = Gauge(
    "skillfleet_sse_streams_open",
    "Streams open now, by stream (run, turn, chat: /api/chat, feed: the owner's /api/events), "
    "and `?wait=` "
    "long-polls waiting (wait).",
    ["stream"],
    multiprocess_mode="livesum",
)
SSE_STREAM_KINDS = ("run", "turn", "chat", "feed", "wait")
for _kind in SSE_STREAM_KINDS:  # shown at 0 before the first stream opens, in every process
    SSE_STREAMS_OPEN.labels(_kind)


@blp.route("/metrics")
@blp.doc(security=[])
@blp.response(200, content_type="text/plain", description="Metrics in Prometheus' text format")
@blp.doc(responses={"200": file_response("Metrics in Prometheus' text format", "text/plain")})
def metrics() -> Response:
    """Prometheus metrics in the text format"""
    require_metrics_access()
    found = services()
    if found.settings.metrics_dir is not None:
        processes = CollectorRegistry()
        MultiProcessCollector(processes, path=str(found.settings.metrics_dir))  # type: ignore[no-untyped-call]
    else:
        processes = REGISTRY
    fleet = CollectorRegistry(auto_describe=False)
    fleet.register(FleetCollector(found.sessions, found.redis))
    body = generate_latest(processes) + generate_latest(fleet)
    return Response(body, headers={"Content-Type": CONTENT_TYPE_LATEST})

"""GET /metrics: Prometheus metrics of this process.

Open when the API listens on loopback only (or SKILLFLEET_METRICS_PUBLIC=1); otherwise it needs
the metrics token or an owner's token.
"""

from __future__ import annotations

from flask import Response
from flask_smorest import Blueprint
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.auth import require_metrics_access
from api.schemas import file_response

blp = Blueprint("metrics", __name__, description="Prometheus metrics")


@blp.route("/metrics")
@blp.doc(security=[])
@blp.response(200, content_type="text/plain", description="Metrics in Prometheus' text format")
@blp.doc(responses={"200": file_response("Metrics in Prometheus' text format", "text/plain")})
def metrics() -> Response:
    """Prometheus metrics in the text format"""
    require_metrics_access()
    return Response(generate_latest(), mimetype=CONTENT_TYPE_LATEST)

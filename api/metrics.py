"""GET /metrics: Prometheus metrics of this process."""

from __future__ import annotations

from flask import Response
from flask_smorest import Blueprint
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

blp = Blueprint("metrics", __name__, description="Prometheus metrics")


@blp.route("/metrics")
@blp.doc(security=[])
@blp.response(200, content_type="text/plain", description="Metrics in Prometheus' text format")
def metrics() -> Response:
    """Prometheus metrics in the text format"""
    return Response(generate_latest(), mimetype=CONTENT_TYPE_LATEST)

"""Prometheus metrics of the broker, registered on the default registry (multiprocess under
gunicorn: see skillfleet/serving.py). Policy decisions are fleet counters (relay/counters.py)."""

from prometheus_client import Counter

ARGUMENTS_COERCED = Counter(
    "skillfleet_skill_arguments_coerced_total",
    "Script calls whose arguments were repaired: kind=string (JSON text parsed), "
    "kind=node (a top-level node moved inside).",
    ["kind"],
)

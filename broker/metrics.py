"""Prometheus metrics of the broker, registered on the default registry (multiprocess under
gunicorn: see skillfleet/serving.py)."""

from prometheus_client import Counter

ARGUMENTS_COERCED = Counter(
    "skillfleet_skill_arguments_coerced_total",
    "Script calls whose arguments were repaired: kind=string (JSON text parsed), "
    "kind=node (a top-level node moved inside).",
    ["kind"],
)

POLICY_DECISIONS = Counter(
    "skillfleet_policy_decisions",
    "Policy decisions by the rule that gave them (default: the default action) and action.",
    ["rule", "action"],
)

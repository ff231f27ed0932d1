"""`celery -A workers.app …` (inspect, control, events) finds the workers' Celery app here.

It is the app every skillfleet process builds (relay/app.py), from the same settings; both
`-A workers.app` and `-A relay.app` name it.
"""

from __future__ import annotations

from typing import Any

from relay.app import command_app


def __getattr__(name: str) -> Any:
    """`celery -A workers.app` looks up `workers.app.celery`, built on first use."""
    if name == "celery":
        return command_app()
    raise AttributeError(name)

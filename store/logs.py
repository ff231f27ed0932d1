"""Log output of every skillfleet process: structlog lines filtered by SKILLFLEET_LOG_LEVEL.

Lines are JSON by default (SKILLFLEET_LOG_FORMAT=console for people reading a terminal). Tasks
and tool calls bind their ids (call_id, run_id, job_run_id) to the log context; argument content
and script output are never logged.
"""

from __future__ import annotations

import logging

import structlog


def configure_logging(level: str, log_format: str = "json") -> None:
    """Send structlog's lines through the standard library at `level` and above."""
    number = logging.getLevelNamesMapping()[level.upper()]
    logging.basicConfig(level=number, format="%(message)s")
    # Celery's two lines per task (received, succeeded) say what "run ended" says, at a cost on
    # every run; failures still show. SKILLFLEET_LOG_LEVEL=DEBUG brings them back.
    for name in ("celery.app.trace", "celery.worker.strategy"):
        logging.getLogger(name).setLevel(
            number if number <= logging.DEBUG else max(number, logging.WARNING)
        )
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if log_format == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", key="ts"),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(number),
        # Not cached: tests (and reconfiguration) must see every logger follow the config.
        cache_logger_on_first_use=False,
    )

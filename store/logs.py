"""Log output of every skillfleet process: structlog lines filtered by SKILLFLEET_LOG_LEVEL.

Lines are JSON by default (SKILLFLEET_LOG_FORMAT=console for people reading a terminal). Tasks
and tool calls bind their ids (call_id, run_id, job_run_id) to the log context; argument content
and script output are never logged. The API's request log (skillfleet/serving.py) has a logger
of its own, with the same shape of line.
"""

from __future__ import annotations

import logging

import structlog


def _renderer(log_format: str) -> structlog.types.Processor:
    if log_format == "json":
        return structlog.processors.JSONRenderer()
    return structlog.dev.ConsoleRenderer(colors=False)


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
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", key="ts"),
            structlog.processors.format_exc_info,
            _renderer(log_format),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(number),
        # Not cached: tests (and reconfiguration) must see every logger follow the config.
        cache_logger_on_first_use=False,
    )


def line_logger(name: str, log_format: str = "json") -> structlog.typing.FilteringBoundLogger:
    """A logger whose lines, shaped as every other (`ts`, `level`, `event`), go to the standard
    library's logger `name` and its own handlers at INFO, whatever SKILLFLEET_LOG_LEVEL says:
    the API's request log, a file of its own under `skillfleet up`."""
    lines = logging.getLogger(name)
    lines.setLevel(logging.INFO)
    logger: structlog.typing.FilteringBoundLogger = structlog.wrap_logger(
        lines,
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", key="ts"),
            _renderer(log_format),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        cache_logger_on_first_use=True,
    )
    return logger

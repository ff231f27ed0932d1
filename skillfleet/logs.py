"""Log output of every skillfleet process: structlog lines filtered by SKILLFLEET_LOG_LEVEL."""

from __future__ import annotations

import logging

import structlog


def configure_logging(level: str) -> None:
    """Send structlog's lines through the standard library at `level` and above."""
    number = logging.getLevelNamesMapping()[level.upper()]
    logging.basicConfig(level=number, format="%(message)s")
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(number),
        # Not cached: tests (and reconfiguration) must see every logger follow the config.
        cache_logger_on_first_use=False,
    )

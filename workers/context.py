"""The per-process state of a worker, built once from the Celery app's settings and role."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import redis

from skillfleet.settings import Settings
from store.db import SessionFactory, make_engine, make_sessions
from store.limits import REDIS_CONNECT_TIMEOUT_SECONDS, REDIS_SOCKET_TIMEOUT_SECONDS
from workers.execute import WorkerContext

_lock = threading.Lock()


@dataclass
class ControlContext:
    sessions: SessionFactory
    redis: redis.Redis


def redis_client(settings: Settings) -> redis.Redis:
    """A client that fails fast when Redis is away; blocking reads use streams.blocking_client."""
    return redis.Redis.from_url(
        settings.redis,
        socket_connect_timeout=REDIS_CONNECT_TIMEOUT_SECONDS,
        socket_timeout=REDIS_SOCKET_TIMEOUT_SECONDS,
        health_check_interval=30,
    )


def worker_context(app: Any) -> WorkerContext:
    """The context the worker command attached to the app before it started consuming."""
    context: WorkerContext | None = getattr(app, "skillfleet_worker", None)
    if context is None:
        raise RuntimeError("This worker was not started with `skillfleet worker …`.")
    return context


def control_context(app: Any) -> ControlContext:
    with _lock:
        context: ControlContext | None = getattr(app, "skillfleet_control", None)
        if context is None:
            settings: Settings = app.skillfleet_settings
            context = ControlContext(
                make_sessions(make_engine(settings.database)), redis_client(settings)
            )
            app.skillfleet_control = context
        return context

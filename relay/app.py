"""The Celery app, built by a factory from the settings (never at import time)."""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.schedules import crontab

from relay import naming, transport
from skillfleet.settings import Settings

REAP_EVERY_SECONDS = 5.0
EXPIRE_EVERY_SECONDS = 30.0
JOB_TICK_SECONDS = 60.0
NOTIFY_EVERY_SECONDS = 5.0


def kombu_url(redis_url: str) -> str:
    """redis-py's `unix://path` is kombu's `redis+socket://path`."""
    if redis_url.startswith("unix://"):
        return "redis+socket://" + redis_url.removeprefix("unix://")
    return redis_url


def create_celery(settings: Settings, **overrides: Any) -> Celery:
    """The Celery app for every skillfleet process: Redis broker and backend, late acks."""
    transport.register()
    app = Celery(
        "skillfleet",
        broker=transport.broker_url(settings.redis),
        backend=kombu_url(settings.redis),
        # Named, not imported: only a worker process loads its tasks.
        include=["workers.tasks"],
    )
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        worker_disable_rate_limits=True,  # no task has a rate limit; skip the bookkeeping
        task_ignore_result=True,
        task_default_queue=naming.CONTROL,
        task_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        # A worker waits out a Redis outage of any length and serves again by itself.
        broker_connection_max_retries=None,
        # An unacknowledged message comes back after this long; claims make redelivery harmless.
        broker_transport_options={"visibility_timeout": settings.visibility_timeout},
        result_backend_transport_options={"visibility_timeout": settings.visibility_timeout},
        worker_hijack_root_logger=False,
        # Flower turns task events on when it starts (enable_events); off, they cost every run
        # three extra publishes.
        worker_send_task_events=settings.task_events,
        task_send_sent_event=settings.task_events,
        beat_schedule={
            # At the start of every minute, so a job's cron time is met within seconds.
            "job-tick": {
                "task": "skillfleet.job_tick",
                "schedule": crontab(),
                "options": {"queue": naming.CONTROL, "expires": JOB_TICK_SECONDS},
            },
            "reap-interrupted-runs": {
                "task": "skillfleet.reap",
                "schedule": REAP_EVERY_SECONDS,
                "options": {"queue": naming.CONTROL, "expires": REAP_EVERY_SECONDS},
            },
            "notify": {
                "task": "skillfleet.notify",
                "schedule": NOTIFY_EVERY_SECONDS,
                "options": {"queue": naming.CONTROL, "expires": NOTIFY_EVERY_SECONDS},
            },
            "expire-approvals": {
                "task": "skillfleet.expire_approvals",
                "schedule": EXPIRE_EVERY_SECONDS,
                "options": {"queue": naming.CONTROL, "expires": EXPIRE_EVERY_SECONDS},
            },
        },
    )
    app.conf.update(overrides)
    app.skillfleet_settings = settings  # read by workers.context
    return app


def __getattr__(name: str) -> Any:
    """`celery -A relay.app flower` finds `relay.app.celery`, built on first use."""
    if name == "celery":
        return create_celery(Settings.from_env())
    raise AttributeError(name)

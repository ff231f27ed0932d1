"""The Celery app, built by a factory from the settings (never at import time)."""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery
from celery.schedules import crontab

from relay import naming
from relay.fenced import kombu_redis
from store.settings import Settings

# Jobs are due on the minute (cron), so the tick that starts them comes at the start of each.
JOB_TICK_SECONDS = 60.0
# Beat entries that run on the clock, not because someone asked: their tasks send no task
# events (workers/tasks.py) and beat does not log sending them, so neither Flower nor beat's
# log fills with them.
QUIET_ENTRIES = ("housekeeping", "sweep")


def kombu_url(redis_url: str) -> str:
    """redis-py's `unix://path` is kombu's `redis+socket://path`."""
    if redis_url.startswith("unix://"):
        return "redis+socket://" + redis_url.removeprefix("unix://")
    return redis_url


def create_celery(settings: Settings, current: bool = True, **overrides: Any) -> Celery:
    """The Celery app for every skillfleet process: Redis broker and backend, late acks.

    `current=False` leaves the process's current app as it is (an app made only to send)."""
    broker = kombu_url(settings.redis)
    if settings.fenced_kombu:
        kombu_redis.register()
        broker = kombu_redis.broker_url(settings.redis)
    app = Celery(
        "skillfleet",
        broker=broker,
        backend=kombu_url(settings.redis),
        # Named, not imported: only a worker process loads its tasks.
        include=["workers.tasks"],
        set_as_current=current,
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
            # The housekeeping answers a lost worker's runs `interrupted` within seconds of its
            # last beat running out (relay/heartbeat.py); the sweep's work can wait a minute.
            "housekeeping": {
                "task": "skillfleet.housekeeping",
                "schedule": settings.housekeeping_seconds,
                "options": {"queue": naming.CONTROL, "expires": settings.housekeeping_seconds},
            },
            "sweep": {
                "task": "skillfleet.sweep",
                "schedule": settings.sweep_seconds,
                "options": {"queue": naming.CONTROL, "expires": settings.sweep_seconds},
            },
        },
    )
    app.conf.update(overrides)
    app.skillfleet_settings = settings  # read by workers.context
    return app


def create_beat(settings: Settings) -> Celery:
    """The app `skillfleet beat` runs: it sends no "task-sent" events (the workers report the
    tasks they get), and its log leaves out the sends of QUIET_ENTRIES."""
    logging.getLogger("celery.beat").addFilter(QuietEntries())
    return create_celery(settings, task_send_sent_event=False)


class QuietEntries(logging.Filter):
    """Drops beat's line "Scheduler: Sending due task <entry> (<task>)" for QUIET_ENTRIES."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        return not (
            isinstance(args, tuple)
            and args
            and args[0] in QUIET_ENTRIES
            and str(record.msg).startswith("Scheduler: Sending due task")
        )


def __getattr__(name: str) -> Any:
    """`celery -A relay.app flower` finds `relay.app.celery`, built on first use."""
    if name == "celery":
        return create_celery(Settings.from_env())
    raise AttributeError(name)

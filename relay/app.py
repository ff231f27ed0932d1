"""The Celery app, built by a factory from the settings (never at import time)."""

from __future__ import annotations

import functools
import logging
from typing import Any
from urllib.parse import quote

from celery import Celery
from celery.schedules import crontab

from relay import naming
from relay.connections import primary_options
from relay.fenced import kombu_redis
from store.limits import (
    BROKER_HEALTH_CHECK_SECONDS,
    REDIS_CONNECT_TIMEOUT_SECONDS,
    REDIS_SOCKET_TIMEOUT_SECONDS,
)
from store.settings import Settings

# Jobs are due on the minute (cron), so the tick that starts them comes at the start of each.
JOB_TICK_SECONDS = 60.0
# Beat entries that run on the clock, not because someone asked: their tasks send no task
# events (workers/tasks.py) and beat does not log sending them, so neither Flower nor beat's
# log fills with them.
QUIET_ENTRIES = ("housekeeping", "sweep")
QUIET_TASKS = ("skillfleet.housekeeping", "skillfleet.sweep")  # their tasks: no traces either


def kombu_url(redis_url: str) -> str:
    """redis-py's `unix://path` is kombu's `redis+socket://path`."""
    if redis_url.startswith("unix://"):
        return "redis+socket://" + redis_url.removeprefix("unix://")
    return redis_url


def sentinel_url(settings: Settings) -> str:
    """The `sentinel://` URL of kombu's and Celery's Sentinel transports: one URL a sentinel,
    each with `REDIS_URL`'s database and credentials (for the primary), joined by `;`."""
    options = primary_options(settings)
    auth = ""
    if options.get("password"):
        user = quote(options.get("username") or "", safe="")
        auth = f"{user}:{quote(options['password'], safe='')}@"
    db = int(options.get("db") or 0)
    return ";".join(
        f"sentinel://{auth}{f'[{host}]' if ':' in host else host}:{port}/{db}"
        for host, port in settings.redis_sentinels
    )


def create_celery(settings: Settings, current: bool = True, **overrides: Any) -> Celery:
    """The Celery app for every skillfleet process: Redis broker and backend (the primary the
    sentinels name, with sentinels), late acks.

    `current=False` leaves the process's current app as it is (an app made only to send)."""
    broker = backend = kombu_url(settings.redis)
    transport: str | None = None
    # With sentinels, the broker and the result backend ask them for the primary (kombu's and
    # Celery's `sentinel://` transports); every option below applies to both.
    sentinel_options: dict[str, Any] = {}
    if settings.redis_sentinels:
        broker = backend = sentinel_url(settings)
        sentinel_options = {
            "master_name": settings.redis_sentinel_master,
            "sentinel_kwargs": {
                "socket_connect_timeout": REDIS_CONNECT_TIMEOUT_SECONDS,
                "socket_timeout": REDIS_SOCKET_TIMEOUT_SECONDS,
            },
        }
    if settings.fenced_kombu:
        kombu_redis.register()
        if settings.redis_sentinels:
            transport = kombu_redis.SENTINEL_ALIAS
        else:
            broker = kombu_redis.broker_url(settings.redis)
    app = Celery(
        "skillfleet",
        broker=broker,
        backend=backend,
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
        broker_transport=transport,
        broker_transport_options={
            "visibility_timeout": settings.visibility_timeout,
            # A Redis that vanishes without closing its connections (its host or container
            # gone, as in a failover) would hold a publish, and a worker's BRPOP, on a socket
            # nothing answers: a publish gives up after the socket timeout, and kombu drops a
            # BRPOP whose reply is overdue by the health check's interval, so a consumer
            # reconnects (to the new primary) within about 1 + 2 x 5 s.
            "socket_connect_timeout": REDIS_CONNECT_TIMEOUT_SECONDS,
            "socket_timeout": REDIS_SOCKET_TIMEOUT_SECONDS,
            "socket_keepalive": True,
            "health_check_interval": BROKER_HEALTH_CHECK_SECONDS,
            **sentinel_options,
        },
        result_backend_transport_options={
            "visibility_timeout": settings.visibility_timeout,
            **sentinel_options,
        },
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


@functools.cache
def command_app() -> Celery:
    """The app of a `celery -A relay.app …` (or `-A workers.app`) process: one a process."""
    return create_celery(Settings.from_env())


def __getattr__(name: str) -> Any:
    """`celery -A relay.app flower` finds `relay.app.celery`, built on first use."""
    if name == "celery":
        return command_app()
    raise AttributeError(name)

"""The per-process state of a worker, built once on the clients its command connected with
(relay/clients.py: one engine, one Redis client, one Celery app a process) and its role."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import redis
from celery import Celery

from broker.modelaccess import LiteLLM
from broker.wiring import wire
from relay.clients import Clients
from relay.heartbeat import Instance
from relay.retention import StreamCaps
from store.db import SessionFactory
from store.egress import Egress
from store.files import FileStore
from store.secrets import Sealer
from store.settings import Settings
from workers.execute import WorkerContext
from workers.jobruns import JobContext
from workers.notify import NotifyContext
from workers.turns import TurnContext

_lock = threading.RLock()
# A job waits this much longer than the run timeout for a script step before giving up.
STEP_SLACK_SECONDS = 60


@dataclass
class ControlContext:
    sessions: SessionFactory
    redis: redis.Redis
    files: FileStore


def clients(app: Any) -> Clients:
    """The clients the worker command connected with, hung on its app; an app made elsewhere
    (a test, a script) gets its own once, and keeps them."""
    with _lock:
        found: Clients | None = getattr(app, "skillfleet_clients", None)
        if found is None:
            celery = app if isinstance(app, Celery) else None
            found = Clients.build(app.skillfleet_settings, celery=celery)
            app.skillfleet_clients = found
        return found


def worker_context(app: Any) -> WorkerContext:
    """The context the worker command attached to the app before it started consuming."""
    context: WorkerContext | None = getattr(app, "skillfleet_worker", None)
    if context is None:
        raise RuntimeError("This worker was not started with `skillfleet worker …`.")
    return context


def job_context(app: Any) -> JobContext:
    """What job runs need on the control worker: a broker like the API's, built once."""
    with _lock:
        context: JobContext | None = getattr(app, "skillfleet_jobs", None)
        if context is None:
            settings: Settings = app.skillfleet_settings
            wired = wire(clients(app))  # the API's broker, from the same settings
            context = JobContext(
                wired.sessions,
                wired.redis,
                wired.broker,
                worker=_instance_id(app),
                step_limit=settings.run_timeout + STEP_SLACK_SECONDS,
                sealer=Sealer(settings.keys_dir),
                turn_limit=settings.turn_timeout,
                caps=StreamCaps.of(settings),
                egress=Egress(settings.egress_allow),
                litellm=LiteLLM.of(settings),
            )
            app.skillfleet_jobs = context
        return context


def turn_context(app: Any) -> TurnContext:
    """What agent turns need on the control worker: the job runs' broker and clients."""
    jobs = job_context(app)
    settings: Settings = app.skillfleet_settings
    return TurnContext(
        jobs.sessions,
        jobs.redis,
        jobs.broker,
        Sealer(settings.keys_dir),
        jobs.worker,
        settings.turn_timeout,
        jobs.caps,
        jobs.egress,
        jobs.litellm,
    )


def _instance_id(app: Any) -> str:
    """The heartbeat id of this worker process, which the reaper watches."""
    instance: Instance | None = getattr(app, "skillfleet_instance", None)
    if instance is None:
        raise RuntimeError("This worker was not started with `skillfleet worker control`.")
    return instance.id


def control_context(app: Any) -> ControlContext:
    with _lock:
        context: ControlContext | None = getattr(app, "skillfleet_control", None)
        if context is None:
            settings: Settings = app.skillfleet_settings
            found = clients(app)
            files = FileStore(
                settings.files_dir, found.sessions, settings.file_max_bytes, settings.file_ttl
            )
            context = ControlContext(found.sessions, found.redis, files)
            app.skillfleet_control = context
        return context


def notify_context(app: Any) -> NotifyContext:
    """What notifications need: the VAPID key (made once under the data dir) and clients."""
    from relay.push import load_or_create_vapid

    control = control_context(app)
    with _lock:
        context: NotifyContext | None = getattr(app, "skillfleet_notify", None)
        if context is None:
            settings: Settings = app.skillfleet_settings
            context = NotifyContext(
                control.sessions,
                control.redis,
                Sealer(settings.keys_dir),
                load_or_create_vapid(settings.keys_dir),
                settings.push_contact,
                settings.push_services,
                Egress(settings.egress_allow),
            )
            app.skillfleet_notify = context
        return context

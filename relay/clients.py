"""What one process connects with, built once when it boots: the database engine and its
sessions, the Redis client for short commands and the Celery app.

The API builds them in `api.services.Services.build`, a worker in its command (`skillfleet
worker …`, which hangs them on its Celery app for `workers.context`); every module takes them
from there, as arq's `ctx` and dramatiq's boot hooks hand theirs out. Clients derived from them
for one purpose (the blocking reader of `relay.streams.blocking_client`, the generation
watch's subscriber) share the Redis client's settings and are made once per client; with
`SKILLFLEET_REDIS_SENTINELS` every one of them finds the primary through the sentinels
(relay/connections.py), as the Celery app does (relay/app.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import redis
from celery import Celery
from sqlalchemy import Engine

from relay import feed, notifier
from relay.app import create_celery
from relay.connections import redis_client
from store import audit, tracing
from store.db import SessionFactory, make_engine, make_sessions
from store.settings import Settings


@dataclass(frozen=True)
class Clients:
    settings: Settings
    engine: Engine
    sessions: SessionFactory
    redis: redis.Redis
    celery: Celery

    @classmethod
    def build(
        cls, settings: Settings, engine: Engine | None = None, celery: Celery | None = None
    ) -> Clients:
        """Connect once; `engine` and `celery` are reused when given (a worker's command made
        its app before anything else)."""
        engine = engine or make_engine(settings.database)
        tracing.instrument_engine(engine)
        audit.switch(not settings.bench_audit_off)
        sessions = make_sessions(engine)
        client = redis_client(settings)
        # Calls, approvals and runs change in every process: the owner's feed hears them all.
        feed.attach(sessions, client)
        celery = celery or create_celery(settings)
        notifier.send_through(client, celery)  # the notify task leaves through this app
        return cls(settings, engine, sessions, client, celery)

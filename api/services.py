"""The objects every request shares, built once per app from the settings."""

from __future__ import annotations

from dataclasses import dataclass, field

import redis
from celery import Celery
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from flask import current_app
from sqlalchemy import Engine

from broker.broker import Broker
from broker.wiring import wire
from relay import naming
from relay.clients import Clients
from relay.generations import GenerationWatch
from store.db import SessionFactory
from store.files import FileStore
from store.packagestore import PackageStore
from store.settings import Settings
from store.signing import load_or_create_key
from store.skills import SkillStore


@dataclass
class Services:
    settings: Settings
    engine: Engine
    sessions: SessionFactory
    store: SkillStore
    broker: Broker
    redis: redis.Redis
    celery: Celery
    packages: PackageStore
    signing_key: Ed25519PrivateKey
    files: FileStore
    # The token, skills and lockouts generations every request reads, from memory while it can.
    generations: GenerationWatch = field(init=False)

    def __post_init__(self) -> None:
        keys = (
            naming.tokens_generation(),
            naming.skills_generation(),
            naming.lockouts_generation(),
        )
        self.generations = GenerationWatch(self.redis, keys)

    @classmethod
    def build(cls, settings: Settings, engine: Engine | None = None) -> Services:
        """Connect to the database, Redis and Celery once for this app, and register the
        read-only skills (fails on a bad path); `engine` is reused when given."""
        wired = wire(Clients.build(settings, engine))
        signing_key = load_or_create_key(settings.keys_dir)
        return cls(
            settings,
            wired.engine,
            wired.sessions,
            wired.store,
            wired.broker,
            wired.redis,
            wired.celery,
            wired.packages,
            signing_key,
            wired.files,
        )


def services() -> Services:
    found: Services = current_app.extensions["skillfleet"]
    return found

"""The objects every request shares, built once per app from the settings."""

from __future__ import annotations

from dataclasses import dataclass, field

import redis
from celery import Celery
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from flask import current_app
from sqlalchemy import Engine

from broker.broker import Broker
from broker.context import Dispatcher, RecordingDispatcher
from broker.dispatcher import CeleryDispatcher
from broker.policy import Policy, load_builtin_policy
from broker.toolset import build_registry
from relay import events, feed, generations, naming
from relay.app import create_celery
from relay.connections import redis_client
from relay.generations import GenerationWatch
from relay.streams import wait_for_end
from store import indexcache
from store.db import SessionFactory, make_engine, make_sessions
from store.discovery import read_only_skills
from store.packagestore import PackageStore
from store.settings import Settings
from store.signing import load_or_create_key
from store.skills import BUILTIN_DIR, SkillStore


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
        """Connect to the database and register the read-only skills (fails on a bad path)."""
        engine = engine or make_engine(settings.database)
        sessions = make_sessions(engine)
        store = SkillStore(sessions, settings.skills_dir)
        client = redis_client(settings)
        # Every process forgets what it read of the skills index once a skill changes.
        indexcache.watch(
            sessions, store.index, lambda: generations.bump(client, naming.skills_generation())
        )
        store.sync_read_only(read_only_skills(BUILTIN_DIR, settings.skill_paths))
        policy = load_policy(settings)
        feed.attach(sessions, client)
        celery = create_celery(settings)
        packages = PackageStore(settings.data_dir / "packages", store)
        dispatcher: Dispatcher = CeleryDispatcher(
            sessions, client, celery, settings.run_timeout, packages
        )
        if settings.dry_run:
            dispatcher = RecordingDispatcher()  # records what would run; runs nothing
        broker = Broker(
            build_registry(),
            policy,
            store,
            sessions,
            dispatcher=dispatcher,
            run_waiter=lambda run_id, seconds: wait_for_end(client, run_id, seconds),
            publish=lambda owner, kind, data: events.publish(client, owner, kind, **data),
            redis=client,
        )
        signing_key = load_or_create_key(settings.keys_dir)
        return cls(settings, engine, sessions, store, broker, client, celery, packages, signing_key)


def load_policy(settings: Settings) -> Policy:
    """The operator's policy file when SKILLFLEET_POLICY names one, else the built-in policy."""
    if settings.policy_file is not None:
        return Policy.from_file(settings.policy_file)
    return load_builtin_policy()


def services() -> Services:
    found: Services = current_app.extensions["skillfleet"]
    return found

"""The one place that builds what decides and starts tool calls, for the API and the workers.

Both sides get the same broker from the same settings: the operator's policy, the read-only
skills registered, runs sent through Celery, or only recorded in dry-run mode.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import redis
from celery import Celery
from sqlalchemy import Engine

from broker import ownertools
from broker.broker import Broker
from broker.context import Dispatcher, RecordingDispatcher
from broker.dispatcher import CeleryDispatcher
from broker.ownertools import OwnerDesk
from broker.policy import Policy, load_builtin_policy
from broker.toolset import build_registry
from relay import events, generations, naming
from relay.clients import Clients
from relay.streams import wait_for_end
from store import indexcache
from store.db import SessionFactory
from store.dependencies import check_resolvable
from store.discovery import read_only_skills
from store.egress import Egress
from store.files import FileStore
from store.packagestore import PackageStore
from store.settings import Settings
from store.skills import BUILTIN_DIR, SkillStore


@dataclass(frozen=True)
class Wiring:
    """The database, Redis, skill store, policy, dispatcher and broker of one process."""

    engine: Engine
    sessions: SessionFactory
    redis: redis.Redis
    store: SkillStore
    policy: Policy
    celery: Celery
    packages: PackageStore
    dispatcher: Dispatcher
    broker: Broker
    files: FileStore


def wire(clients: Clients) -> Wiring:
    """Register the read-only skills (fails on a bad path) and build the broker on the
    process's clients."""
    settings = clients.settings
    engine, sessions, client, celery = (
        clients.engine, clients.sessions, clients.redis, clients.celery
    )  # fmt: skip
    check = functools.partial(check_resolvable, index=settings.package_index)
    store = SkillStore(sessions, settings.skills_dir, check, settings.versions_kept)
    # Every process forgets what it read of the skills index once a skill changes anywhere.
    indexcache.watch(
        sessions, store.index, lambda: generations.bump(client, naming.skills_generation())
    )
    store.sync_read_only(read_only_skills(BUILTIN_DIR, settings.skill_paths))
    policy = load_policy(settings)
    packages = PackageStore(settings.data_dir / "packages", store)
    dispatcher: Dispatcher = CeleryDispatcher(
        sessions, client, celery, settings.run_timeout, packages
    )
    if settings.dry_run:
        dispatcher = RecordingDispatcher()  # records what would run; runs nothing
    files = FileStore(settings.files_dir, sessions, settings.file_max_bytes, settings.file_ttl)
    broker = Broker(
        build_registry(Egress(settings.egress_allow)),
        policy,
        store,
        sessions,
        dispatcher=dispatcher,
        run_waiter=lambda run_id, seconds: wait_for_end(client, run_id, seconds),
        publish=lambda owner, kind, data: events.publish(client, owner, kind, **data),
        redis=client,
        files=files,
    )
    # The tools that reach the owner, with this process's wait and notice limits.
    for tool in ownertools.tools(OwnerDesk.of(settings, broker.publish, client)):
        broker.registry.add(tool)
    return Wiring(
        engine, sessions, client, store, policy, celery, packages, dispatcher, broker, files
    )


def load_policy(settings: Settings) -> Policy:
    """The operator's policy file when SKILLFLEET_POLICY names one, else the built-in policy."""
    if settings.policy_file is not None:
        return Policy.from_file(settings.policy_file)
    return load_builtin_policy()

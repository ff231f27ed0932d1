"""The objects every request shares, built once per app from the settings."""

from __future__ import annotations

from dataclasses import dataclass

from flask import current_app
from sqlalchemy import Engine

from broker.broker import Broker
from broker.policy import Policy, load_builtin_policy
from broker.toolset import build_registry
from skillfleet.settings import Settings
from store.db import SessionFactory, make_engine, make_sessions
from store.discovery import read_only_skills
from store.skills import BUILTIN_DIR, SkillStore


@dataclass
class Services:
    settings: Settings
    engine: Engine
    sessions: SessionFactory
    store: SkillStore
    broker: Broker

    @classmethod
    def build(cls, settings: Settings, engine: Engine | None = None) -> Services:
        """Connect to the database and register the read-only skills (fails on a bad path)."""
        engine = engine or make_engine(settings.database)
        sessions = make_sessions(engine)
        store = SkillStore(sessions, settings.skills_dir)
        store.sync_read_only(read_only_skills(BUILTIN_DIR, settings.skill_paths))
        policy = load_policy(settings)
        broker = Broker(build_registry(), policy, store, sessions)
        return cls(settings, engine, sessions, store, broker)


def load_policy(settings: Settings) -> Policy:
    """The operator's policy file when SKILLFLEET_POLICY names one, else the built-in policy."""
    if settings.policy_file is not None:
        return Policy.from_file(settings.policy_file)
    return load_builtin_policy()


def services() -> Services:
    found: Services = current_app.extensions["skillfleet"]
    return found

"""The objects every request shares, built once per app from the settings."""

from __future__ import annotations

from dataclasses import dataclass

from flask import current_app
from sqlalchemy import Engine

from broker.calls import ToolService
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
    tools: ToolService

    @classmethod
    def build(cls, settings: Settings, engine: Engine | None = None) -> Services:
        """Connect to the database and register the read-only skills (fails on a bad path)."""
        engine = engine or make_engine(settings.database)
        sessions = make_sessions(engine)
        store = SkillStore(sessions, settings.skills_dir)
        store.sync_read_only(read_only_skills(BUILTIN_DIR, settings.skill_paths))
        tools = ToolService(build_registry(), store, sessions)
        return cls(settings, engine, sessions, store, tools)


def services() -> Services:
    found: Services = current_app.extensions["skillfleet"]
    return found

"""Alembic is the only source of the schema, and the models match it."""

from __future__ import annotations

from sqlalchemy import inspect

from store.db import make_engine
from store.migrate import drift
from store.models import Base


def test_migrated_database_has_no_drift_from_the_models(database_url):
    engine = make_engine(database_url)
    try:
        assert drift(engine) == []
        assert set(inspect(engine).get_table_names()) >= set(Base.metadata.tables)
    finally:
        engine.dispose()

"""Alembic is the only source of the schema, and the models match it."""

from __future__ import annotations

import pytest
from alembic import command
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError

from store.db import make_engine
from store.migrate import alembic_config, drift, upgrade
from store.models import Base, utcnow


def test_migrated_database_has_no_drift_from_the_models(database_url):
    engine = make_engine(database_url)
    try:
        assert drift(engine) == []
        assert set(inspect(engine).get_table_names()) >= set(Base.metadata.tables)
    finally:
        engine.dispose()


def test_0004_makes_every_existing_owner_token_an_owner_and_node_tokens_stay_roleless(
    database_url,
):
    engine = make_engine(database_url)
    try:
        command.downgrade(alembic_config(database_url), "0003")
        with engine.begin() as connection:
            connection.execute(
                text("INSERT INTO owners (id, name, created_at) VALUES (1, 'a', :t)"),
                {"t": utcnow()},
            )
            for digest, kind, owner, node in (
                ("h1", "owner", 1, None),
                ("h2", "node", None, "web01"),
            ):
                connection.execute(
                    text(
                        "INSERT INTO api_tokens (token_hash, kind, owner_id, node_name, created_at)"
                        " VALUES (:digest, :kind, :owner, :node, :t)"
                    ),
                    {"digest": digest, "kind": kind, "owner": owner, "node": node, "t": utcnow()},
                )
    finally:
        upgrade(database_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT token_hash, role FROM api_tokens ORDER BY id"))
            assert list(rows) == [("h1", "owner"), ("h2", None)]
        with pytest.raises(IntegrityError), engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO api_tokens (token_hash, kind, owner_id, role, created_at)"
                    " VALUES ('h3', 'owner', 1, 'root', :t)"
                ),
                {"t": utcnow()},
            )
    finally:
        engine.dispose()

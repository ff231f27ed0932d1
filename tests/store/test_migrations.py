"""Alembic is the only source of the schema, and the models match it."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import inspect, text

from store.db import make_engine
from store.migrate import drift, upgrade
from store.models import Base


def test_migrated_database_has_no_drift_from_the_models(database_url):
    engine = make_engine(database_url)
    try:
        assert drift(engine) == []
        assert set(inspect(engine).get_table_names()) >= set(Base.metadata.tables)
    finally:
        engine.dispose()


def test_upgrading_keeps_existing_skills_with_the_bootstrap_owner_and_full_hash_grants(
    tmp_path: Path,
):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(url, "0003")
    full = "ab" * 32
    engine = make_engine(url)
    now = "2026-11-30 10:00:00"
    row = (
        "INSERT INTO skills (name, source, owner_id, author, enabled, hash, revision, description,"
        " execution, tier, file_count, size_bytes, locked, created_at, updated_at) VALUES "
        "(:name, :source, NULL, 'owner', 1, :hash, 1, 'd', 'node', 'change', 1, 1, 0, :t, :t)"
    )
    with engine.begin() as connection:
        connection.execute(
            text(row), {"name": "legacy", "source": "upload", "hash": full, "t": now}
        )
        connection.execute(
            text(row), {"name": "skill-authoring", "source": "builtin", "hash": full, "t": now}
        )
        connection.execute(
            text("INSERT INTO owners (name, created_at) VALUES ('owner', :t), ('bob', :t)"),
            {"t": now},
        )
        grant = (
            "INSERT INTO grants (owner_id, scope, subject, key, created_at) "
            "VALUES (1, 'owner', 'settings', :key, :t)"
        )
        connection.execute(text(grant), {"key": f"skill:legacy@{full[:8]}", "t": now})
        connection.execute(text(grant), {"key": "skill:gone@12345678", "t": now})
        bobs = grant.replace("VALUES (1,", "VALUES (2,")  # Bob never owned legacy
        connection.execute(text(bobs), {"key": f"skill:legacy@{full[:8]}", "t": now})
    upgrade(url)
    with engine.connect() as connection:
        skills = dict(
            connection.execute(
                text("SELECT s.name, o.name FROM skills s LEFT JOIN owners o ON o.id = s.owner_id")
            ).all()
        )
        keys = list(connection.execute(text("SELECT key FROM grants")).scalars())
    engine.dispose()
    assert skills == {"legacy": "owner", "skill-authoring": None}
    assert keys == [f"skill:legacy@{full}"]

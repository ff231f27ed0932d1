"""Alembic is the only source of the schema, and the models match it."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError

from store.db import make_engine
from store.migrate import alembic_config, drift, upgrade
from store.models import Base, utcnow

pytestmark = pytest.mark.both_databases  # migrations run on each dialect


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


def test_0022_gives_each_run_its_calls_chat_and_a_deleted_chat_leaves_its_runs_with_none(
    database_url,
):
    engine = make_engine(database_url)
    tables = Base.metadata.tables
    run = {
        "owner_id": 1, "skill_name": "s", "skill_hash": "a" * 64, "script": "scripts/s.py",
        "arguments": {}, "execution": "node", "queue": "node.web01", "status": "succeeded",
        "timeout_seconds": 300,
    }  # fmt: skip
    call = {"owner_id": 1, "tool": "run_skill_script", "tier": "read", "status": "done"}
    try:
        command.downgrade(alembic_config(database_url), "0021")
        assert "chat_id" not in {c["name"] for c in inspect(engine).get_columns("runs")}
        with engine.begin() as connection:
            # Only the columns 0021 had: later migrations add more to owners.
            connection.execute(
                text("INSERT INTO owners (id, name, created_at, run_command_shell) "
                     "VALUES (1, 'a', CURRENT_TIMESTAMP, false)")
            )  # fmt: skip
            connection.execute(
                tables["chats"].insert(),
                [{"id": 7, "owner_id": 1, "external_id": "c7"},
                 {"id": 8, "owner_id": 1, "external_id": "c8"}],
            )  # fmt: skip
            connection.execute(
                tables["tool_calls"].insert(),
                [{**call, "id": "in-7", "chat_id": 7}, {**call, "id": "in-8", "chat_id": 8},
                 {**call, "id": "no-chat", "chat_id": None}],
            )  # fmt: skip
            # Only the columns given (and those with defaults): none that 0022 adds.
            for run_id, call_id in (("r7", "in-7"), ("r8", "in-8"), ("rn", "no-chat"),
                                    ("job", None)):  # fmt: skip
                connection.execute(
                    tables["runs"].insert(), {**run, "id": run_id, "call_id": call_id}
                )
    finally:
        upgrade(database_url)
    try:
        with engine.begin() as connection:
            chats = text("SELECT id, chat_id FROM runs ORDER BY id")
            assert dict(connection.execute(chats).all()) == {
                "job": None, "r7": 7, "r8": 8, "rn": None,
            }  # fmt: skip
            connection.execute(text("DELETE FROM chats WHERE id = 7"))
            assert dict(connection.execute(chats).all()) == {
                "job": None, "r7": None, "r8": 8, "rn": None,
            }  # fmt: skip
    finally:
        engine.dispose()


def test_0024_leaves_existing_owners_requiring_no_signature_and_their_skills_unsigned(
    database_url,
):
    engine = make_engine(database_url)
    skill = (
        "INSERT INTO skills (id, name, source, owner_id, author, enabled, hash, revision, "
        "description, execution, tier, file_count, size_bytes, locked, created_at, updated_at, "
        "warnings) VALUES (1, 's', 'upload', 1, 'owner', true, :hash, 1, 'd', 'node', 'read', "
        "1, 1, false, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, '[]')"
    )
    try:
        command.downgrade(alembic_config(database_url), "0022")
        assert "trusted_keys" not in inspect(engine).get_table_names()
        with engine.begin() as connection:
            connection.execute(
                text("INSERT INTO owners (id, name, created_at, run_command_shell) "
                     "VALUES (1, 'a', CURRENT_TIMESTAMP, false)")
            )  # fmt: skip
            connection.execute(text(skill), {"hash": "a" * 64})
    finally:
        upgrade(database_url)
    try:
        with engine.begin() as connection:
            owner = text("SELECT require_signature FROM owners WHERE id = 1")
            assert connection.execute(owner).scalar_one() in (False, 0)
            row = connection.execute(
                text("SELECT signature, signer_fingerprint, signed_by, signature_hold, enabled "
                     "FROM skills WHERE id = 1")
            ).one()  # fmt: skip
            assert tuple(row) in ((None, None, None, False, True), (None, None, None, 0, 1))
    finally:
        engine.dispose()


def test_0026_turns_each_model_setting_into_a_default_source_and_back(database_url):
    engine = make_engine(database_url)
    setting = text(
        "INSERT INTO model_settings (owner_id, base_url, name, api_key, updated_at) "
        "VALUES (1, 'https://models.example.org/v1', 'gpt-x', 'sealed-key', :now)"
    )
    try:
        command.downgrade(alembic_config(database_url), "0024")
        with engine.begin() as connection:
            connection.execute(
                text("INSERT INTO owners (id, name, created_at) VALUES (1, 'a', :now)"),
                {"now": utcnow()},
            )
            connection.execute(setting, {"now": utcnow()})
    finally:
        upgrade(database_url)
    try:
        with engine.begin() as connection:
            source = text(
                "SELECT owner_id, name, kind, base_url, api_key, virtual_key FROM model_sources"
            )
            assert [tuple(row) for row in connection.execute(source)] == [
                (1, "default", "openai", "https://models.example.org/v1", "sealed-key", False)
            ]
            chosen = text("SELECT source, name, reasoning_effort, context FROM model_settings")
            assert [tuple(row) for row in connection.execute(chosen)] == [
                ("default", "gpt-x", None, None)
            ]
        command.downgrade(alembic_config(database_url), "0024")
        with engine.begin() as connection:
            back = text("SELECT owner_id, base_url, name, api_key FROM model_settings")
            assert [tuple(row) for row in connection.execute(back)] == [
                (1, "https://models.example.org/v1", "gpt-x", "sealed-key")
            ]
    finally:
        upgrade(database_url)
        engine.dispose()


def test_0031_keys_audit_records_by_their_chain_and_back(database_url):
    engine = make_engine(database_url)
    record = text(
        "INSERT INTO audit_records (owner_id, seq, created_at, kind, actor, subject, facts, "
        "prev_hash, hash) VALUES (1, :seq, :now, 'run.ended', 'worker', :subject, '{}', "
        ":prev, :hash)"
    )
    chain = text("SELECT owner_id, seq, subject, prev_hash, hash FROM audit_records ORDER BY seq")
    rows = [(1, seq, f"run-{seq}", str(seq - 1) * 64, str(seq) * 64) for seq in (1, 2)]
    try:
        command.downgrade(alembic_config(database_url), "0030")
        with engine.begin() as connection:
            connection.execute(
                text("INSERT INTO owners (id, name, created_at) VALUES (1, 'a', :now)"),
                {"now": utcnow()},
            )
            for _, seq, subject, prev, digest in rows:
                connection.execute(
                    record,
                    {"seq": seq, "now": utcnow(), "subject": subject, "prev": prev, "hash": digest},
                )
    finally:
        upgrade(database_url)
    try:
        with engine.connect() as connection:
            assert [tuple(row) for row in connection.execute(chain)] == rows
        schema = inspect(engine)
        assert schema.get_pk_constraint("audit_records")["constrained_columns"] == [
            "owner_id",
            "seq",
        ]
        assert {index["name"] for index in schema.get_indexes("audit_records")} == {
            "ix_audit_records_owner_subject_seq"
        }
        command.downgrade(alembic_config(database_url), "0030")
        with engine.connect() as connection:
            assert [tuple(row) for row in connection.execute(chain)] == rows
            ids = text("SELECT id FROM audit_records ORDER BY seq")
            assert len(set(connection.execute(ids).scalars())) == 2
        assert "ix_audit_records_created_at" in {
            index["name"] for index in inspect(engine).get_indexes("audit_records")
        }
    finally:
        upgrade(database_url)
        engine.dispose()

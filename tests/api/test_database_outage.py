"""A database that goes away during a call: 503 `service_unavailable`, never a `tool_failed`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import POSTGRES_URL, REDIS_URL
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from api import create_app
from api.services import Services
from store.db import transaction
from store.settings import Settings, normalise_database_url
from store.tokens import create_owner_token


@pytest.fixture
def services_on_postgres(tmp_path: Path, postgres_database: str) -> Iterator[Services]:
    settings = Settings(
        data_dir=tmp_path / "var", database_url=postgres_database, redis_url=REDIS_URL,
        dry_run=True,
    )  # fmt: skip
    built = Services.build(settings)
    yield built
    built.engine.dispose()


def allow_connections(database_url: str, allowed: bool) -> None:
    """Open or close the database to every new connection, and end the open ones when closing."""
    name = make_url(database_url).database
    admin = create_engine(normalise_database_url(POSTGRES_URL), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(
            text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {str(allowed).lower()}')
        )
        if not allowed:
            connection.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = :name AND pid <> pg_backend_pid()"
                ),
                {"name": name},
            )
    admin.dispose()


@pytest.mark.parametrize("tool", ["list_skills", "load_skill"])
def test_a_database_outage_during_a_call_answers_503_and_records_no_failure(
    services_on_postgres: Services, postgres_database: str, tool: str
):
    services = services_on_postgres
    client = create_app(services=services).test_client()
    with transaction(services.sessions) as session:
        auth = {"Authorization": f"Bearer {create_owner_token(session, f'outage-{tool}')}"}
    body = {"arguments": {"skill_name": "skill-authoring"}, "chat_id": "c1"}
    # The first call succeeds and leaves the token verified for a few seconds, so the next one
    # gets past authentication and meets the outage inside the call.
    assert client.post(f"/api/tools/{tool}", headers=auth, json=body).json["status"] == "done"

    allow_connections(postgres_database, False)
    try:
        down = client.post(f"/api/tools/{tool}", headers=auth, json=body)
    finally:
        allow_connections(postgres_database, True)

    assert down.status_code == 503, down.json
    assert down.json["code"] == "service_unavailable"
    assert "database" in down.json["message"]
    calls = client.get("/api/calls", headers=auth).json
    assert [(c["tool"], c["status"], c["error_code"]) for c in calls] == [(tool, "done", None)]

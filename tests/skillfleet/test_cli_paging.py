"""The CLI's client follows a list's cursor pages: every item once, up to a limit."""

from __future__ import annotations

import uuid

import httpx
import pytest
from factories import owner_id_of

from skillfleet.client import Client, ClientError
from store.db import transaction
from store.models import Run
from store.settings import ClientSettings


def add_run(services, owner: int, status: str) -> str:
    run_id = str(uuid.uuid4())
    with transaction(services.sessions) as session:
        session.add(
            Run(
                id=run_id,
                owner_id=owner,
                skill_name="disk-report",
                skill_hash="a" * 64,
                script="scripts/report.py",
                arguments={},
                execution="node",
                queue="node.web01",
                node="web01",
                status=status,
                timeout_seconds=300,
            )
        )
    return run_id


@pytest.fixture
def api(app, token) -> Client:
    """The CLI's client, talking to the app in this process."""
    client = Client(ClientSettings(url="http://testserver", token=token))
    client.http = httpx.Client(
        transport=httpx.WSGITransport(app=app),
        base_url="http://testserver",
        headers=dict(client.http.headers),
    )
    return client


def test_the_client_follows_every_page_and_stops_at_its_limit(api, services):
    alice = owner_id_of(services)
    made = {add_run(services, alice, status="failed") for _ in range(7)}
    add_run(services, alice, status="succeeded")
    everything, more = api.listing("/api/runs", {"status": "failed", "page_size": 2})
    assert {row["run_id"] for row in everything} == made and len(everything) == 7
    assert not more
    first, more = api.listing("/api/runs", {"status": "failed"}, limit=3)
    assert [row["run_id"] for row in first] == [row["run_id"] for row in everything[:3]]
    assert more
    exact, more = api.listing("/api/runs", {"status": "failed"}, limit=7)
    assert len(exact) == 7 and not more


def test_a_refused_cursor_reaches_the_cli_as_the_apis_error(api):
    with pytest.raises(ClientError) as refused:
        api.listing("/api/runs?cursor=forged")
    assert refused.value.code == "invalid_cursor"

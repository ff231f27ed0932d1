"""Bad input that once answered 500: each is a 4xx with a stable code, and nothing is saved."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from store.models import Job, ToolCall

NIGHTLY = {
    "name": "never",
    "cron": "0 0 31 2 *",
    "time_zone": "Europe/Berlin",
    "steps": [{"tool": "list_skills", "arguments": {}}],
    "enabled": True,
}


def job_count(services) -> int:
    with services.sessions() as session:
        return session.scalar(select(func.count()).select_from(Job)) or 0


# -- a cron that never fires ------------------------------------------------------------------


@pytest.mark.parametrize("enabled", [True, False])
def test_a_job_whose_cron_never_fires_is_422_and_not_saved(client, auth, services, enabled):
    response = client.post("/api/jobs", headers=auth, json={**NIGHTLY, "enabled": enabled})

    assert response.status_code == 422, response.json
    assert response.json["code"] == "cron_never_fires"
    assert response.json["message"].startswith("'cron' never fires: '0 0 31 2 *'")
    assert job_count(services) == 0


def test_changing_a_job_to_a_cron_that_never_fires_is_422_and_the_job_unchanged(
    client, auth, services
):
    created = client.post("/api/jobs", headers=auth, json={**NIGHTLY, "cron": "0 0 28 2 *"})
    assert created.status_code == 201, created.json
    path = f"/api/jobs/{created.json['id']}"

    response = client.put(path, headers=auth, json={**NIGHTLY, "cron": "30 4 31 4,6,9,11 *"})

    assert response.status_code == 422, response.json
    assert response.json["code"] == "cron_never_fires"
    assert client.get(path, headers=auth).json == created.json

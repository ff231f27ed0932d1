"""/metrics is open only when the API listens on loopback, or when the operator says so."""

from __future__ import annotations

from dataclasses import replace

import pytest

from api import create_app
from skillfleet.settings import Settings
from store.db import transaction
from store.tokens import create_node_token

METRICS_TOKEN = "scrape-me-0123456789"


def metrics_client(services, **overrides):
    settings = services.settings.with_overrides(**overrides)
    return create_app(services=replace(services, settings=settings)).test_client()


@pytest.fixture
def exposed(services):
    """The API as `skillfleet api` serves it on every interface (SKILLFLEET_HOST=0.0.0.0)."""
    return metrics_client(services, host="0.0.0.0", metrics_token=METRICS_TOKEN)


def test_on_loopback_metrics_need_no_token(client):
    response = client.get("/metrics")

    assert response.status_code == 200
    assert "# TYPE" in response.get_data(as_text=True)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "api.example.org"])
def test_on_any_other_address_metrics_without_a_token_are_401(services, host):
    response = metrics_client(services, host=host).get("/metrics")

    assert response.status_code == 401
    assert response.json["code"] == "unauthorized"
    assert "# TYPE" not in response.get_data(as_text=True)


def test_exposed_metrics_answer_an_owner_token(exposed, auth):
    response = exposed.get("/metrics", headers=auth)

    assert response.status_code == 200
    assert "# TYPE" in response.get_data(as_text=True)


def test_exposed_metrics_answer_the_metrics_token(exposed):
    response = exposed.get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})

    assert response.status_code == 200


def test_exposed_metrics_refuse_a_wrong_token_an_agent_token_and_a_node_token(
    exposed, services, agent_auth
):
    with transaction(services.sessions) as session:
        node = {"Authorization": f"Bearer {create_node_token(session, 'web01')}"}

    wrong = exposed.get("/metrics", headers={"Authorization": "Bearer sf_wrong"})
    agent = exposed.get("/metrics", headers=agent_auth)
    node_answer = exposed.get("/metrics", headers=node)

    assert wrong.status_code == 401 and wrong.json["code"] == "unauthorized"
    assert agent.status_code == 403 and agent.json["code"] == "owner_only"
    assert node_answer.status_code == 403 and node_answer.json["code"] == "forbidden"


def test_metrics_public_opens_them_on_any_address(services):
    response = metrics_client(services, host="0.0.0.0", metrics_public=True).get("/metrics")

    assert response.status_code == 200


def test_the_metrics_settings_are_read_from_the_environment():
    env = {
        "SKILLFLEET_HOST": "0.0.0.0",
        "SKILLFLEET_METRICS_PUBLIC": "1",
        "SKILLFLEET_METRICS_TOKEN": METRICS_TOKEN,
    }

    settings = Settings.from_env(env)

    assert settings.metrics_public is True and settings.metrics_token == METRICS_TOKEN
    assert settings.metrics_open
    assert not Settings.from_env({"SKILLFLEET_HOST": "0.0.0.0"}).metrics_open
    assert Settings.from_env({}).metrics_open  # 127.0.0.1 by default
    assert Settings.from_env({"SKILLFLEET_HOST": "::1"}).metrics_open
    assert Settings.from_env({"SKILLFLEET_HOST": "localhost"}).metrics_open

"""Every /api route but the health check needs a valid bearer token."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from store.db import transaction
from store.models import ApiToken
from store.tokens import create_node_token, token_digest

PROTECTED = [
    ("GET", "/api/skills"),
    ("POST", "/api/skills"),
    ("GET", "/api/skills/skill-authoring"),
    ("DELETE", "/api/skills/skill-authoring"),
    ("GET", "/api/skills/skill-authoring/files/SKILL.md"),
    ("POST", "/api/skills/skill-authoring/duplicate"),
    ("PUT", "/api/skills/skill-authoring/enabled"),
    ("GET", "/api/tools"),
    ("POST", "/api/tools/list_skills"),
    ("GET", "/api/calls/x"),
]


@pytest.mark.parametrize(("method", "path"), PROTECTED)
def test_a_request_without_a_token_is_401_unauthorized(client, method, path):
    response = client.open(path, method=method)
    assert response.status_code == 401
    assert response.json["code"] == "unauthorized"
    assert response.headers["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize(("method", "path"), PROTECTED)
def test_a_request_with_a_wrong_token_is_401_unauthorized(client, method, path):
    response = client.open(path, method=method, headers={"Authorization": "Bearer sf_wrong"})
    assert response.status_code == 401
    assert response.json == {
        "code": "unauthorized",
        "status": 401,
        "message": "The bearer token is not valid.",
    }


def test_a_basic_auth_header_is_not_a_bearer_token(client):
    response = client.get("/api/skills", headers={"Authorization": "Basic YTpi"})
    assert response.status_code == 401


def test_health_needs_no_token(client):
    response = client.get("/api/health")
    assert response.status_code == 200
    assert response.json["status"] == "ok"


def test_tokens_are_stored_as_their_sha256_only(services, token):
    with services.sessions() as session:
        stored = list(session.scalars(select(ApiToken.token_hash)))
    assert token_digest(token) in stored
    assert token not in stored


def test_a_node_token_cannot_use_owner_routes(client, services):
    with transaction(services.sessions) as session:
        node_token = create_node_token(session, "web01")
    response = client.get("/api/skills", headers={"Authorization": f"Bearer {node_token}"})
    assert response.status_code == 403
    assert response.json["code"] == "forbidden"

"""The owner's tokens through the API: shown once, listed without secrets, refused once deleted."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
import redis
from conftest import REDIS_URL, TLS
from fleet import wait_until
from sqlalchemy import func, select

from api import create_app
from store.db import transaction
from store.limits import MAX_OWNER_TOKENS
from store.models import ApiToken
from store.tokens import create_node_token, issue_token, token_digest

SKILLFLEET = str(Path(sys.executable).parent / "skillfleet")
ROLE_MISSING = "Give the token a role: the string 'owner' or 'agent'."


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def token_count(services) -> int:
    with services.sessions() as session:
        return int(session.scalar(select(func.count()).select_from(ApiToken)) or 0)


def create(client, auth, **body):
    return client.post("/api/tokens", headers=auth, json=body)


def test_an_owner_creates_an_agent_token_that_calls_tools_but_cannot_manage_tokens(client, auth):
    created = create(client, auth, role="agent", label="ci agent")

    assert created.status_code == 201
    assert set(created.json) == {"id", "token", "role", "label"}
    assert created.json["role"] == "agent" and created.json["label"] == "ci agent"
    agent = bearer(created.json["token"])
    tools = client.post("/api/tools/list_skills", headers=agent, json={"arguments": {}})
    assert tools.status_code == 200 and tools.json["status"] == "done"
    refused = client.get("/api/tokens", headers=agent)
    assert refused.status_code == 403 and refused.json["code"] == "owner_only"


def test_an_owner_token_created_through_the_api_can_do_what_the_owner_does(client, auth):
    created = create(client, auth, role="owner")

    assert created.status_code == 201 and created.json["label"] is None
    owner = bearer(created.json["token"])
    assert client.get("/api/settings", headers=owner).status_code == 200
    assert client.get("/api/tokens", headers=owner).status_code == 200


def test_the_list_says_which_token_the_request_came_with(client, auth):
    second = create(client, auth, role="owner", label="console").json

    def in_use(headers):
        return {t["id"]: t["in_use"] for t in client.get("/api/tokens", headers=headers).json}

    by_first = in_use(auth)
    assert by_first[second["id"]] is False and list(by_first.values()).count(True) == 1
    by_second = in_use(bearer(second["token"]))
    assert [i for i, used in by_second.items() if used] == [second["id"]]


def test_the_token_is_stored_only_as_its_hash_and_listed_without_secrets(
    client, auth, other_auth, services
):
    created = create(client, auth, role="agent", label="laptop").json

    listed = client.get("/api/tokens", headers=auth)

    assert listed.status_code == 200
    assert [t["role"] for t in listed.json] == ["owner", "agent"]  # alice's, oldest first
    mine = listed.json[-1]
    assert set(mine) == {
        "id", "role", "label", "created_at", "last_used_at", "resource", "expires_at", "in_use"
    }  # fmt: skip
    assert mine["resource"] is None and mine["expires_at"] is None  # not an MCP host's
    assert mine["id"] == created["id"] and mine["label"] == "laptop"
    assert created["token"] not in listed.get_data(as_text=True)
    assert token_digest(created["token"]) not in listed.get_data(as_text=True)
    with services.sessions() as session:
        stored = session.get(ApiToken, created["id"])
        assert stored is not None and stored.token_hash == token_digest(created["token"])


def test_last_used_at_is_set_once_a_token_is_used(client, auth):
    created = create(client, auth, role="agent").json
    before = client.get("/api/tokens", headers=auth).json[-1]

    client.get("/api/tools", headers=bearer(created["token"]))

    after = client.get("/api/tokens", headers=auth).json[-1]
    assert before["last_used_at"] is None
    assert after["last_used_at"] is not None


def test_a_deleted_token_is_refused_on_the_very_next_request(client, auth):
    created = create(client, auth, role="agent").json
    agent = bearer(created["token"])
    assert client.get("/api/tools", headers=agent).status_code == 200  # now cached

    deleted = client.delete(f"/api/tokens/{created['id']}", headers=auth)
    after = client.get("/api/tools", headers=agent)

    assert deleted.status_code == 204 and deleted.data == b""
    assert after.status_code == 401
    assert after.json["message"] == "The bearer token is not valid."
    assert created["id"] not in [t["id"] for t in client.get("/api/tokens", headers=auth).json]


def test_an_owner_may_delete_the_token_it_is_using(client, auth):
    [mine] = client.get("/api/tokens", headers=auth).json

    assert client.delete(f"/api/tokens/{mine['id']}", headers=auth).status_code == 204
    assert client.get("/api/tokens", headers=auth).status_code == 401


def test_another_owners_token_id_answers_404_and_that_token_keeps_working(client, auth, other_auth):
    bobs = create(client, other_auth, role="agent").json

    response = client.delete(f"/api/tokens/{bobs['id']}", headers=auth)

    assert response.status_code == 404
    assert response.json == {
        "code": "token_not_found",
        "status": 404,
        "message": f"You have no token with id {bobs['id']}.",
    }
    assert client.get("/api/tools", headers=bearer(bobs["token"])).status_code == 200
    assert bobs["id"] not in [t["id"] for t in client.get("/api/tokens", headers=auth).json]


def test_a_node_tokens_id_and_an_unknown_id_answer_404(client, auth, services):
    with transaction(services.sessions) as session:
        node_token = create_node_token(session, "web01")
    with services.sessions() as session:
        node_id = session.scalar(
            select(ApiToken.id).where(ApiToken.token_hash == token_digest(node_token))
        )

    assert client.delete(f"/api/tokens/{node_id}", headers=auth).status_code == 404
    assert client.delete("/api/tokens/999999", headers=auth).status_code == 404
    assert client.delete("/api/tokens/not-a-number", headers=auth).status_code == 404
    assert client.get("/api/nodes/web01/manifest", headers=bearer(node_token)).status_code == 200


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        ({}, "invalid_role", ROLE_MISSING),
        ({"role": None}, "invalid_role", ROLE_MISSING),
        ({"role": "root"}, "invalid_role", "A token's role is 'owner' or 'agent', not 'root'."),
        ({"role": "node"}, "invalid_role", "A token's role is 'owner' or 'agent', not 'node'."),
        ({"role": ["agent"]}, "invalid_role", ROLE_MISSING),
        (
            {"role": "agent", "label": "x" * 201},
            "invalid_label",
            "The label has 201 characters; at most 200 are allowed.",
        ),
        ({"role": "agent", "label": 7}, "invalid_label", "The label must be a string."),
        (
            {"role": "agent", "label": "line\nbreak"},
            "invalid_label",
            "The label may not hold line breaks or other control characters.",
        ),
        ({"role": "agent", "token": "sf_mine"}, "invalid_request", None),
    ],
)  # fmt: skip
def test_a_bad_role_or_label_is_422_with_its_code_and_nothing_is_stored(
    client, auth, services, body, code, message
):
    before = token_count(services)

    response = create(client, auth, **body)

    assert response.status_code == 422
    assert response.json["code"] == code
    if message is not None:
        assert response.json["message"] == message
    else:  # an unknown field: a caller may not choose its own token
        assert "token" in response.json["errors"]["json"]
    assert token_count(services) == before


def test_a_label_of_exactly_200_characters_is_accepted(client, auth):
    response = create(client, auth, role="agent", label="x" * 200)

    assert response.status_code == 201 and response.json["label"] == "x" * 200


@pytest.mark.parametrize(
    ("data", "content_type"),
    [
        ('["agent"]', "application/json"),
        ('"agent"', "application/json"),
        ("{not json", "application/json"),
        ("role=agent", "application/x-www-form-urlencoded"),
    ],
)
def test_a_body_that_is_not_a_json_object_is_refused_and_nothing_is_stored(
    client, auth, services, data, content_type
):
    before = token_count(services)

    response = client.post("/api/tokens", headers=auth, data=data, content_type=content_type)

    assert 400 <= response.status_code < 500
    assert response.json["code"] in (
        "invalid_request",
        "invalid_json",
        "invalid_role",
        "unsupported_media_type",
    )
    assert token_count(services) == before


def test_an_owner_holds_at_most_the_token_limit(client, auth, services):
    with transaction(services.sessions) as session:
        alice = session.scalar(select(ApiToken.owner_id).where(ApiToken.role == "owner"))
        for _ in range(MAX_OWNER_TOKENS - 1):  # alice already holds her owner token
            issue_token(session, alice, "agent", None)

    response = create(client, auth, role="agent")

    assert response.status_code == 409
    assert response.json["code"] == "too_many_tokens"
    assert token_count(services) == MAX_OWNER_TOKENS


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/api/tokens"), ("POST", "/api/tokens"), ("DELETE", "/api/tokens/1")],
)
def test_the_token_routes_need_a_token(client, method, path):
    response = client.open(path, method=method, json={"role": "owner"})

    assert response.status_code == 401 and response.json["code"] == "unauthorized"


def test_without_redis_tokens_are_checked_in_the_database_and_a_delete_changes_nothing(
    services, auth, client
):
    created = create(client, auth, role="agent").json
    # Nothing listens on port 1: every Redis call fails at once.
    cut_off = replace(services, redis=redis.Redis.from_url("redis://127.0.0.1:1/0"))
    offline = create_app(services=cut_off).test_client()

    listed = offline.get("/api/tokens", headers=auth)
    deleted = offline.delete(f"/api/tokens/{created['id']}", headers=auth)

    assert listed.status_code == 200
    assert deleted.status_code == 503 and deleted.json["code"] == "service_unavailable"
    assert client.get("/api/tools", headers=bearer(created["token"])).status_code == 200
    assert offline.get("/api/tools", headers=bearer(created["token"])).status_code == 200


# --- Revocation across processes -------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def api_process(settings, services, tmp_path) -> Iterator[str]:
    """`skillfleet api` (gunicorn, two worker processes) on the test database and Redis."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKILLFLEET_")}
    env.update(
        DATABASE_URL=settings.database,
        REDIS_URL=REDIS_URL,
        SKILLFLEET_DATA_DIR=str(settings.data_dir),
        SKILLFLEET_PORT=str(port),
    )
    log = (tmp_path / "api.log").open("wb")
    process = subprocess.Popen(
        [SKILLFLEET, "api", "--workers", "2"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(f"{url}/api/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            assert process.poll() is None, (tmp_path / "api.log").read_text()
            return False

    try:
        wait_until(healthy, 60, "`skillfleet api` to answer")
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
        log.close()


@pytest.mark.fleet
def test_a_token_deleted_in_one_process_is_refused_at_once_by_every_api_worker(
    client, auth, api_process
):
    created = create(client, auth, role="agent").json
    with httpx.Client(verify=TLS, base_url=api_process, headers=bearer(created["token"])) as agent:
        # Enough requests that both gunicorn workers verify the token and cache it.
        assert all(agent.get("/api/tools").status_code == 200 for _ in range(20))

        assert client.delete(f"/api/tokens/{created['id']}", headers=auth).status_code == 204

        after = [agent.get("/api/tools").status_code for _ in range(20)]
    assert after == [401] * 20

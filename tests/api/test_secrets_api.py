"""/api/secrets: the owner sets, lists and removes secrets by name and allows a skill's version
to have them; values never come back, and a call that would lack one fails before the policy."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import func, select
from test_approvals import install

from store.models import Approval, Grant, OwnerSecret, ToolCall

VALUE = "tok-3f9a1c7e5b"
SECRETS = {"skillfleet.tier": "read", "skillfleet.secrets": "API_TOKEN"}
CALL = {
    "arguments": {
        "skill_name": "caller",
        "script": "scripts/hello.py",
        "arguments": {"node": "web01"},
    },
    "chat_id": "chat-1",
}


def import_skill(client: FlaskClient, auth: dict[str, str], name: str = "caller") -> str:
    return str(install(client, auth, name, SECRETS)["hash"])


def edit_skill(client: FlaskClient, auth: dict[str, str], skill_hash: str) -> str:
    body = {"content": "print('changed')\n", "hash": skill_hash}
    response = client.put("/api/skills/caller/files/scripts/hello.py", headers=auth, json=body)
    assert response.status_code == 200, response.json
    return str(client.get("/api/skills/caller", headers=auth).json["hash"])


def call(client: FlaskClient, auth: dict[str, str]) -> dict[str, Any]:
    response = client.post("/api/tools/run_skill_script", headers=auth, json=CALL)
    assert response.status_code == 200, response.json
    return dict(response.json)


def rows(services: Any, model: Any) -> int:
    with services.sessions() as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


# -- who may -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/secrets"),
        ("PUT", "/api/secrets/API_TOKEN"),
        ("DELETE", "/api/secrets/API_TOKEN"),
        ("PUT", "/api/secrets/skills/caller"),
        ("DELETE", "/api/secrets/skills/caller"),
    ],
)
def test_without_a_token_401_and_an_agent_token_403_before_the_body_is_read(
    client, agent_auth, method, path
):
    body = {"value": VALUE, "hash": "0" * 8}
    assert client.open(path, method=method, json=body).status_code == 401
    refused = client.open(path, method=method, headers=agent_auth, json=["junk"])
    assert (refused.status_code, refused.json["code"]) == (403, "owner_only")


def test_another_owner_sees_no_name_and_cannot_reach_the_owners_skill(
    client, auth, other_auth, services
):
    import_skill(client, auth)
    assert (
        client.put("/api/secrets/API_TOKEN", headers=auth, json={"value": VALUE}).status_code == 200
    )

    assert client.get("/api/secrets", headers=other_auth).json == {"secrets": [], "skills": []}
    body = {"value": VALUE, "skill": "caller"}
    assert client.put("/api/secrets/API_TOKEN", headers=other_auth, json=body).status_code == 404
    gone = client.delete("/api/secrets/API_TOKEN", headers=other_auth)
    assert (gone.status_code, gone.json["code"]) == (404, "secret_not_found")
    assert (
        client.put(
            "/api/secrets/skills/caller", headers=other_auth, json={"hash": "0" * 8}
        ).status_code
        == 404
    )
    assert rows(services, OwnerSecret) == 1


# -- what is refused ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["..%2F..%2Fetc", "../x", "api_token", "A%00B", "A" * 300, "1A"])
def test_a_name_that_is_no_environment_variable_is_refused_and_nothing_stored(
    client, auth, services, name
):
    response = client.put(f"/api/secrets/{name}", headers=auth, json={"value": VALUE})
    assert (response.status_code, response.json["code"]) == (422, "invalid_secret_name")
    gone = client.delete(f"/api/secrets/{name}", headers=auth)
    assert (gone.status_code, gone.json["code"]) == (422, "invalid_secret_name")
    assert rows(services, OwnerSecret) == 0


@pytest.mark.parametrize(
    "body",
    [
        {"value": "x" * (8 * 1024 + 1)},
        {"value": "a\0b"},
        {"value": ""},
        {"value": 42},
        {},
        ["value"],
        {"value": VALUE, "extra": 1},
    ],
)
def test_an_oversized_value_or_a_body_of_the_wrong_shape_is_refused(client, auth, services, body):
    response = client.put("/api/secrets/API_TOKEN", headers=auth, json=body)
    assert response.status_code == 422, response.json
    assert rows(services, OwnerSecret) == 0


def test_a_secret_for_a_skill_the_owner_lacks_is_refused(client, auth, services):
    body = {"value": VALUE, "skill": "../nope"}
    assert client.put("/api/secrets/API_TOKEN", headers=auth, json=body).status_code == 404
    body["skill"] = "nope"
    assert client.put("/api/secrets/API_TOKEN", headers=auth, json=body).status_code == 404
    assert rows(services, OwnerSecret) == 0


@pytest.mark.both_databases
def test_fifty_puts_at_once_leave_one_row(app: Flask, auth, services):
    def put(index: int) -> int:
        body = {"value": f"{VALUE}-{index}"}
        return app.test_client().put("/api/secrets/API_TOKEN", headers=auth, json=body).status_code

    with ThreadPoolExecutor(max_workers=16) as pool:
        assert set(pool.map(put, range(50))) == {200}
    assert rows(services, OwnerSecret) == 1


# -- what is listed ----------------------------------------------------------------------


def test_values_are_sealed_at_rest_and_never_listed(client, auth, services):
    skill_hash = import_skill(client, auth)
    client.put("/api/secrets/API_TOKEN", headers=auth, json={"value": VALUE, "skill": "caller"})
    client.put("/api/secrets/OTHER", headers=auth, json={"value": "general-value"})

    listed = client.get("/api/secrets", headers=auth)
    assert VALUE not in listed.text and "general-value" not in listed.text
    secrets = {(s["name"], s["skill"]): s["allowed"] for s in listed.json["secrets"]}
    assert secrets == {("API_TOKEN", "caller"): True, ("OTHER", None): None}
    assert listed.json["skills"] == [
        {"skill": "caller", "hash": skill_hash, "declared": ["API_TOKEN"], "missing": [],
         "allowed": True}
    ]  # fmt: skip
    with services.sessions() as session:
        stored = list(session.scalars(select(OwnerSecret.value)))
    assert stored and all(VALUE not in value for value in stored)


def test_a_deleted_secret_is_gone_and_a_second_delete_is_404(client, auth):
    client.put("/api/secrets/API_TOKEN", headers=auth, json={"value": VALUE})
    assert client.delete("/api/secrets/API_TOKEN", headers=auth).status_code == 204
    assert client.delete("/api/secrets/API_TOKEN", headers=auth).status_code == 404
    assert client.get("/api/secrets", headers=auth).json["secrets"] == []


# -- a call that would lack a secret -----------------------------------------------------


def test_a_call_without_the_secret_fails_before_the_policy_naming_it_and_how_to_give_it(
    client, auth, agent_auth, services
):
    import_skill(client, auth)

    envelope = call(client, agent_auth)

    assert envelope["status"] == "failed"
    assert envelope["error"]["code"] == "secret_missing"
    assert "API_TOKEN" in envelope["error"]["message"]
    assert "request_secret" in envelope["error"]["message"]
    assert "skillfleet secrets set" in envelope["error"]["message"]
    assert rows(services, Approval) == 0


def test_a_general_secret_needs_the_owner_to_allow_the_skills_version(client, auth, agent_auth):
    skill_hash = import_skill(client, auth)
    client.put("/api/secrets/API_TOKEN", headers=auth, json={"value": VALUE})

    refused = call(client, agent_auth)
    assert refused["error"]["code"] == "secret_missing"
    assert "not allowed this version" in refused["error"]["message"]

    allowed = client.put("/api/secrets/skills/caller", headers=auth, json={"hash": skill_hash[:8]})
    assert allowed.json == {"skill": "caller", "hash": skill_hash, "allowed": True}
    assert call(client, agent_auth)["status"] != "failed"


def test_a_changed_skill_loses_its_leave_until_the_owner_allows_the_new_hash(
    client, auth, agent_auth, services
):
    old = import_skill(client, auth)
    client.put("/api/secrets/API_TOKEN", headers=auth, json={"value": VALUE, "skill": "caller"})
    assert call(client, agent_auth)["status"] != "failed"

    new = edit_skill(client, auth, old)
    refused = call(client, agent_auth)
    assert refused["error"]["code"] == "secret_missing"
    assert new[:8] in refused["error"]["message"]
    stale = client.put("/api/secrets/skills/caller", headers=auth, json={"hash": old[:8]})
    assert (stale.status_code, stale.json["code"]) == (409, "skill_changed")

    assert (
        client.put("/api/secrets/skills/caller", headers=auth, json={"hash": new}).status_code
        == 200
    )
    assert call(client, agent_auth)["status"] != "failed"
    with services.sessions() as session:
        keys = list(session.scalars(select(Grant.key).where(Grant.scope == "secret")))
    assert keys == [f"secret:caller@{new}"]  # the full hash, the old version's key gone


def test_withdrawing_the_leave_fails_the_next_call(client, auth, agent_auth, services):
    import_skill(client, auth)
    client.put("/api/secrets/API_TOKEN", headers=auth, json={"value": VALUE, "skill": "caller"})
    assert client.delete("/api/secrets/skills/caller", headers=auth).status_code == 204
    assert call(client, agent_auth)["error"]["code"] == "secret_missing"
    with services.sessions() as session:
        errors = list(session.scalars(select(ToolCall.error_code)))
    assert errors == ["secret_missing"]


def test_the_skills_page_shows_what_it_declares_whether_each_is_set_and_allowed(
    client, auth, agent_auth, other_auth
):
    import_skill(client, auth)

    def shown(headers: dict[str, str]) -> tuple[list[dict[str, Any]], bool | None]:
        detail = client.get("/api/skills/caller", headers=headers).json
        return detail["secrets"], detail["secrets_allowed"]

    assert shown(auth) == ([{"name": "API_TOKEN", "set": False}], False)
    client.put("/api/secrets/API_TOKEN", headers=auth, json={"value": VALUE, "skill": "caller"})
    assert shown(auth) == ([{"name": "API_TOKEN", "set": True}], True)
    assert shown(agent_auth) == ([{"name": "API_TOKEN", "set": True}], True)
    page = client.get("/api/skills/caller", headers=auth).get_data(as_text=True)
    assert VALUE not in page
    # A skill that declares none says so, and another owner sees only their own skills.
    assert client.get("/api/skills/skill-authoring", headers=auth).json["secrets"] == []
    assert client.get("/api/skills/skill-authoring", headers=auth).json["secrets_allowed"] is None
    assert client.get("/api/skills/caller", headers=other_auth).status_code == 404


def test_load_skill_names_the_secrets_its_scripts_read_and_never_a_value(client, auth, agent_auth):
    import_skill(client, auth)
    client.put("/api/secrets/API_TOKEN", headers=auth, json={"value": VALUE, "skill": "caller"})
    body = {"arguments": {"skill_name": "caller"}, "chat_id": "load"}

    loaded = client.post("/api/tools/load_skill", headers=agent_auth, json=body)

    assert loaded.json["result"]["secrets"] == ["API_TOKEN"]
    assert "request_secret" in loaded.json["result"]["secrets_note"]
    assert VALUE not in loaded.text


def test_a_secret_given_on_request_secrets_card_lets_the_skills_next_call_run(
    client, auth, agent_auth
):
    import_skill(client, auth)
    assert call(client, agent_auth)["error"]["code"] == "secret_missing"
    asked = {"name": "API_TOKEN", "reason": "The API needs it.", "skill": "caller"}
    body = {"arguments": asked, "chat_id": "chat-1"}
    envelope = client.post("/api/tools/request_secret", headers=agent_auth, json=body).json
    assert envelope["status"] == "pending_question", envelope

    given = client.post(
        f"/api/questions/{envelope['question_id']}", headers=auth, json={"secret": VALUE}
    )

    assert given.status_code == 200, given.json
    assert call(client, agent_auth)["status"] != "failed"  # the card was the consent

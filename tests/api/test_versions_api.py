"""A skill's versions over the API: the list, a rollback, and the grants that follow a hash."""

from __future__ import annotations

import hashlib
import io
from concurrent.futures import ThreadPoolExecutor

import pytest
from factories import skill_files, zip_bytes
from sqlalchemy import select

from store.db import transaction
from store.models import Skill
from store.signing import public_key_text, verify_manifest
from store.tokens import create_node_token

CHANGE = {"skillfleet.tier": "change", "skillfleet.execution": "node"}


def install(client, auth, name: str, guide: str, replace: bool = True):
    files = skill_files(name, metadata=CHANGE)
    files["scripts/wipe.sh"] = b'#!/bin/bash\necho changing "$SKILLFLEET_ARGS"\n'
    files["references/guide.md"] = guide.encode()
    response = client.post(
        f"/api/skills?replace={'true' if replace else 'false'}",
        headers=auth,
        data={"file": (io.BytesIO(zip_bytes(files, top=name)), "s.zip")},
        content_type="multipart/form-data",
    )
    assert response.status_code == 201, response.json
    return response.json


def run(client, auth, name="changer"):
    body = {
        "arguments": {
            "skill_name": name,
            "script": "scripts/wipe.sh",
            "arguments": {"node": "web01", "path": "/tmp/x"},
        },
        "chat_id": "chat-1",
    }
    response = client.post("/api/tools/run_skill_script", headers=auth, json=body)
    assert response.status_code == 200, response.json
    return response.json


def roll(client, auth, name: str, skill_hash: object):
    return client.post(f"/api/skills/{name}/rollback", headers=auth, json={"hash": skill_hash})


def test_a_rollback_restores_the_grants_of_the_version_it_makes_current(client, auth):
    first = install(client, auth, "changer", "one")
    key = f"skill:changer@{first['hash'][:8]}"
    assert client.put("/api/settings", headers=auth, json={"auto_tools": [key]}).status_code == 200
    assert run(client, auth)["status"] == "done"
    second = install(client, auth, "changer", "two")
    # The grant names the first version's hash: it does not hold for the second.
    assert run(client, auth)["status"] == "pending_approval"
    back = roll(client, auth, "changer", first["hash"])
    assert back.status_code == 200, back.json
    assert back.json["hash"] == first["hash"]
    assert run(client, auth)["status"] == "done"
    # And back again to the second: the grant holds no more.
    assert roll(client, auth, "changer", second["hash"]).status_code == 200
    assert run(client, auth)["status"] == "pending_approval"


def test_the_versions_list_says_which_is_current_and_who_made_each(client, auth, agent_auth):
    first = install(client, auth, "changer", "one")
    second = install(client, auth, "changer", "two")
    listed = client.get("/api/skills/changer/versions", headers=agent_auth)
    assert listed.status_code == 200, listed.json
    assert [v["hash"] for v in listed.json] == [second["hash"], first["hash"]]
    newest, oldest = listed.json
    assert newest["current"] is True and oldest["current"] is False
    assert {(v["author"], v["source"], v["kept"], v["signed_by"]) for v in listed.json} == {
        ("owner", "upload", True, None)
    }
    assert newest["file_count"] == 4 and newest["created_at"]
    assert newest["pinned"] is None  # an agent token reads no jobs
    roll(client, auth, "changer", first["hash"])
    again = client.get("/api/skills/changer/versions", headers=auth).json
    assert [v["current"] for v in again] == [False, True]


def test_a_rollback_keeps_the_skill_switch_and_moves_its_files(client, auth, services):
    first = install(client, auth, "changer", "one")
    install(client, auth, "changer", "two")
    client.put("/api/skills/changer/enabled", headers=auth, json={"enabled": False})
    assert roll(client, auth, "changer", first["hash"]).json["enabled"] is False
    guide = client.get("/api/skills/changer/files/references/guide.md", headers=auth)
    assert guide.data == b"one"


def test_a_node_is_served_the_package_of_the_version_rolled_back_to(client, auth, services):
    from conftest import offer_node

    first = install(client, auth, "changer", "one")
    install(client, auth, "changer", "two")
    offer_node(services, "web01")
    with transaction(services.sessions) as session:
        node = {"Authorization": f"Bearer {create_node_token(session, 'web01')}"}
    roll(client, auth, "changer", first["hash"])
    response = client.get("/api/nodes/web01/manifest", headers=node)
    manifest = verify_manifest(public_key_text(services.signing_key), response.json)
    [entry] = [e for e in manifest["packages"] if e["name"] == "changer"]
    assert entry["hash"] == first["hash"]
    package = client.get(f"/api/nodes/web01/packages/changer@{first['hash']}", headers=node)
    assert package.status_code == 200
    assert hashlib.sha256(package.data).hexdigest() == entry["sha256"]


@pytest.mark.both_databases  # concurrent writes of one skill
def test_fifty_concurrent_rollbacks_leave_one_consistent_skill(app, client, auth, services):
    first = install(client, auth, "changer", "one")
    second = install(client, auth, "changer", "two")
    targets = [first["hash"], second["hash"]] * 25

    def rollback(skill_hash: str) -> int:
        return roll(app.test_client(), auth, "changer", skill_hash).status_code

    with ThreadPoolExecutor(max_workers=16) as pool:
        statuses = list(pool.map(rollback, targets))
    assert set(statuses) == {200}
    now = client.get("/api/skills/changer", headers=auth).json
    assert now["hash"] in (first["hash"], second["hash"])
    guide = client.get("/api/skills/changer/files/references/guide.md", headers=auth).data
    assert guide == (b"one" if now["hash"] == first["hash"] else b"two")
    with services.sessions() as session:
        rows = session.scalars(select(Skill).where(Skill.name == "changer")).all()
    assert len(rows) == 1 and rows[0].hash == now["hash"]
    listed = client.get("/api/skills/changer/versions", headers=auth).json
    assert [v["hash"] for v in listed if v["current"]] == [now["hash"]]


# -- bad input ------------------------------------------------------------------------


def test_a_rollback_to_a_hash_the_skill_never_had_is_404(client, auth):
    install(client, auth, "changer", "one")
    refused = roll(client, auth, "changer", "0" * 64)
    assert (refused.status_code, refused.json["code"]) == (404, "version_not_found")


def test_a_rollback_to_another_owners_version_is_404(client, auth, other_auth):
    mine = install(client, auth, "changer", "mine")
    install(client, other_auth, "changer", "theirs")
    refused = roll(client, other_auth, "changer", mine["hash"])
    assert (refused.status_code, refused.json["code"]) == (404, "version_not_found")
    assert client.get("/api/skills/changer", headers=auth).json["hash"] == mine["hash"]


def test_another_owners_skill_has_no_versions_or_rollback_for_you(client, auth, other_auth):
    mine = install(client, auth, "changer", "mine")
    assert client.get("/api/skills/changer/versions", headers=other_auth).status_code == 404
    refused = roll(client, other_auth, "changer", mine["hash"])
    assert (refused.status_code, refused.json["code"]) == (404, "skill_not_found")


def test_a_rollback_needs_the_owners_token(client, auth, agent_auth):
    first = install(client, auth, "changer", "one")
    install(client, auth, "changer", "two")
    refused = roll(client, agent_auth, "changer", first["hash"])
    assert (refused.status_code, refused.json["code"]) == (403, "owner_only")
    assert roll(client, {}, "changer", first["hash"]).status_code == 401
    assert client.get("/api/skills/changer/versions").status_code == 401


def test_a_built_in_skill_lists_its_version_but_has_no_rollback(client, auth):
    listed = client.get("/api/skills/skill-authoring/versions", headers=auth).json
    assert [v["current"] for v in listed] == [True] and listed[0]["kept"] is False
    refused = roll(client, auth, "skill-authoring", listed[0]["hash"])
    assert (refused.status_code, refused.json["code"]) == (403, "skill_builtin")


@pytest.mark.parametrize("name", ["..%2Fx", "a%2Fb", "x%00y", "a" * 300, "Bad"])
def test_bad_skill_names_are_not_found(client, auth, name):
    install(client, auth, "changer", "one")
    assert client.get(f"/api/skills/{name}/versions", headers=auth).status_code == 404
    assert roll(client, auth, name, "0" * 64).status_code == 404


@pytest.mark.parametrize("body", [[], {"hash": 5}, {"hash": "abc"}, {}, {"hash": "0" * 64 + "\n"}])
def test_a_rollback_body_of_the_wrong_shape_is_refused(client, auth, body):
    first = install(client, auth, "changer", "one")
    install(client, auth, "changer", "two")
    refused = client.post("/api/skills/changer/rollback", headers=auth, json=body)
    assert refused.status_code == 422, refused.json
    assert client.get("/api/skills/changer", headers=auth).json["hash"] != first["hash"]


def test_an_oversize_rollback_body_is_refused(client, auth):
    install(client, auth, "changer", "one")
    body = b'{"hash": "' + b"0" * (6 * 1024 * 1024) + b'"}'
    refused = client.post(
        "/api/skills/changer/rollback",
        headers={**auth, "Content-Type": "application/json"},
        data=body,
    )
    assert refused.status_code == 413


# -- pinned versions -------------------------------------------------------------------


def pinned_job(name: str, skill_hash: str) -> dict:
    step = {
        "tool": "run_skill_script",
        "arguments": {
            "skill_name": f"{name}@{skill_hash}",
            "script": "scripts/wipe.sh",
            "arguments": {"node": "web01"},
        },
    }
    return {"name": "pinned", "cron": "30 2 * * *", "steps": [step], "skills": [name]}


def run_pinned(client, auth, name: str, skill_hash: str):
    body = {
        "arguments": {
            "skill_name": f"{name}@{skill_hash}",
            "script": "scripts/wipe.sh",
            "arguments": {"node": "web01", "path": "/tmp/x"},
        },
        "chat_id": "chat-1",
    }
    return client.post("/api/tools/run_skill_script", headers=auth, json=body).json


def test_a_job_shows_where_its_pinned_version_lags_behind(client, auth):
    first = install(client, auth, "changer", "one")
    job = client.post("/api/jobs", headers=auth, json=pinned_job("changer", first["hash"]))
    assert job.status_code == 201, job.json
    assert job.json["pins"] == [
        {"step": 1, "skill": "changer", "hash": first["hash"], "current_hash": first["hash"],
         "lagging": False}
    ]  # fmt: skip
    second = install(client, auth, "changer", "two")
    [pin] = client.get(f"/api/jobs/{job.json['id']}", headers=auth).json["pins"]
    assert (pin["current_hash"], pin["lagging"]) == (second["hash"], True)
    listed = client.get("/api/skills/changer/versions", headers=auth).json
    assert [v["pinned"] for v in listed] == [False, True]


def test_a_job_pinning_a_version_the_skill_never_had_is_refused(client, auth):
    install(client, auth, "changer", "one")
    refused = client.post("/api/jobs", headers=auth, json=pinned_job("changer", "0" * 64))
    assert (refused.status_code, refused.json["code"]) == (422, "pinned_version_unknown")
    bad = client.post("/api/jobs", headers=auth, json=pinned_job("changer", "abc"))
    assert (bad.status_code, bad.json["code"]) == (422, "job_invalid")
    assert client.get("/api/jobs", headers=auth).json == []


def test_a_pinned_call_asks_for_its_own_version_after_the_skill_moved_on(client, auth):
    first = install(client, auth, "changer", "one")
    install(client, auth, "changer", "two")
    asked = run_pinned(client, auth, "changer", first["hash"])
    assert asked["status"] == "pending_approval", asked
    card = client.get(f"/api/approvals/{asked['approval_id']}", headers=auth).json
    assert card["arguments"]["skill_name"] == f"changer@{first['hash']}"
    assert (card["skill_hash"], card["skill_changed"]) == (first["hash"], False)
    assert card["skill_hash_now"] != first["hash"]
    gone = run_pinned(client, auth, "changer", "0" * 64)
    assert gone["error"]["code"] == "version_not_found"
    assert gone["error"]["message"].startswith("HOST: 'changer' has no version '00000000")


def test_a_draft_and_an_owners_edit_are_versions_that_say_who_made_them(client, auth):
    from toolcalls import draft_arguments, tool

    drafted = tool(client, auth, "draft_skill", draft_arguments("notes-helper"))["result"]
    edited = client.put(
        "/api/skills/notes-helper/files/references/extra.md",
        headers=auth,
        json={"content": "More.\n", "hash": drafted["hash"]},
    )
    assert edited.status_code == 200, edited.json
    listed = client.get("/api/skills/notes-helper/versions", headers=auth).json
    assert [(v["hash"], v["source"], v["author"]) for v in listed] == [
        (edited.json["hash"], "edit", "owner"),
        (drafted["hash"], "draft", "assistant"),
    ]
    back = roll(client, auth, "notes-helper", drafted["hash"])
    assert back.status_code == 200 and back.json["locked"] is True  # the owner chose it
    assert (
        client.get("/api/skills/notes-helper/files/references/extra.md", headers=auth).status_code
        == 404
    )

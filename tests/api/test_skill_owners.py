"""Skills belong to their owner: another owner's skill is 404 on every route and tool."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from factories import skill_files, skill_folder, skill_zip, zip_bytes
from flask.testing import FlaskClient

from api.services import Services
from store.packagestore import PackageStore


def upload(client: FlaskClient, auth: dict[str, str], data: bytes, query: str = ""):
    body = {"file": (io.BytesIO(data), "skill.zip")}
    return client.post(
        f"/api/skills{query}", headers=auth, data=body, content_type="multipart/form-data"
    )


def tool(client: FlaskClient, auth: dict[str, str], name: str, arguments: dict[str, object]):
    response = client.post(f"/api/tools/{name}", headers=auth, json={"arguments": arguments})
    assert response.status_code == 200, response.json
    return response.json


@pytest.fixture
def alices(client: FlaskClient, auth: dict[str, str]) -> dict[str, object]:
    response = upload(client, auth, skill_zip("ledger"))
    assert response.status_code == 201, response.json
    return response.json


def test_another_owners_skill_is_not_found_on_every_route(
    client, auth, other_auth, services: Services, alices
):
    folder = skill_folder(services, "ledger")
    before = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))
    listed = [s["name"] for s in client.get("/api/skills", headers=other_auth).json]
    assert "ledger" not in listed and "skill-authoring" in listed
    attempts = [
        client.get("/api/skills/ledger", headers=other_auth),
        client.get("/api/skills/ledger/files/SKILL.md", headers=other_auth),
        client.put("/api/skills/ledger/enabled", headers=other_auth, json={"enabled": False}),
        client.post("/api/skills/ledger/duplicate", headers=other_auth, json={"name": "mine"}),
        client.delete("/api/skills/ledger", headers=other_auth),
    ]
    for response in attempts:
        assert response.status_code == 404, (response.request.path, response.json)
        assert response.json["code"] == "skill_not_found"
    # Nothing changed for Alice.
    mine = client.get("/api/skills/ledger", headers=auth).json
    assert mine["enabled"] is True and mine["hash"] == alices["hash"]
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) == before


def test_another_owners_skill_is_not_found_by_any_tool(client, auth, other_auth, alices):
    calls = [
        ("load_skill", {"skill_name": "ledger"}),
        ("read_skill_resource", {"skill_name": "ledger", "path": "SKILL.md"}),
        ("run_skill_script", {"skill_name": "ledger", "script": "scripts/hello.py"}),
    ]
    for name, arguments in calls:
        envelope = tool(client, other_auth, name, arguments)
        assert envelope["status"] == "failed", name
        assert envelope["error"]["code"] == "skill_not_found", name
    catalog = tool(client, other_auth, "list_skills", {})["result"]["skills"]
    assert "ledger" not in [s["name"] for s in catalog]
    assert client.get("/api/approvals", headers=other_auth).json == []


def test_replacing_with_the_same_name_makes_a_second_owner_their_own_skill(
    client, auth, other_auth, services: Services, alices
):
    files = skill_files("ledger")
    files["references/guide.md"] = b"# Bob's guide\n"
    bobs = upload(client, other_auth, zip_bytes(files, top="ledger"), "?replace=true")
    assert bobs.status_code == 201, bobs.json
    assert bobs.json["hash"] != alices["hash"]
    assert client.get("/api/skills/ledger", headers=auth).json["hash"] == alices["hash"]
    assert client.get("/api/skills/ledger", headers=other_auth).json["hash"] == bobs.json["hash"]
    guide = client.get("/api/skills/ledger/files/references/guide.md", headers=other_auth)
    assert guide.data == b"# Bob's guide\n"
    assert skill_folder(services, "ledger") != skill_folder(services, "ledger", owner="bob")
    # Bob deleting his copy leaves Alice's alone.
    assert client.delete("/api/skills/ledger", headers=other_auth).status_code == 204
    assert client.get("/api/skills/ledger", headers=auth).status_code == 200
    assert client.get("/api/skills/ledger", headers=other_auth).status_code == 404


def test_the_node_manifest_serves_both_owners_skills_of_one_name_by_hash(
    client, auth, other_auth, services: Services, alices
):
    files = skill_files("ledger")
    files["references/guide.md"] = b"# Bob's guide\n"
    bobs = upload(client, other_auth, zip_bytes(files, top="ledger")).json
    packages = PackageStore(services.settings.data_dir / "packages", services.store)
    manifest = packages.manifest_for("web01", services.sessions)
    held = {(p["name"], p["hash"]) for p in manifest["packages"]}
    assert {("ledger", alices["hash"]), ("ledger", bobs["hash"])} <= held
    for skill_hash in (alices["hash"], bobs["hash"]):
        found = packages.find("ledger", skill_hash, services.sessions, node="web01")
        assert found.hash == skill_hash and found.path.is_file()


def test_shared_skills_are_read_only_for_every_owner(client, auth, other_auth):
    for headers in (auth, other_auth):
        off = client.put(
            "/api/skills/skill-authoring/enabled", headers=headers, json={"enabled": False}
        )
        assert off.status_code == 403 and off.json["code"] == "skill_builtin"
        assert client.get("/api/skills/skill-authoring", headers=headers).status_code == 200


@pytest.mark.parametrize(
    "name", ["../ledger", "a/b", "a\x00b", "x" * 300, "Ledger", "a--b", "-ledger"]
)
def test_a_malformed_skill_name_is_not_found_and_nothing_is_touched(
    client, auth, services: Services, alices, name: str
):
    quoted = name.replace("\x00", "%00").replace("/", "%2F")
    for response in (
        client.get(f"/api/skills/{quoted}", headers=auth),
        client.delete(f"/api/skills/{quoted}", headers=auth),
    ):
        assert response.status_code in (404, 405), (name, response.status_code)
    envelope = tool(client, auth, "load_skill", {"skill_name": name})
    assert envelope["status"] == "failed"
    assert envelope["error"]["code"] == "skill_not_found"
    assert client.get("/api/skills/ledger", headers=auth).status_code == 200
    assert Path(skill_folder(services, "ledger"), "SKILL.md").is_file()

"""Skills belong to their owner: another owner's skill is 404 on every route and tool."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest
from conftest import offer_node
from factories import skill_files, skill_folder, skill_zip, zip_bytes
from flask.testing import FlaskClient
from toolcalls import draft_arguments

from api import create_app
from api.services import Services
from store.db import transaction
from store.errors import PackageNotFound
from store.packagestore import PackageStore
from store.skills import BUILTIN_DIR
from store.tokens import Role, create_owner_token, create_token


def files_of(folder: Path) -> dict[str, bytes]:
    """Every file under a skill's folder with its bytes."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


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
    before = files_of(folder)
    listed = [s["name"] for s in client.get("/api/skills", headers=other_auth).json]
    assert "ledger" not in listed and "skill-authoring" in listed
    known = alices["hash"]  # even knowing Alice's hash gets Bob nowhere
    guide = "/api/skills/ledger/files/references/guide.md"
    attempts = [
        client.get("/api/skills/ledger", headers=other_auth),
        client.get("/api/skills/ledger/files/SKILL.md", headers=other_auth),
        client.put(guide, headers=other_auth, json={"content": "# Bob's\n"}),
        client.put(guide, headers=other_auth, json={"content": "# Bob's\n", "hash": known}),
        client.put("/api/skills/ledger/files/new.md", headers=other_auth, json={"content": "x"}),
        client.delete(guide, headers=other_auth),
        client.delete(f"{guide}?hash={known}", headers=other_auth),
        client.put("/api/skills/ledger/enabled", headers=other_auth, json={"enabled": False}),
        client.put(
            "/api/skills/ledger/enabled", headers=other_auth, json={"enabled": False, "hash": known}
        ),
        client.post("/api/skills/ledger/duplicate", headers=other_auth, json={"name": "mine"}),
        client.delete("/api/skills/ledger", headers=other_auth),
    ]
    for response in attempts:
        assert response.status_code == 404, (response.request.path, response.json)
        assert response.json["code"] == "skill_not_found"
    # Nothing changed for Alice, and Bob got no copy.
    mine = client.get("/api/skills/ledger", headers=auth).json
    assert mine["enabled"] is True and mine["hash"] == alices["hash"]
    assert files_of(folder) == before
    assert client.get("/api/skills/mine", headers=other_auth).status_code == 404
    assert client.get("/api/skills/mine", headers=auth).status_code == 404


def test_another_owners_skill_is_not_found_by_any_tool(
    client, auth, other_auth, services: Services, alices
):
    folder = skill_folder(services, "ledger")
    before = files_of(folder)
    edit = {
        "skill_name": "ledger",
        "changes": {"files": {"references/guide.md": "# Bob's\n"}},
        "rationale": "Bob wants his own guide.",
    }
    calls = [
        ("load_skill", {"skill_name": "ledger"}),
        ("read_skill_resource", {"skill_name": "ledger", "path": "SKILL.md"}),
        ("run_skill_script", {"skill_name": "ledger", "script": "scripts/hello.py"}),
        ("get_skill", {"skill_name": "ledger"}),
        ("get_skill", {"skill_name": "ledger", "path": "references/guide.md"}),
        ("edit_skill", edit),
        ("edit_skill", {**edit, "changes": {"files": {"references/guide.md": None}}}),
    ]
    for name, arguments in calls:
        envelope = tool(client, other_auth, name, arguments)
        assert envelope["status"] == "failed", name
        assert envelope["error"]["code"] == "skill_not_found", name
    catalog = tool(client, other_auth, "list_skills", {"include_disabled": True})["result"]
    assert "ledger" not in [s["name"] for s in catalog["skills"]]
    assert client.get("/api/approvals", headers=other_auth).json == []
    assert client.get("/api/approvals", headers=auth).json == []
    mine = client.get("/api/skills/ledger", headers=auth).json
    assert mine["enabled"] is True and mine["hash"] == alices["hash"]
    assert files_of(folder) == before


def test_a_draft_over_another_owners_name_is_the_drafters_own_and_leaves_theirs_alone(
    client, auth, other_auth, services: Services, alices
):
    folder = skill_folder(services, "ledger")
    before = files_of(folder)
    drafted = tool(client, other_auth, "draft_skill", draft_arguments("ledger"))
    assert drafted["status"] == "done", drafted
    bobs = drafted["result"]
    assert bobs["replaced"] is False and bobs["enabled"] is False
    assert bobs["hash"] != alices["hash"]
    # Bob sees his own draft; Alice still sees her imported, enabled skill, unchanged.
    seen_by_bob = client.get("/api/skills/ledger", headers=other_auth).json
    assert seen_by_bob["hash"] == bobs["hash"] and seen_by_bob["author"] == "assistant"
    mine = client.get("/api/skills/ledger", headers=auth).json
    assert mine["hash"] == alices["hash"] and mine["enabled"] is True
    assert mine["author"] != "assistant"
    assert files_of(folder) == before
    assert skill_folder(services, "ledger", owner="bob") != folder
    assert [d["name"] for d in client.get("/api/review", headers=other_auth).json["drafts"]] == [
        "ledger"
    ]
    assert client.get("/api/review", headers=auth).json["drafts"] == []
    # Bob's second draft replaces his own, still never Alice's.
    again = tool(client, other_auth, "draft_skill", draft_arguments("ledger", body="Take two."))
    assert again["status"] == "done" and again["result"]["replaced"] is True
    assert client.get("/api/skills/ledger", headers=auth).json["hash"] == alices["hash"]
    assert files_of(folder) == before


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


def test_a_node_shared_by_two_owners_holds_both_skills_of_one_name_by_hash(
    client, auth, other_auth, services: Services, alices
):
    files = skill_files("ledger")
    files["references/guide.md"] = b"# Bob's guide\n"
    bobs = upload(client, other_auth, zip_bytes(files, top="ledger")).json
    offer_node(services, "web01", "bob")  # alice's node, shared with bob
    packages = PackageStore(services.settings.data_dir / "packages", services.store)
    manifest = packages.manifest_for("web01", services.sessions)
    held = {(p["name"], p["hash"]) for p in manifest["packages"]}
    assert {("ledger", alices["hash"]), ("ledger", bobs["hash"])} <= held
    for skill_hash in (alices["hash"], bobs["hash"]):
        found = packages.find("ledger", skill_hash, services.sessions, node="web01")
        assert found.hash == skill_hash and found.path.is_file()


def test_a_node_holds_only_its_owners_skills_and_serves_no_others_package(
    client, auth, other_auth, services: Services, alices
):
    files = skill_files("ledger")
    files["references/guide.md"] = b"# Bob's guide\n"
    bobs = upload(client, other_auth, zip_bytes(files, top="ledger")).json
    packages = PackageStore(services.settings.data_dir / "packages", services.store)
    held = {(p["name"], p["hash"]) for p in packages.manifest_for("web01", services.sessions)[
        "packages"]}  # fmt: skip
    assert ("ledger", alices["hash"]) in held and ("ledger", bobs["hash"]) not in held
    with pytest.raises(PackageNotFound):
        packages.find("ledger", bobs["hash"], services.sessions, node="web01")


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


def test_shared_skills_never_show_callers_their_folder_on_the_server(tmp_path, settings):
    shared = tmp_path / "operator-skills" / "team-notes"
    for relative, data in skill_files("team-notes").items():
        (shared / relative).parent.mkdir(parents=True, exist_ok=True)
        (shared / relative).write_bytes(data)
    services = Services.build(dataclasses.replace(settings, skill_paths=(shared.parent,)))
    try:
        client = create_app(services=services).test_client()
        with transaction(services.sessions) as session:
            tokens = [
                create_owner_token(session, "carol"),
                create_token(session, "carol", Role.AGENT),
            ]
        for token in tokens:
            headers = {"Authorization": f"Bearer {token}"}
            listed = client.get("/api/skills", headers=headers)
            assert listed.status_code == 200
            by_name = {skill["name"]: skill for skill in listed.json}
            shown = [client.get(f"/api/skills/{name}", headers=headers) for name in by_name]
            assert all(answer.status_code == 200 for answer in shown)
            for answer in (listed, *shown):
                assert str(tmp_path) not in answer.text and str(BUILTIN_DIR) not in answer.text
            assert by_name["team-notes"]["source"] == "path"
            assert by_name["team-notes"]["origin"] is None
            assert by_name["skill-authoring"]["origin"] is None
    finally:
        services.engine.dispose()

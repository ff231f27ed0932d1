"""The skills routes: import a zip, list, show, read files, switch, duplicate, delete."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor

import pytest
from factories import owner_id_of, skill_files, skill_folder, skill_zip, zip_bytes
from flask.testing import FlaskClient
from sqlalchemy import select

from api.services import Services
from store.hashing import content_hash, grant_key
from store.models import Skill


def upload(client: FlaskClient, auth: dict[str, str], data: bytes, query: str = "", **form: str):
    body = {"file": (io.BytesIO(data), "skill.zip"), **form}
    return client.post(
        f"/api/skills{query}", headers=auth, data=body, content_type="multipart/form-data"
    )


def test_importing_a_zip_with_a_top_folder_installs_and_enables_the_skill(client, auth, services):
    response = upload(client, auth, skill_zip("disk-report"))
    assert response.status_code == 201, response.json
    body = response.json
    assert body["name"] == "disk-report"
    assert body["enabled"] is True
    assert body["files"] == ["SKILL.md", "references/guide.md", "scripts/hello.py"]
    folder = skill_folder(services, "disk-report")
    assert body["hash"] == content_hash(folder)
    assert (folder / "scripts" / "hello.py").is_file()


def test_importing_a_zip_with_the_skill_at_its_root_works(client, auth):
    response = upload(client, auth, zip_bytes(skill_files("root-skill")))
    assert response.status_code == 201, response.json
    assert response.json["name"] == "root-skill"


def test_enable_false_imports_the_skill_disabled(client, auth):
    response = upload(client, auth, skill_zip("quiet"), enable="false")
    assert response.status_code == 201
    assert response.json["enabled"] is False
    listed = {s["name"]: s for s in client.get("/api/skills", headers=auth).json}
    assert listed["quiet"]["enabled"] is False


def test_listing_shows_builtins_and_imported_skills(client, auth):
    upload(client, auth, skill_zip("disk-report"))
    listed = {s["name"]: s for s in client.get("/api/skills", headers=auth).json}
    assert listed["skill-authoring"]["source"] == "builtin"
    assert listed["skill-authoring"]["read_only"] is True
    assert listed["disk-report"]["source"] == "upload"
    assert listed["disk-report"]["read_only"] is False


def test_showing_a_skill_lists_its_files_with_sizes(client, auth):
    upload(client, auth, skill_zip("disk-report"))
    detail = client.get("/api/skills/disk-report", headers=auth).json
    assert [f["path"] for f in detail["files"]] == [
        "SKILL.md",
        "references/guide.md",
        "scripts/hello.py",
    ]
    assert all(f["size"] > 0 for f in detail["files"])


def test_a_skill_file_can_be_downloaded(client, auth):
    upload(client, auth, skill_zip("disk-report"))
    response = client.get("/api/skills/disk-report/files/references/guide.md", headers=auth)
    assert response.status_code == 200
    assert response.data == b"# Guide\n\nRead me.\n"


def test_a_missing_skill_answers_404_with_its_code(client, auth):
    response = client.get("/api/skills/nope", headers=auth)
    assert response.status_code == 404
    assert response.json == {
        "code": "skill_not_found",
        "status": 404,
        "message": "No skill is named 'nope'.",
    }


def test_replace_true_replaces_an_owned_skill_and_changes_its_hash(client, auth, services):
    first = upload(client, auth, skill_zip("disk-report")).json
    changed = skill_files("disk-report")
    changed["references/guide.md"] = b"# Guide v2\n"
    second = upload(client, auth, zip_bytes(changed, top="disk-report"), "?replace=true")
    assert second.status_code == 201, second.json
    assert second.json["hash"] != first["hash"]
    skill = services.store.get(owner_id_of(services), "disk-report")
    assert skill.revision == 2
    assert grant_key("disk-report", skill.hash) != grant_key("disk-report", first["hash"])


def test_disabling_and_enabling_with_a_stale_hash_is_refused(client, auth):
    imported = upload(client, auth, skill_zip("disk-report")).json
    off = client.put("/api/skills/disk-report/enabled", headers=auth, json={"enabled": False})
    assert off.status_code == 200 and off.json["enabled"] is False
    stale = client.put(
        "/api/skills/disk-report/enabled", headers=auth, json={"enabled": True, "hash": "0" * 64}
    )
    assert stale.status_code == 409
    assert stale.json["code"] == "skill_changed"
    good = client.put(
        "/api/skills/disk-report/enabled",
        headers=auth,
        json={"enabled": True, "hash": imported["hash"]},
    )
    assert good.status_code == 200 and good.json["enabled"] is True


def test_a_builtin_can_be_duplicated_into_an_owned_copy(client, auth, services):
    response = client.post(
        "/api/skills/skill-authoring/duplicate", headers=auth, json={"name": "my-authoring"}
    )
    assert response.status_code == 201, response.json
    assert response.json["source"] == "copy"
    assert response.json["read_only"] is False
    copy = skill_folder(services, "my-authoring") / "SKILL.md"
    assert "name: my-authoring" in copy.read_text()


def test_builtins_cannot_be_deleted_or_replaced(client, auth, services):
    deleted = client.delete("/api/skills/skill-authoring", headers=auth)
    assert deleted.status_code == 403
    assert deleted.json["code"] == "skill_builtin"
    replaced = upload(client, auth, skill_zip("skill-authoring"), "?replace=true")
    assert replaced.status_code == 403
    assert replaced.json["code"] == "skill_builtin"
    assert services.store.get(owner_id_of(services), "skill-authoring").source == "builtin"


def test_deleting_an_owned_skill_removes_folder_and_index_entry(client, auth, services):
    upload(client, auth, skill_zip("disk-report"))
    folder = skill_folder(services, "disk-report")
    response = client.delete("/api/skills/disk-report", headers=auth)
    assert response.status_code == 204
    assert not folder.exists()
    assert client.get("/api/skills/disk-report", headers=auth).status_code == 404


@pytest.mark.both_databases  # concurrent writes of one row
def test_fifty_choices_of_where_a_skill_runs_at_once_leave_one_consistent_row(
    app, client, auth, services
):
    assert upload(client, auth, skill_zip("busy")).status_code == 201
    before = client.get("/api/skills/busy", headers=auth).json
    choices = ["node", "spark", "sandbox", None, "spark"] * 10

    def choose(choice: str | None) -> int:
        body = {"execution": choice}
        return (
            app.test_client().put("/api/skills/busy/execution", headers=auth, json=body).status_code
        )

    with ThreadPoolExecutor(max_workers=16) as pool:
        statuses = list(pool.map(choose, choices))

    assert set(statuses) == {200}
    after = client.get("/api/skills/busy", headers=auth).json
    assert (after["hash"], after["revision"]) == (before["hash"], before["revision"])
    assert after["execution"] == (after["execution_choice"] or "auto")
    with services.sessions() as session:
        rows = session.scalars(select(Skill).where(Skill.name == "busy")).all()
    assert len(rows) == 1 and rows[0].execution == after["execution"]


def test_importing_from_json_needs_a_github_address(client, auth):
    response = client.post("/api/skills", headers=auth, json={"url": "x"})
    assert response.status_code == 422
    assert response.json["code"] == "invalid_request"


def test_openapi_document_lists_the_skill_routes(client):
    spec = client.get("/api/openapi.json").json
    assert "/api/skills" in spec["paths"]
    assert "/api/tools/{tool}" in spec["paths"]
    assert spec["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"


def test_docs_page_is_served_with_local_assets(client):
    page = client.get("/api/docs")
    assert page.status_code == 200
    assert b"/api/docs/assets/swagger-ui-bundle.js" in page.data
    asset = client.get("/api/docs/assets/swagger-ui-bundle.js")
    assert asset.status_code == 200 and len(asset.data) > 100_000


def services_unused(services: Services) -> None:  # keeps the import used for typing
    del services

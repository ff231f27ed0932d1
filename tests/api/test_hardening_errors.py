"""Bad input that once answered 500: each is a 4xx with a stable code, and nothing is saved."""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from factories import owner_id_of, skill_folder, skill_zip
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


# -- a JSON integer longer than Python reads from text ---------------------------------------

LONG = "1" * 4301
INTEGER_TOO_LONG = (
    "The request body is not valid JSON: it holds an integer of more than 4,300 digits."
)


def post_json(client, method: str, path: str, auth: dict[str, str], text: str):
    headers = {**auth, "Content-Type": "application/json"}
    return client.open(path, method=method, data=text, headers=headers)


@pytest.mark.parametrize(
    ("method", "path", "text"),
    [
        ("POST", "/api/tools/list_skills", '{"arguments": {"page": %s}, "chat_id": "c1"}'),
        ("POST", "/api/tools/run_skill_script", '{"arguments": {}, "chat_id": %s}'),
        ("PUT", "/api/settings", '{"allowed": [%s]}'),
        ("PUT", "/api/settings/model", '{"max_tokens": %s}'),
        ("POST", "/api/jobs", '{"name": "n", "cron": "* * * * *", "steps": [%s]}'),
        ("POST", "/api/tokens", '{"role": "agent", "label": %s}'),
        ("POST", "/api/skills", '{"github": %s}'),
        ("PUT", "/api/skills/skill-authoring/execution", '{"execution": %s}'),
    ],
)
def test_an_integer_of_over_4300_digits_is_400_invalid_json_on_every_route(
    client, auth, services, method, path, text
):
    response = post_json(client, method, path, auth, text % LONG)

    assert response.status_code == 400, response.json
    assert response.json["code"] == "invalid_json"
    if path != "/api/skills":  # the import reads its body itself and says what it wants
        assert response.json["message"] == INTEGER_TOO_LONG
    assert job_count(services) == 0
    with services.sessions() as session:
        assert session.scalar(select(func.count()).select_from(ToolCall)) == 0


def test_an_integer_of_exactly_4300_digits_is_read_as_a_number(client, auth):
    text = '{"arguments": {"query": %s}, "chat_id": "c1"}' % ("1" * 4300)

    response = post_json(client, "POST", "/api/tools/list_skills", auth, text)

    # Read, then refused by the tool for not being text: the body itself was JSON.
    assert response.status_code == 200, response.json
    assert response.json["status"] == "failed"


def test_a_body_that_is_not_json_says_where_and_is_400_invalid_json(client, auth):
    response = post_json(client, "PUT", "/api/settings", auth, '{"allowed": [1,}')

    assert response.status_code == 400, response.json
    assert response.json == {
        "code": "invalid_json",
        "status": 400,
        "message": "The request body is not valid JSON: Expecting value (line 1, column 16).",
    }


def test_a_body_that_is_not_utf8_is_400_invalid_json(client, auth):
    headers = {**auth, "Content-Type": "application/json"}
    body = b'{"arguments": {"query": "\xff"}, "chat_id": "c1"}'

    response = client.post("/api/tools/list_skills", data=body, headers=headers)

    assert response.status_code == 400, response.json
    assert response.json["code"] == "invalid_json"
    assert response.json["message"] == "The request body is not valid JSON: it is not UTF-8 text."


# -- a skill deleted while its node package is built -----------------------------------------


class DeleteDuringBuild:
    """Deletes a skill through the store at the moment its package build opens its first file.

    An audit hook ("open" is raised by os.open) stands between the build listing the skill's
    files and reading them: the window in which a delete by the owner lands in production.
    Audit hooks stay for the life of the process, so this one is disarmed after its one delete.
    """

    def __init__(self) -> None:
        self.armed: tuple[Any, int, str, str] | None = None
        self.deleted = False
        sys.addaudithook(self.hook)

    def arm(self, services: Any, owner_id: int, name: str) -> None:
        folder = str(skill_folder(services, name))
        self.armed = (services, owner_id, name, folder)

    def hook(self, event: str, args: tuple[object, ...]) -> None:
        armed = self.armed
        if armed is None or event != "open" or not isinstance(args[0], str):
            return
        services, owner_id, name, folder = armed
        if args[0].startswith(folder + os.sep):
            self.armed = None  # before deleting: the delete opens files too
            services.store.delete(owner_id, name)
            self.deleted = True


_DELETER: DeleteDuringBuild | None = None


@pytest.fixture
def delete_during_build() -> Iterator[DeleteDuringBuild]:
    global _DELETER
    if _DELETER is None:
        _DELETER = DeleteDuringBuild()
    _DELETER.deleted = False
    yield _DELETER
    _DELETER.armed = None


def upload_node_skill(client, auth, name: str) -> dict:
    body = {"file": (io.BytesIO(skill_zip(name)), "skill.zip")}
    response = client.post(
        "/api/skills", headers=auth, data=body, content_type="multipart/form-data"
    )
    assert response.status_code == 201, response.json
    return response.json


def test_a_skill_deleted_while_the_manifest_builds_its_package_is_left_out_not_a_500(
    client, auth, services, delete_during_build
):
    upload_node_skill(client, auth, "disk-report")
    delete_during_build.arm(services, owner_id_of(services), "disk-report")

    response = client.get("/api/nodes/web01/manifest", headers=auth)

    assert delete_during_build.deleted
    assert response.status_code == 200, response.json
    names = [entry["name"] for entry in response.json["manifest"]["packages"]]
    assert "disk-report" not in names
    assert client.get("/api/skills/disk-report", headers=auth).status_code == 404
    assert list(services.packages.packages_dir.glob("disk-report@*")) == []


def test_a_skill_deleted_while_its_package_download_builds_it_is_404_not_a_500(
    client, auth, services, delete_during_build
):
    skill = upload_node_skill(client, auth, "disk-report")
    delete_during_build.arm(services, owner_id_of(services), "disk-report")

    response = client.get(f"/api/nodes/web01/packages/disk-report@{skill['hash']}", headers=auth)

    assert delete_during_build.deleted
    assert response.status_code == 404, response.json
    assert response.json["code"] == "package_not_found"
    assert "deleted" in response.json["message"]
    assert list(services.packages.packages_dir.glob("disk-report@*")) == []

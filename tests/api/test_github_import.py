"""Importing through `{"github": url}` against a local stand-in for GitHub's API."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from factories import store_snapshot
from github_standin import StandIn, serve

from api import create_app
from api.services import Services
from store.db import transaction
from store.tokens import create_owner_token


@pytest.fixture
def github() -> Iterator[StandIn]:
    with serve() as server:
        yield server


@pytest.fixture
def gh_services(settings, github) -> Iterator[Services]:
    built = Services.build(settings.with_overrides(github_api_url=github.base_url))
    yield built
    built.engine.dispose()


@pytest.fixture
def gh_client(gh_services):
    return create_app(services=gh_services).test_client()


@pytest.fixture
def gh_auth(gh_services) -> dict[str, str]:
    with transaction(gh_services.sessions) as session:
        return {"Authorization": f"Bearer {create_owner_token(session, 'alice')}"}


def test_a_github_folder_is_imported_through_the_api(gh_client, gh_auth, github):
    url = "https://github.com/octo/skills/tree/main/skills/demo"
    response = gh_client.post("/api/skills", headers=gh_auth, json={"github": url})
    assert response.status_code == 201, response.json
    assert response.json["name"] == "demo"
    assert "scripts/run.py" in response.json["files"]
    listed = {s["name"]: s for s in gh_client.get("/api/skills", headers=gh_auth).json}
    assert listed["demo"]["source"] == "github"
    assert listed["demo"]["origin"] == url
    assert all(seen.path.startswith("/repos/octo/skills/contents") for seen in github.requests)


@pytest.mark.parametrize(
    ("url", "status", "code"),
    [
        ("https://github.com/octo/skills/blob/main/skills/demo/SKILL.md", 400, "invalid_source"),
        ("https://gitlab.com/octo/skills/tree/main/skills/demo", 400, "invalid_source"),
        ("https://github.com/octo/skills/tree/main/skills/linked", 422, "archive_unsafe"),
        ("https://github.com/octo/skills/tree/main/skills/huge", 413, "skill_too_large"),
        ("https://github.com/octo/skills/tree/main/skills/nothing-here", 502, "import_failed"),
        ("https://github.com/octo/limited/tree/main/x", 502, "import_failed"),
    ],
)
def test_refused_github_imports_leave_the_store_unchanged(
    gh_client, gh_auth, gh_services, url, status, code
):
    before = store_snapshot(gh_services.settings.skills_dir, gh_services.sessions)
    response = gh_client.post("/api/skills", headers=gh_auth, json={"github": url})
    assert response.status_code == status, response.json
    assert response.json["code"] == code
    assert store_snapshot(gh_services.settings.skills_dir, gh_services.sessions) == before


def test_a_github_skill_with_claude_code_keys_imports_with_its_warnings(gh_client, gh_auth):
    url = "https://github.com/octo/collection/tree/main/skills/commit-helper"
    response = gh_client.post("/api/skills", headers=gh_auth, json={"github": url})
    assert response.status_code == 201, response.json
    assert response.json["name"] == "commit-helper"
    assert any("argument-hint" in warning for warning in response.json["warnings"])


def test_a_github_repository_imports_each_skill_folder_and_downloads_only_those(
    gh_client, gh_auth, gh_services, github
):
    url = "https://github.com/octo/collection/tree/main"
    response = gh_client.post("/api/skills", headers=gh_auth, json={"github": url})

    assert response.status_code == 207, response.json
    imported = {item["folder"]: item["name"] for item in response.json["imported"]}
    assert imported == {"skills/commit-helper": "commit-helper", "skills/pdf": "pdf-tools"}
    (refused,) = response.json["refused"]
    assert (refused["folder"], refused["code"]) == ("skills/linked", "archive_unsafe")
    assert not list(gh_services.settings.skills_dir.glob("*/linked"))
    downloaded = github.downloads()
    assert downloaded and all(
        path.startswith(
            (
                "/repos/octo/collection/contents/skills/commit-helper/",
                "/repos/octo/collection/contents/skills/pdf/",
            )
        )
        for path in downloaded
    )
    listed = {s["name"]: s for s in gh_client.get("/api/skills", headers=gh_auth).json}
    assert listed["pdf-tools"]["origin"] == f"{url}/skills/pdf"


def test_a_name_given_to_a_github_folder_of_skills_is_refused(gh_client, gh_auth, gh_services):
    before = store_snapshot(gh_services.settings.skills_dir, gh_services.sessions)
    url = "https://github.com/octo/collection/tree/main/skills"
    response = gh_client.post("/api/skills?name=one-name", headers=gh_auth, json={"github": url})
    assert response.status_code == 400, response.json
    assert response.json["code"] == "name_not_applicable"
    assert store_snapshot(gh_services.settings.skills_dir, gh_services.sessions) == before

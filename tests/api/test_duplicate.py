"""Duplicating a skill validates the new name before any file is written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from factories import skill_folder

from api.services import Services


def files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


@pytest.mark.parametrize(
    "new_name",
    [
        "../../../x",
        "../x",
        "/tmp/skillfleet-escape",
        "a/b",
        "a--b",
        "Bad Name",
        "x" * 300,
        "nul\x00name",
        "-lead",
        ".",
        "..",
    ],
)
def test_a_bad_new_name_is_refused_with_422_and_nothing_is_written(
    client, auth, services: Services, tmp_path: Path, new_name: str
):
    before = files_under(tmp_path)
    response = client.post(
        "/api/skills/skill-authoring/duplicate", headers=auth, json={"name": new_name}
    )
    assert response.status_code == 422, response.json
    assert response.json["code"] == "skill_invalid"
    assert files_under(tmp_path) == before
    assert not Path("/tmp/skillfleet-escape").exists()
    assert not (tmp_path.parent / "x").exists()


def test_an_empty_name_is_422_and_a_taken_name_is_409(client, auth, services: Services):
    empty = client.post("/api/skills/skill-authoring/duplicate", headers=auth, json={"name": ""})
    assert empty.status_code == 422
    first = client.post(
        "/api/skills/skill-authoring/duplicate", headers=auth, json={"name": "my-notes"}
    )
    assert first.status_code == 201, first.json
    again = client.post(
        "/api/skills/skill-authoring/duplicate", headers=auth, json={"name": "my-notes"}
    )
    assert again.status_code == 409 and again.json["code"] == "skill_exists"
    builtin = client.post(
        "/api/skills/skill-authoring/duplicate", headers=auth, json={"name": "skill-authoring"}
    )
    assert builtin.status_code == 409
    assert (skill_folder(services, "my-notes") / "SKILL.md").is_file()


def test_wrong_json_shapes_are_422(client, auth):
    for body in ({}, {"name": 7}, {"name": None}, {"name": ["a"]}, [], "x"):
        response = client.post("/api/skills/skill-authoring/duplicate", headers=auth, json=body)
        assert response.status_code == 422, (body, response.json)


def test_duplicating_as_root_never_writes_outside_the_data_dir(client, auth, tmp_path: Path):
    # The API often runs as root, so permissions would not stop a stray write.
    outside = tmp_path.parent / f"escape-{os.getpid()}"
    response = client.post(
        "/api/skills/skill-authoring/duplicate", headers=auth, json={"name": str(outside)}
    )
    assert response.status_code == 422
    assert not outside.exists()

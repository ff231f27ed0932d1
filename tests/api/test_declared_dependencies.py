"""Declared dependencies at import: requirement lines that point anywhere but the package
index are refused with the skill (422 skill_invalid, nothing stored), a package no index has is
refused after uv resolved it, and what a skill declares is on its page and its approvals."""

from __future__ import annotations

import io

import pytest
from factories import skill_files, store_snapshot, zip_bytes
from flask.testing import FlaskClient

from store.schemas import scripts_of

REFUSED = [
    ("--index-url https://mirror.example/simple", "is an option"),
    ("--extra-index-url https://mirror.example/simple", "is an option"),
    ("-i https://mirror.example/simple", "is an option"),
    ("-e .", "is an option"),
    ("--editable ./tools", "is an option"),
    ("-f https://example.com/wheels", "is an option"),
    ("--find-links ./wheels", "is an option"),
    ("-r other.txt", "is an option"),
    ("./vendor/tool", "points elsewhere"),
    ("/opt/wheels/tool.whl", "points elsewhere"),
    ("https://example.com/tool-1.0.tar.gz", "points elsewhere"),
    ("git+https://github.com/example/tool", "points elsewhere"),
    ("tool @ https://example.com/tool-1.0-py3-none-any.whl", "points elsewhere"),
    ("tool @ file:///opt/tool", "points elsewhere"),
]


def upload(client: FlaskClient, auth: dict[str, str], files: dict[str, bytes]):
    body = {"file": (io.BytesIO(zip_bytes(files, top="deps")), "deps.zip")}
    return client.post("/api/skills", headers=auth, data=body, content_type="multipart/form-data")


@pytest.mark.parametrize(("line", "why"), REFUSED)
def test_a_requirement_line_that_points_elsewhere_is_refused_and_nothing_is_stored(
    client, auth, services, line, why
):
    before = store_snapshot(services.settings.skills_dir, services.sessions)
    files = skill_files("deps")
    files["requirements.txt"] = f"pyyaml\n{line}\n".encode()

    response = upload(client, auth, files)

    assert response.status_code == 422
    assert response.json["code"] == "skill_invalid"
    assert response.json["errors"] == [
        next(error for error in response.json["errors"] if error.startswith("requirements.txt"))
    ]
    assert response.json["errors"][0].startswith(f'requirements.txt line 2: "{line}" {why}')
    assert "package index only" in response.json["errors"][0]
    assert store_snapshot(services.settings.skills_dir, services.sessions) == before


def test_a_pep_723_block_that_names_a_url_is_refused_with_the_script_named(client, auth):
    files = skill_files("deps")
    files["scripts/tool.py"] = (
        b'# /// script\n# dependencies = ["tool @ https://example.com/tool.whl"]\n# ///\n'
    )

    response = upload(client, auth, files)

    assert response.status_code == 422
    assert response.json["errors"] == [
        'scripts/tool.py\'s script block: "tool @ https://example.com/tool.whl" points '
        "elsewhere (a path, a URL or a repository); packages come from the operator's package "
        "index only, so name them by name and version."
    ]


def test_a_package_no_index_has_is_refused_with_uvs_reason(client, auth, services):
    before = store_snapshot(services.settings.skills_dir, services.sessions)
    files = skill_files("deps")
    files["requirements.txt"] = b"skillfleet-no-such-package-4711\n"

    response = upload(client, auth, files)

    assert response.status_code == 422
    assert response.json["code"] == "skill_invalid"
    (error,) = response.json["errors"]
    assert error.startswith("The skill's declared dependencies can't be installed: uv: ")
    assert "skillfleet-no-such-package-4711 was not found in the package registry" in error
    assert store_snapshot(services.settings.skills_dir, services.sessions) == before


def test_the_skill_page_lists_what_each_file_declares(client, auth):
    files = skill_files("deps")
    files["requirements.txt"] = b"# for the tables\ntabulate >= 0.9  # pretty\n"
    files["scripts/tool.py"] = (
        b'# /// script\n# requires-python = ">=3.11"\n# dependencies = ["pyyaml"]\n# ///\n'
        b"import yaml\n"
    )
    assert upload(client, auth, files).status_code == 201

    page = client.get("/api/skills/deps", headers=auth).json

    assert page["dependencies"] == [
        {"file": "requirements.txt", "requirements": ["tabulate>=0.9"]},
        {"file": "scripts/tool.py", "requirements": ["pyyaml"]},
    ]


def test_a_skill_that_declares_nothing_shows_no_dependencies(client, auth):
    assert upload(client, auth, skill_files("deps")).status_code == 201

    assert client.get("/api/skills/deps", headers=auth).json["dependencies"] == []


def test_a_typescript_file_under_scripts_is_a_script(tmp_path):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "tool.ts").write_text("console.log(Bun.version)\n")

    assert scripts_of(tmp_path) == ["scripts/tool.ts"]

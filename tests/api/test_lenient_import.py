"""Skills written for other agents import with warnings; what protects the system stays strict.

The fixtures in tests/fixtures/public-skills have the shapes found in public skill
repositories: Claude Code headers, marketplace keys, allowed-tools lists, display-style names.
"""

from __future__ import annotations

import io
import random
import stat
import zipfile
from pathlib import Path

import pytest
from factories import skill_folder, skill_md, skill_zip, store_snapshot, zip_bytes
from toolcalls import tool

from store.hashing import content_hash
from store.limits import MAX_SKILLS

FIXTURES = Path(__file__).parent.parent / "fixtures" / "public-skills"

# folder -> (installed name, fragments every one of which some warning holds)
EXPECTED = {
    "commit-helper": (
        "commit-helper",
        [
            '"argument-hint", "disable-model-invocation", "user-invocable", "model", "hooks"',
            "allowed-tools is written as a YAML list",
        ],
    ),
    "pdf": (
        "pdf-tools",
        [
            '"version", "author", "category", "source"',
            'The name "PDF Tools" is not a valid skill name (uppercase letters, spaces;',
            'installed as "pdf-tools"',
            "allowed-tools is written as a comma-separated list",
        ],
    ),
    "my_skill": ("my-skill", ['"my_skill" is not a valid skill name (underscores;']),
    "long-name": (
        "an-extremely-descriptive-skill-name-that-goes-on-well-past-the-l",
        ["(74 characters;"],
    ),
    "csv-tools": (
        "csv-toolkit",
        ['The name "csv-toolkit" differs from its folder "csv-tools"'],
    ),
    "no-name-skill": (
        "no-name-skill",
        ['The header key "tags" is not', "The header has no name", "its folder's name"],
    ),
    "adk-style": (
        "weather-report",
        ['The metadata values of "version", "tags" are not text'],
    ),
    "meeting-notes": (
        "meeting-notes",
        [
            "SKILL.md has no front matter (a header between '---' lines); it is read as a "
            "header with no keys.",
            'The header has no name; the skill is installed as "meeting-notes"',
            "The header has no description; the first paragraph of SKILL.md is used",
        ],
    ),
    "release-notes": (
        "release-notes",
        [
            "The front matter is not valid YAML: mapping values are not allowed here (line 3 "
            'of SKILL.md); the values of "description", "argument-hint" are read as plain '
            "text, as written."
        ],
    ),
}


def folder_files(folder: Path) -> dict[str, bytes]:
    return {
        path.relative_to(folder).as_posix(): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def post_zip(client, auth, data: bytes, query: str = "", filename: str = "skills.zip"):
    return client.post(
        f"/api/skills{query}",
        headers=auth,
        data={"file": (io.BytesIO(data), filename)},
        content_type="multipart/form-data",
    )


def has_fragment(warnings: list[str], fragment: str) -> bool:
    return any(fragment in warning for warning in warnings)


@pytest.mark.parametrize("folder", sorted(EXPECTED))
def test_a_public_skill_imports_under_the_expected_name_with_its_warnings(
    client, auth, services, folder
):
    name, fragments = EXPECTED[folder]
    files = folder_files(FIXTURES / folder)
    response = post_zip(client, auth, zip_bytes(files, top=folder))

    assert response.status_code == 201, response.json
    assert response.json["name"] == name
    for fragment in fragments:
        assert has_fragment(response.json["warnings"], fragment), response.json["warnings"]
    installed = skill_folder(services, name)
    assert (installed / "SKILL.md").read_bytes() == files["SKILL.md"]
    assert response.json["hash"] == content_hash(FIXTURES / folder)
    detail = client.get(f"/api/skills/{name}", headers=auth).json
    assert detail["warnings"] == response.json["warnings"]
    got = tool(client, auth, "get_skill", {"skill_name": name})["result"]
    assert got["warnings"] == response.json["warnings"]


def test_the_skill_shows_its_unknown_keys_as_written_and_its_allowed_tools(client, auth):
    files = folder_files(FIXTURES / "commit-helper")
    assert post_zip(client, auth, zip_bytes(files, top="commit-helper")).status_code == 201

    detail = client.get("/api/skills/commit-helper", headers=auth).json

    assert detail["unknown_keys"] == {
        "argument-hint": "[optional scope]",
        "disable-model-invocation": True,
        "user-invocable": True,
        "model": "claude-sonnet-4-5",
        "hooks": {"PreToolUse": [{"matcher": "Bash", "command": "./scripts/check.sh"}]},
    }
    assert detail["allowed_tools"] == (
        "Bash(git add:*) Bash(git status:*) Bash(git diff --staged) Read"
    )
    assert detail["declared_name"] is None
    got = tool(client, auth, "get_skill", {"skill_name": "commit-helper"})["result"]
    assert got["unknown_keys"] == detail["unknown_keys"]
    # Nothing in the header becomes a setting: the defaults hold.
    assert (detail["tier"], detail["execution"]) == ("change", "auto")


def test_a_renamed_skill_shows_the_name_its_skill_md_gives(client, auth):
    post_zip(client, auth, zip_bytes(folder_files(FIXTURES / "pdf"), top="pdf"))
    detail = client.get("/api/skills/pdf-tools", headers=auth).json
    assert detail["declared_name"] == "PDF Tools"
    assert detail["unknown_keys"]["author"] == "Jane Doe <jane@example.com>"


def test_skillfleet_settings_in_metadata_are_still_read(client, auth):
    post_zip(client, auth, zip_bytes(folder_files(FIXTURES / "adk-style"), top="adk-style"))
    assert client.get("/api/skills/weather-report", headers=auth).json["tier"] == "read"


def test_a_spec_conforming_skill_imports_without_warnings(client, auth):
    response = post_zip(client, auth, skill_zip("clean-skill"))
    assert response.status_code == 201
    assert response.json["warnings"] == []


def test_the_name_given_at_import_wins_and_is_said(client, auth, services):
    files = folder_files(FIXTURES / "pdf")
    response = post_zip(client, auth, zip_bytes(files, top="pdf"), "?name=pdf-kit")

    assert response.status_code == 201, response.json
    assert response.json["name"] == "pdf-kit"
    assert has_fragment(response.json["warnings"], 'Installed as "pdf-kit", the name given')
    assert (skill_folder(services, "pdf-kit") / "SKILL.md").read_bytes() == files["SKILL.md"]


def test_a_name_given_at_import_must_follow_the_name_rule(client, auth, services):
    before = store_snapshot(services.settings.skills_dir, services.sessions)
    response = post_zip(client, auth, skill_zip("clean-skill"), "?name=Not%20Valid")
    assert response.status_code == 422
    assert response.json["code"] == "skill_invalid"
    assert store_snapshot(services.settings.skills_dir, services.sessions) == before


def test_a_root_level_zip_without_a_name_asks_for_one_then_takes_it(client, auth):
    files = {"SKILL.md": b"---\ndescription: Nameless.\n---\nBody.\n"}
    refused = post_zip(client, auth, zip_bytes(files))
    assert refused.status_code == 422
    assert has_fragment(refused.json["errors"], "name= in the API")

    response = post_zip(client, auth, zip_bytes(files), "?name=nameless")
    assert response.status_code == 201, response.json
    assert response.json["name"] == "nameless"


def test_a_duplicated_renamed_skill_keeps_its_new_name(client, auth):
    post_zip(client, auth, zip_bytes(folder_files(FIXTURES / "pdf"), top="pdf"))
    response = client.post(
        "/api/skills/pdf-tools/duplicate", headers=auth, json={"name": "pdf-copy"}
    )
    assert response.status_code == 201, response.json
    assert response.json["name"] == "pdf-copy"


# -- many skills at once ------------------------------------------------------------------


def repository_zip(extra: dict[str, bytes] | None = None) -> bytes:
    """A repository's zip: README and LICENSE at the top, skill folders under skills/."""
    files = {"README.md": b"# Skills\n", "LICENSE": b"MIT\n"}
    for folder in EXPECTED:
        for rel, data in folder_files(FIXTURES / folder).items():
            files[f"skills/{folder}/{rel}"] = data
    files.update(extra or {})
    return zip_bytes(files, top="skills-main")


def test_a_repository_zip_imports_every_skill_folder_and_reports_each(client, auth, services):
    response = post_zip(client, auth, repository_zip(), filename="skills-main.zip")

    assert response.status_code == 200, response.json
    assert response.json["refused"] == []
    imported = {item["folder"]: item for item in response.json["imported"]}
    assert {folder: item["name"] for folder, item in imported.items()} == {
        f"skills-main/skills/{folder}": name for folder, (name, _fragments) in EXPECTED.items()
    }
    pdf = imported["skills-main/skills/pdf"]
    assert has_fragment(pdf["warnings"], 'installed as "pdf-tools"')
    assert pdf["hash"] == content_hash(FIXTURES / "pdf")
    listed = {s["name"]: s for s in client.get("/api/skills", headers=auth).json}
    assert listed["pdf-tools"]["origin"] == "skills-main.zip:skills-main/skills/pdf"
    assert not list(services.settings.skills_dir.rglob("README.md"))
    assert list((services.settings.skills_dir / ".staging").iterdir()) == []


def test_refused_skill_folders_are_reported_and_leave_nothing_behind(client, auth, services):
    broken = {
        "skills/bad-tier/SKILL.md": skill_md(
            "bad-tier", metadata={"skillfleet.tier": "admin"}
        ).encode(),
        "skills/broken-script/SKILL.md": skill_md("broken-script").encode(),
        "skills/broken-script/scripts/run.py": b"def broken(:\n",
        "skills/too-big/SKILL.md": skill_md("too-big").encode(),
        "skills/too-big/assets/big.bin": random.Random(0).randbytes(1024 * 1024 + 1),
    }
    response = post_zip(client, auth, repository_zip(broken))

    assert response.status_code == 207, response.json
    refused = {item["folder"]: item for item in response.json["refused"]}
    assert set(refused) == {
        "skills-main/skills/bad-tier",
        "skills-main/skills/broken-script",
        "skills-main/skills/too-big",
    }
    assert refused["skills-main/skills/bad-tier"]["code"] == "skill_invalid"
    assert has_fragment(refused["skills-main/skills/bad-tier"]["errors"], "skillfleet.tier")
    assert has_fragment(refused["skills-main/skills/broken-script"]["errors"], "scripts/run.py")
    assert refused["skills-main/skills/too-big"]["code"] == "skill_too_large"
    assert "1 MiB" in refused["skills-main/skills/too-big"]["message"]
    assert len(response.json["imported"]) == len(EXPECTED)
    installed = {p.name for p in services.settings.skills_dir.glob("*/*")}
    assert not installed & {"bad-tier", "broken-script", "too-big"}


@pytest.mark.both_databases
def test_two_folders_that_make_the_same_name_import_once_and_the_409_names_both(client, auth):
    files = {
        "one/Data Tools/SKILL.md": skill_md("Data Tools").encode(),
        "two/data_tools/SKILL.md": skill_md("data-tools").encode(),
    }
    response = post_zip(client, auth, zip_bytes(files))

    assert response.status_code == 207, response.json
    assert [item["name"] for item in response.json["imported"]] == ["data-tools"]
    (refused,) = response.json["refused"]
    assert refused["code"] == "skill_exists"
    assert refused["folder"] == "two/data_tools"
    assert "'data-tools'" in refused["message"]


def test_a_link_inside_one_skill_folder_refuses_that_skill_only(client, auth, services):
    link = zipfile.ZipInfo("skills-main/skills/linked/notes")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    link.create_system = 3
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("skills-main/skills/linked/SKILL.md", skill_md("linked"))
        archive.writestr(link, "/etc/passwd")
        archive.writestr("skills-main/skills/plain/SKILL.md", skill_md("plain"))
    response = post_zip(client, auth, buffer.getvalue())

    assert response.status_code == 207, response.json
    assert [item["name"] for item in response.json["imported"]] == ["plain"]
    assert response.json["refused"][0]["code"] == "archive_unsafe"
    assert not list(services.settings.skills_dir.glob("*/linked"))


def test_a_hostile_entry_anywhere_refuses_the_whole_repository_zip(client, auth, services):
    before = store_snapshot(services.settings.skills_dir, services.sessions)
    data = repository_zip({"skills/pdf/../../../evil.py": b"x"})
    response = post_zip(client, auth, data)
    assert response.status_code == 422, response.json
    assert response.json["code"] == "archive_unsafe"
    assert store_snapshot(services.settings.skills_dir, services.sessions) == before


def test_a_name_cannot_be_given_to_a_repository_zip(client, auth, services):
    before = store_snapshot(services.settings.skills_dir, services.sessions)
    response = post_zip(client, auth, repository_zip(), "?name=one-name")
    assert response.status_code == 400
    assert response.json["code"] == "name_not_applicable"
    assert store_snapshot(services.settings.skills_dir, services.sessions) == before


def many_skills(names: list[str], body: str = "") -> bytes:
    """A repository's zip holding one small skill folder per name."""
    files = {"README.md": b"# Skills\n"}
    for name in names:
        files[f"skills/{name}/SKILL.md"] = (skill_md(name) + body).encode()
    return zip_bytes(files, top="many-main")


def unversioned(paths: list[str]) -> list[str]:
    """Paths of the store but the files of kept versions (store/versions.py)."""
    return [path for path in paths if not path.startswith(".versions")]


def test_a_repository_zip_fills_the_store_to_its_limit_and_refuses_each_skill_past_it(
    client, auth, other_auth, services
):
    skills_dir = services.settings.skills_dir
    names = [f"skill-{i:03d}" for i in range(MAX_SKILLS + 2)]
    # One short of the limit, then a zip that takes the store to exactly it: all imported.
    first = post_zip(client, auth, many_skills(names[: MAX_SKILLS - 1]))
    assert first.status_code == 200, first.json["refused"][:1]
    exactly = post_zip(client, auth, many_skills(names[MAX_SKILLS - 1 : MAX_SKILLS]))
    assert exactly.status_code == 200, exactly.json
    assert [item["name"] for item in exactly.json["imported"]] == [names[MAX_SKILLS - 1]]
    full = store_snapshot(skills_dir, services.sessions)
    # One over: each new skill is refused on its own, with why; a replaced one still imports.
    over = post_zip(
        client,
        auth,
        many_skills([names[0], *names[MAX_SKILLS:]], body="Second version.\n"),
        "?replace=true",
    )
    assert over.status_code == 207, over.json
    assert [item["name"] for item in over.json["imported"]] == [names[0]]
    refused = {item["folder"]: item for item in over.json["refused"]}
    assert set(refused) == {f"many-main/skills/{name}" for name in names[MAX_SKILLS:]}
    for item in refused.values():
        assert item["code"] == "store_full"
        assert item["message"] == f"You already have {MAX_SKILLS} skills, the store's limit."
    owned = [s for s in client.get("/api/skills", headers=auth).json if s["source"] != "builtin"]
    assert len(owned) == MAX_SKILLS
    assert {s["name"] for s in owned} == set(names[:MAX_SKILLS])
    # Nothing half-written: the refused have no folder, and only the replaced skill changed.
    # (Kept versions' files, `.versions/`, gain the replaced skill's new ones.)
    paths, rows = store_snapshot(skills_dir, services.sessions)
    assert unversioned(paths) == unversioned(full[0])
    assert len(paths) - len(full[0]) == len(set(paths) - set(full[0])) == 1  # its new SKILL.md
    assert not [p for p in paths if any(p.endswith(f"/{name}") for name in names[MAX_SKILLS:])]
    changed = {row[0] for row in set(rows) ^ set(full[1])}
    assert changed == {names[0]}
    assert list((skills_dir / ".staging").iterdir()) == []
    # The limit is each owner's: another owner imports the same zip's new skills.
    theirs = post_zip(client, other_auth, many_skills(names[MAX_SKILLS:]))
    assert theirs.status_code == 200, theirs.json


def test_the_openapi_document_describes_both_import_answers(client):
    spec = client.get("/api/openapi.json").json
    responses = spec["paths"]["/api/skills"]["post"]["responses"]
    assert {"200", "201", "207"} <= set(responses)
    assert "BundleImport" in spec["components"]["schemas"]


def test_a_header_with_unquoted_colons_keeps_its_values_as_written(client, auth):
    files = folder_files(FIXTURES / "release-notes")
    assert post_zip(client, auth, zip_bytes(files, top="release-notes")).status_code == 201

    detail = client.get("/api/skills/release-notes", headers=auth).json
    assert detail["description"] == (
        "Drafts release notes from merged pull requests. Use when: the user asks for a "
        'changelog or "notes for v2".'
    )
    assert detail["unknown_keys"] == {"argument-hint": "@CHANGELOG.md"}
    got = tool(client, auth, "get_skill", {"skill_name": "release-notes"})["result"]
    assert got["header"]["description"] == detail["description"]


def test_a_skill_md_without_front_matter_is_described_by_its_first_paragraph(client, auth):
    files = folder_files(FIXTURES / "meeting-notes")
    assert post_zip(client, auth, zip_bytes(files, top="meeting-notes")).status_code == 201

    listed = tool(client, auth, "list_skills", {})["result"]["skills"]
    descriptions = {skill["name"]: skill["description"] for skill in listed}
    assert descriptions["meeting-notes"] == (
        "Turns a raw meeting transcript into short notes with decisions, owners and due dates."
    )
    got = tool(client, auth, "get_skill", {"skill_name": "meeting-notes"})["result"]
    assert got["header"] == {}
    assert got["body"].startswith("# Meeting Notes\n")

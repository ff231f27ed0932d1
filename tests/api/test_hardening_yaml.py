"""A SKILL.md header whose YAML aliases multiply is refused as it is read, on every way in.

Nine levels of anchors, ten aliases each, are 600 bytes that stand for a billion values; the
header reader counts what the aliases repeat and refuses the header before anything walks it.
"""

from __future__ import annotations

import io

import pytest
from factories import skill_files, store_snapshot, zip_bytes
from toolcalls import draft_arguments, tool

from store.limits import MAX_YAML_VALUES

LEVELS = [5, 7, 9]


def alias_bomb(levels: int, indent: str = "  ") -> str:
    """YAML lines of anchors nested `levels` deep, ten aliases each: 10**levels values."""
    lines = [f"{indent}a0: &a0 [" + ", ".join(["x"] * 10) + "]"]
    for level in range(1, levels):
        lines.append(f"{indent}a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * 10) + "]")
    return "\n".join(lines)


def bomb_skill_md(name: str, levels: int) -> str:
    return (
        f"---\nname: {name}\ndescription: Reads the disks and says which is full.\n"
        f"metadata:\n{alias_bomb(levels)}\n---\n\n# Steps\n\nRead the disks.\n"
    )


def post_zip(client, auth, files: dict[str, bytes], top: str):
    return client.post(
        "/api/skills",
        headers=auth,
        data={"file": (io.BytesIO(zip_bytes(files, top=top)), "skill.zip")},
        content_type="multipart/form-data",
    )


def staged(services) -> list[str]:
    staging = services.settings.skills_dir / ".staging"
    return sorted(p.name for p in staging.iterdir()) if staging.exists() else []


# The value that crosses the bound is a3, the first anchor to stand for over 10,000 values.
TOO_LARGE = (
    "The front matter is too large to read: with its aliases written out it holds more "
    f"than {MAX_YAML_VALUES:,} values (line 8 of SKILL.md)."
)


@pytest.fixture
def report(client, auth) -> dict:
    """An owner's skill, imported and enabled, for edit_skill to change."""
    response = post_zip(client, auth, skill_files("disk-report"), top="disk-report")
    assert response.status_code == 201, response.json
    return response.json


@pytest.mark.parametrize("levels", LEVELS)
def test_an_alias_bomb_in_an_uploaded_skill_is_422_and_nothing_is_stored_or_staged(
    client, auth, services, levels
):
    files = skill_files("bomb")
    files["SKILL.md"] = bomb_skill_md("bomb", levels).encode()
    before = store_snapshot(services.settings.skills_dir, services.sessions)

    response = post_zip(client, auth, files, top="bomb")

    assert response.status_code == 422, response.json
    assert response.json["code"] == "skill_invalid"
    assert response.json["errors"] == [TOO_LARGE]
    assert store_snapshot(services.settings.skills_dir, services.sessions) == before
    assert staged(services) == []
    assert client.get("/api/skills/bomb", headers=auth).status_code == 404


def test_an_alias_inside_its_own_anchor_is_422_rather_than_endless(client, auth, services):
    files = skill_files("loop")
    files["SKILL.md"] = (
        b"---\nname: loop\ndescription: Loops.\nmetadata:\n  tree: &tree {child: [*tree]}\n---\n"
    )

    response = post_zip(client, auth, files, top="loop")

    assert response.status_code == 422, response.json
    assert response.json["code"] == "skill_invalid"
    assert response.json["errors"] == [
        "The front matter is too large to read: the alias *tree repeats the value it stands "
        "in, endlessly (line 5 of SKILL.md)."
    ]
    assert staged(services) == []


def test_aliases_that_nest_deeper_than_allowed_once_written_out_are_422(client, auth):
    # Each anchor nests 20 levels and holds the one before: 60 levels once written out.
    files = skill_files("deep-alias")
    lines = ["  d0: &d0 " + "[" * 20 + "x" + "]" * 20]
    for level in (1, 2):
        lines.append(f"  d{level}: &d{level} " + "[" * 20 + f"*d{level - 1}" + "]" * 20)
    files["SKILL.md"] = (
        "---\nname: deep-alias\ndescription: Deep.\nmetadata:\n" + "\n".join(lines) + "\n---\n"
    ).encode()

    response = post_zip(client, auth, files, top="deep-alias")

    assert response.status_code == 422, response.json
    (problem,) = response.json["errors"]
    assert "with its aliases written out it nests deeper than 32 levels" in problem


def test_a_header_that_shares_a_value_a_few_times_still_imports(client, auth):
    files = skill_files("shared")
    files["SKILL.md"] = (
        b"---\nname: shared\ndescription: Shares one list.\nmetadata:\n"
        b"  hosts: &hosts [a.example, b.example]\n  mirrors: *hosts\n---\n\nBody.\n"
    )

    response = post_zip(client, auth, files, top="shared")

    assert response.status_code == 201, response.json


@pytest.mark.parametrize("levels", LEVELS)
def test_an_alias_bomb_written_by_edit_skill_fails_before_the_owner_is_asked(
    client, auth, agent_auth, services, report, levels
):
    arguments = {
        "skill_name": "disk-report",
        "changes": {"files": {"SKILL.md": bomb_skill_md("disk-report", levels)}},
        "rationale": "More metadata.",
    }

    answer = tool(client, agent_auth, "edit_skill", arguments)

    assert answer["status"] == "failed", answer
    assert answer["error"]["code"] == "skill_invalid"
    assert answer["error"]["message"] == (f"HOST: the edited skill would be refused: {TOO_LARGE}")
    assert client.get("/api/approvals", headers=auth).json == []
    assert client.get("/api/skills/disk-report", headers=auth).json["hash"] == report["hash"]
    assert staged(services) == []


@pytest.mark.parametrize("levels", LEVELS)
def test_draft_skill_writes_alias_text_as_quoted_text_so_no_alias_reaches_the_header(
    client, auth, agent_auth, services, levels
):
    # draft_skill writes the header itself from its fields: YAML in them stays plain text.
    bomb = alias_bomb(levels, indent="")
    arguments = draft_arguments(
        "bomb-draft",
        description="Reads disks.\n---\n" + bomb,
        metadata={"extra": bomb},
        body="---\n" + bomb + "\n---\n",
    )

    answer = tool(client, agent_auth, "draft_skill", arguments)

    assert answer["status"] == "done", answer
    skill = tool(client, agent_auth, "get_skill", {"skill_name": "bomb-draft"})["result"]
    assert skill["header"]["description"] == "Reads disks.\n---\n" + bomb
    assert skill["header"]["metadata"] == {"extra": bomb}
    assert staged(services) == []


def test_draft_skill_cannot_slip_a_skill_md_of_its_own_into_files(client, agent_auth, services):
    for path in ("SKILL.md", "SKILL.md/", "skill.md"):
        arguments = draft_arguments("bomb-draft", files={path: bomb_skill_md("bomb-draft", 9)})

        answer = tool(client, agent_auth, "draft_skill", arguments)

        assert answer["status"] == "failed", (path, answer)
        assert answer["error"]["code"] in ("invalid_call", "archive_unsafe"), (path, answer)
    assert staged(services) == []

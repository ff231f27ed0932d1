"""The read-only skill tools over POST /api/tools/<tool>, with the envelope of DESIGN.md §4."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor

import pytest
from factories import skill_files, skill_zip, zip_bytes

from store.discovery import read_only_skills
from store.skills import BUILTIN_DIR


def install(client, auth, name: str, files: dict[str, bytes] | None = None, **form: str) -> None:
    data = zip_bytes(files, top=name) if files else skill_zip(name)
    response = client.post(
        "/api/skills",
        headers=auth,
        data={"file": (io.BytesIO(data), "s.zip"), **form},
        content_type="multipart/form-data",
    )
    assert response.status_code == 201, response.json


def call(client, auth, tool: str, arguments=None, **envelope):
    body = {"arguments": arguments, **envelope}
    response = client.post(f"/api/tools/{tool}", headers=auth, json=body)
    assert response.status_code == 200, response.json
    return response.json


def test_tool_list_is_openai_style_function_definitions(client, auth):
    definitions = client.get("/api/tools", headers=auth).json
    names = [d["function"]["name"] for d in definitions]
    for expected in (
        "list_skills",
        "load_skill",
        "activate_skill",
        "read_skill_resource",
        "load_skill_resource",
        "refresh_skills",
        "run_skill_script",
    ):
        assert expected in names
    for definition in definitions:
        assert definition["type"] == "function"
        assert definition["function"]["parameters"]["type"] == "object"
        assert definition["function"]["description"]


def test_list_skills_gives_name_and_description_of_enabled_skills_only(client, auth):
    install(client, auth, "disk-report")
    install(client, auth, "quiet-one", enable="false")
    envelope = call(client, auth, "list_skills", {})
    assert envelope["status"] == "done"
    assert envelope["call_id"]
    skills = envelope["result"]["skills"]
    names = [s["name"] for s in skills]
    assert "disk-report" in names and "skill-authoring" in names
    assert "quiet-one" not in names
    assert set(skills[0]) == {"name", "description", "enabled", "author", "execution", "tier"}


def test_an_owned_skill_shadows_a_shared_one_of_its_name_for_its_owner_only(
    client, auth, other_auth, services, tmp_path
):
    install(client, auth, "disk-report", skill_files("disk-report", description="Mine."))
    shelf = tmp_path / "shelf" / "disk-report"
    for path, data in skill_files("disk-report", description="The operator's.").items():
        (shelf / path).parent.mkdir(parents=True, exist_ok=True)
        (shelf / path).write_bytes(data)
    services.store.sync_read_only(read_only_skills(BUILTIN_DIR, [tmp_path / "shelf"]))

    def listed(who):
        skills = call(client, who, "list_skills")["result"]["skills"]
        return [(s["description"], s["author"]) for s in skills if s["name"] == "disk-report"]

    assert listed(auth) == [("Mine.", "owner")]
    assert listed(other_auth) == [("The operator's.", "operator")]
    ranked = call(client, auth, "list_skills", {"query": "disk"})["result"]["skills"]
    assert [(s["name"], s["description"]) for s in ranked] == [("disk-report", "Mine.")]


def test_list_skills_query_ranks_by_keywords(client, auth):
    install(
        client, auth, "disk-report", skill_files("disk-report", description="Reports disk usage.")
    )
    install(
        client, auth, "log-reader", skill_files("log-reader", description="Reads service logs.")
    )
    result = call(client, auth, "list_skills", {"query": "disk usage"})["result"]
    assert [s["name"] for s in result["skills"]][0] == "disk-report"
    assert "log-reader" not in [s["name"] for s in result["skills"]]


def test_load_skill_returns_body_resources_and_scripts_with_schemas(client, auth):
    install(client, auth, "disk-report")
    result = call(client, auth, "load_skill", {"skill_name": "disk-report"})["result"]
    assert "Follow these steps." in result["content"]
    assert "---" not in result["content"].split("\n")[1]  # the front matter is stripped
    assert result["base_path"] == "../skill"  # from the run's working directory, every tier
    assert result["resources"] == ["references/guide.md", "scripts/hello.py"]
    [script] = result["scripts"]
    assert (script["path"], script["input"]) == ("scripts/hello.py", "arguments")
    # It declares no execution: the Spark runs it while one serves, else the node a call names.
    assert result["execution"] == "auto"
    assert script["schema"]["properties"]["node"]["type"] == "string"
    assert "required" not in script["schema"]
    assert "<available_scripts>" in result["content"]
    assert '<script path="scripts/hello.py" input="arguments">' in result["content"]


def test_load_skill_tells_a_script_that_reads_its_command_line_to_take_args(client, auth):
    files = skill_files("pdf-tools")
    files["scripts/fields.py"] = (
        b"import sys\nfrom pypdf import PdfReader\n"
        b"if len(sys.argv) != 3:\n    print('Usage: fields.py [input pdf] [output json]')\n"
    )
    install(client, auth, "pdf-tools", files)
    result = call(client, auth, "load_skill", {"skill_name": "pdf-tools"})["result"]
    inputs = {script["path"]: script["input"] for script in result["scripts"]}
    assert inputs["scripts/fields.py"] == "args"
    assert (
        '<script path="scripts/fields.py" input="args">reads its command line: send it as args'
        in result["content"]
    )


def test_a_repeat_load_in_the_same_chat_returns_a_short_note(client, auth):
    install(client, auth, "disk-report")
    first = call(client, auth, "load_skill", {"skill_name": "disk-report"}, chat_id="c1")
    assert "content" in first["result"]
    again = call(client, auth, "activate_skill", {"skill_name": "disk-report"}, chat_id="c1")
    assert again["result"]["already_loaded"] is True
    assert "content" not in again["result"]
    other_chat = call(client, auth, "load_skill", {"skill_name": "disk-report"}, chat_id="c2")
    assert "content" in other_chat["result"]


def test_a_repeat_load_in_the_same_turn_is_a_note_and_a_new_turn_gets_the_content_again(
    client, auth
):
    # An agent that keeps its own context may have dropped an earlier turn's results: only a
    # load the call's own turn already got is a repeat.
    install(client, auth, "disk-report")
    load = {"skill_name": "disk-report"}
    first = call(client, auth, "load_skill", load, chat_id="c1", turn_id="t1")["result"]
    assert first["content"].startswith('<skill_content name="disk-report">')
    again = call(client, auth, "load_skill", load, chat_id="c1", turn_id="t1")["result"]
    assert again["already_loaded"] is True and "content" not in again
    assert '<skill_content name="disk-report">' in again["note"]
    next_turn = call(client, auth, "activate_skill", load, chat_id="c1", turn_id="t2")["result"]
    assert next_turn["content"] == first["content"]
    assert call(client, auth, "load_skill", load, chat_id="c1", turn_id="t2")["result"][
        "already_loaded"
    ]
    # The same turn id in another chat is another context.
    other = call(client, auth, "load_skill", load, chat_id="c2", turn_id="t1")["result"]
    assert other["content"] == first["content"]
    # Without a turn id the chat is one context, as the client keeps it.
    assert call(client, auth, "load_skill", load, chat_id="c1")["result"]["already_loaded"]


def test_full_loads_gives_the_content_every_time_and_still_records_the_load(client, auth):
    # The MCP gateway's chat is its name for a client, whose host may hold many conversations.
    install(client, auth, "disk-report")
    load = {"skill_name": "disk-report"}
    answers = [
        call(client, auth, "load_skill", load, chat_id="mcp-host-1", full_loads=True)["result"]
        for _ in range(2)
    ]
    assert answers[0]["content"].startswith('<skill_content name="disk-report">')
    assert answers[1] == answers[0]
    # The load counts for the chat (its turns and web grants read it), so a caller that does
    # keep one context in it hears the note.
    assert call(client, auth, "load_skill", load, chat_id="mcp-host-1")["result"]["already_loaded"]


def test_full_loads_must_be_true_or_false(client, auth):
    body = {"arguments": {"skill_name": "skill-authoring"}, "full_loads": "yes please"}
    response = client.post("/api/tools/load_skill", headers=auth, json=body)
    assert response.status_code == 422
    assert response.json["code"] == "invalid_request"


@pytest.mark.both_databases  # concurrent writes
def test_forty_loads_of_one_skill_in_a_new_chat_at_once_all_answer(app, client, auth):
    install(client, auth, "disk-report")
    load = {"arguments": {"skill_name": "disk-report"}, "chat_id": "race", "turn_id": "t1"}

    def one(_: int) -> dict:
        response = app.test_client().post("/api/tools/load_skill", headers=auth, json=load)
        assert response.status_code == 200, response.json
        return dict(response.json)

    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(one, range(40)))  # the turn's 41st call is the check

    assert {answer["status"] for answer in answers} == {"done"}
    assert any("content" in answer["result"] for answer in answers)
    again = call(client, auth, "load_skill", load["arguments"], chat_id="race", turn_id="t1")
    assert again["result"]["already_loaded"] is True


def test_chats_of_two_owners_with_the_same_id_are_separate(client, auth, other_auth):
    shared = {"skill_name": "skill-authoring"}
    call(client, auth, "load_skill", shared, chat_id="same")
    theirs = call(client, other_auth, "load_skill", shared, chat_id="same")
    assert "content" in theirs["result"]


def test_read_skill_resource_returns_a_file_of_the_skill(client, auth):
    install(client, auth, "disk-report")
    result = call(
        client,
        auth,
        "read_skill_resource",
        {"skill_name": "disk-report", "path": "scripts/hello.py"},
    )["result"]
    assert result["path"] == "scripts/hello.py"
    text = skill_files("disk-report")["scripts/hello.py"].decode()
    assert result["content"] == (
        f'<skill_resource name="disk-report" path="scripts/hello.py">\n{text}\n</skill_resource>'
    )


@pytest.mark.parametrize(
    "path",
    [
        "../existing/SKILL.md",
        "references/../../x",
        "/etc/passwd",
        "%2e%2e/%2e%2e/etc/passwd",
        "..%2fSKILL.md",
        "%252e%252e%252fetc",
        "references/guide.md\x00.txt",
        "..\\..\\x",
        "",
    ],
)
def test_traversal_attempts_are_refused_as_invalid_resource_path(client, auth, path):
    install(client, auth, "disk-report")
    envelope = call(
        client, auth, "load_skill_resource", {"skill_name": "disk-report", "path": path}
    )
    assert envelope["status"] == "failed"
    assert envelope["error"]["code"] == "invalid_resource_path"


def test_a_missing_resource_is_resource_not_found(client, auth):
    install(client, auth, "disk-report")
    envelope = call(
        client, auth, "read_skill_resource", {"skill_name": "disk-report", "path": "nope.md"}
    )
    assert envelope["error"]["code"] == "resource_not_found"


def test_a_resource_over_256_kib_is_refused_with_a_size_error(client, auth):
    files = skill_files("big-docs")
    files["references/huge.md"] = b"x" * (256 * 1024 + 1)
    install(client, auth, "big-docs", files)
    envelope = call(
        client,
        auth,
        "read_skill_resource",
        {"skill_name": "big-docs", "path": "references/huge.md"},
    )
    assert envelope["status"] == "failed"
    assert envelope["error"]["code"] == "resource_too_large"
    assert "256 KiB" in envelope["error"]["message"]


def test_resources_of_disabled_skills_are_not_served(client, auth):
    install(client, auth, "quiet-one", enable="false")
    for tool, arguments in (
        ("load_skill", {"skill_name": "quiet-one"}),
        ("read_skill_resource", {"skill_name": "quiet-one", "path": "SKILL.md"}),
    ):
        envelope = call(client, auth, tool, arguments)
        assert envelope["status"] == "failed"
        assert envelope["error"]["code"] == "skill_disabled"


def test_refresh_skills_reports_added_and_removed_since_the_chat_last_looked(client, auth):
    install(client, auth, "disk-report")
    first = call(client, auth, "refresh_skills", {}, chat_id="c1")["result"]
    assert "disk-report" in first["added"]
    install(client, auth, "log-reader")
    client.put("/api/skills/disk-report/enabled", headers=auth, json={"enabled": False})
    second = call(client, auth, "refresh_skills", {}, chat_id="c1")["result"]
    assert second["added"] == ["log-reader"]
    assert second["removed"] == ["disk-report"]


def test_the_authoring_tools_are_listed_and_get_skill_reads_a_built_in(client, auth):
    listed = {d["function"]["name"] for d in client.get("/api/tools", headers=auth).json}
    assert {"get_skill", "draft_skill", "edit_skill", "list_chats"} <= listed
    envelope = call(client, auth, "get_skill", {"skill_name": "skill-authoring"})
    assert envelope["status"] == "done", envelope
    assert envelope["result"]["author"] == "builtin" and envelope["result"]["locked"] is True


def test_an_unknown_tool_is_404_unknown_tool(client, auth):
    response = client.post("/api/tools/rm_rf", headers=auth, json={"arguments": {}})
    assert response.status_code == 404
    assert response.json["code"] == "unknown_tool"


def test_arguments_that_are_not_an_object_are_refused(client, auth):
    response = client.post("/api/tools/list_skills", headers=auth, json={"arguments": [1, 2]})
    assert response.status_code == 400
    assert response.json["code"] == "invalid_call"


def test_an_unknown_mode_is_refused(client, auth):
    response = client.post("/api/tools/list_skills", headers=auth, json={"mode": "yolo"})
    assert response.status_code == 422
    assert response.json["code"] == "invalid_request"


def test_each_call_is_recorded_and_visible_to_its_owner_only(client, auth, other_auth):
    envelope = call(client, auth, "list_skills", {}, turn_id="t1")
    mine = client.get(f"/api/calls/{envelope['call_id']}", headers=auth)
    assert mine.status_code == 200
    assert mine.json["tool"] == "list_skills" and mine.json["status"] == "done"
    assert mine.json["turn_id"] == "t1"
    theirs = client.get(f"/api/calls/{envelope['call_id']}", headers=other_auth)
    assert theirs.status_code == 404

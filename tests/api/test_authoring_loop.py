"""The authoring loop as an agent and its owner drive it: a chat goes badly, the agent reviews it,
drafts a skill, the owner enables it by hash, and every later change is a diff the owner approves.
"""

from __future__ import annotations

import dataclasses
import io
import json
from typing import Any

from factories import skill_folder, skill_zip
from toolcalls import draft_arguments, tool

from api import create_app
from api.services import Services
from store.hashing import file_digest

CHECK = (
    "import json, os\n"
    "args = json.loads(os.environ['SKILLFLEET_ARGS'])\n"
    "os.system('curl -s https://status.example.com/' + args['host'])\n"
    "os.system('rm -rf /var/tmp/' + args['host'])\n"
)
SECRET = 'api_key = "AbCdEf0123456789xyz"\n'


def test_the_whole_loop_from_a_failed_call_to_an_applied_edit(client, auth, services):
    # 1. A chat goes badly: the agent calls a script of a skill that doesn't exist.
    failed = tool(client, auth, "run_skill_script", {"skill_name": "web-check", "script": "x"})
    assert failed["status"] == "failed" and failed["error"]["code"] == "skill_not_found"

    # 2. /create-skill: the agent finds the chat and reads what happened.
    chats = tool(client, auth, "list_chats", {"only_unreviewed": True}, chat="review")["result"]
    bad = next(c for c in chats["chats"] if c["chat_id"] == "c1")
    assert bad["failed"] == 1 and bad["issues"] == 1 and bad["reviewed"] is False
    transcript = tool(client, auth, "read_chat_transcript", {"chat_id": "c1"}, chat="review")
    calls = transcript["result"]["calls"]
    assert [(c["tool"], c["status"]) for c in calls] == [("run_skill_script", "failed")]
    assert calls[0]["error"]["code"] == "skill_not_found"

    # 3. It drafts a skill: saved disabled, authored by the assistant, with review warnings.
    arguments = draft_arguments(
        "web-check",
        files={"scripts/check.py": CHECK, "references/notes.md": SECRET},
        source_chats=["c1"],
    )
    drafted = tool(client, auth, "draft_skill", arguments, chat="review")
    assert drafted["status"] == "done", drafted
    draft = drafted["result"]
    assert draft["enabled"] is False and len(draft["hash"]) == 64
    warnings = " ".join(draft["lint_warnings"])
    assert "scripts/check.py reaches the network (curl" in warnings
    assert "runs a destructive command (rm -rf" in warnings
    assert "has no parameters_schema" in warnings
    assert "SKILL.md never mentions scripts/check.py" in warnings
    assert "references/notes.md line 1 holds text that looks like a secret" in warnings
    assert "AbCdEf0123456789xyz" not in warnings
    marked = tool(
        client, auth, "mark_chats_reviewed", {"chat_ids": ["c1"], "skill_name": "web-check"}
    )
    assert marked["status"] == "done" and marked["result"]["records"] == 1
    left = tool(client, auth, "list_chats", {"only_unreviewed": True})["result"]["chats"]
    assert "c1" not in [c["chat_id"] for c in left]

    # The owner sees it in the review queue, with the same warnings, and the agent in get_skill.
    queue = client.get("/api/review", headers=auth).json
    assert [d["name"] for d in queue["drafts"]] == ["web-check"]
    assert queue["needs_review"] == 1
    assert queue["drafts"][0]["source_chats"] == ["c1"]
    detail = client.get("/api/skills/web-check", headers=auth).json
    assert detail["lint_warnings"] == draft["lint_warnings"]
    assert detail["author"] == "assistant" and detail["enabled"] is False
    got = tool(client, auth, "get_skill", {"skill_name": "web-check"})["result"]
    assert got["hash"] == draft["hash"] and got["locked"] is False
    assert got["header"]["description"] == arguments["description"]
    check = next(f for f in got["files"] if f["path"] == "scripts/check.py")
    assert check == {
        "path": "scripts/check.py",
        "size": len(CHECK),
        "sha256": file_digest(CHECK.encode()),
    }
    listed = tool(client, auth, "list_skills", {"include_disabled": True})["result"]["skills"]
    entry = next(s for s in listed if s["name"] == "web-check")
    assert entry["source_chats"] == ["c1"] and entry["rationale"] == arguments["rationale"]
    assert entry["execution"] == "auto" and entry["tier"] == "change"
    plain = tool(client, auth, "list_skills", {})["result"]["skills"]
    assert "web-check" not in [s["name"] for s in plain]

    # 4. The owner enables it with the hash they reviewed; that locks it against drafts.
    enabled = client.put(
        "/api/skills/web-check/enabled",
        headers=auth,
        json={"enabled": True, "hash": draft["hash"]},
    )
    assert enabled.status_code == 200 and enabled.json["locked"] is True
    again = tool(client, auth, "draft_skill", arguments)
    assert again["status"] == "denied"
    assert "drafts-never-touch-reviewed-skills" in again["error"]["message"]

    # 5. Every later change is a diff the owner approves.
    edit = {
        "skill_name": "web-check",
        "changes": {"files": {"scripts/check.py": "print('ok')\n"}},
        "rationale": "Drop the shell calls.",
    }
    asked = tool(client, auth, "edit_skill", edit)
    assert asked["status"] == "pending_approval", asked
    card = client.get(f"/api/approvals/{asked['approval_id']}", headers=auth).json
    assert card["offers_chat_grant"] is False and card["skill_hash"] == draft["hash"]
    assert "-os.system('rm -rf /var/tmp/' + args['host'])\n" in card["diff"]
    assert "+print('ok')\n" in card["diff"]
    assert not any("reaches the network" in w for w in card["lint_warnings"])
    answered = client.post(
        f"/api/approvals/{asked['approval_id']}", headers=auth, json={"decision": "approve"}
    )
    assert answered.status_code == 200 and answered.json["status"] == "approved"
    done = client.get(f"/api/calls/{asked['call_id']}", headers=auth).json
    assert done["status"] == "done", done
    assert done["result"]["previous_hash"] == draft["hash"]
    now = client.get("/api/skills/web-check", headers=auth).json
    assert now["hash"] == done["result"]["hash"] != draft["hash"]
    assert now["enabled"] is True
    script = client.get("/api/skills/web-check/files/scripts/check.py", headers=auth)
    assert script.data == b"print('ok')\n"
    assert client.get("/api/review", headers=auth).json["needs_review"] == 0


def test_enabling_a_draft_needs_the_full_current_hash(client, auth):
    drafted = tool(client, auth, "draft_skill", draft_arguments("notes-helper"))["result"]
    url = "/api/skills/notes-helper/enabled"
    without = client.put(url, headers=auth, json={"enabled": True})
    assert without.status_code == 422 and without.json["code"] == "hash_required"
    short = client.put(url, headers=auth, json={"enabled": True, "hash": drafted["hash"][:8]})
    assert short.status_code == 409 and short.json["code"] == "skill_changed"
    assert client.get("/api/skills/notes-helper", headers=auth).json["enabled"] is False
    full = client.put(url, headers=auth, json={"enabled": True, "hash": drafted["hash"]})
    assert full.status_code == 200 and full.json["enabled"] is True


def test_the_assistant_replaces_its_own_draft_until_the_owner_edits_it(client, auth):
    first = tool(client, auth, "draft_skill", draft_arguments("notes-helper"))["result"]
    second_arguments = draft_arguments("notes-helper", body="Use scripts/none. Second take.")
    second = tool(client, auth, "draft_skill", second_arguments)["result"]
    assert second["replaced"] is True and second["hash"] != first["hash"]
    owner_edit = client.put(
        "/api/skills/notes-helper/files/references/extra.md",
        headers=auth,
        json={"content": "# Extra\n"},
    )
    assert owner_edit.status_code == 200 and owner_edit.json["locked"] is True
    third = tool(client, auth, "draft_skill", draft_arguments("notes-helper"))
    assert third["status"] == "denied"
    assert "drafts-never-touch-reviewed-skills" in third["error"]["message"]
    files = [f["path"] for f in client.get("/api/skills/notes-helper", headers=auth).json["files"]]
    assert files == ["SKILL.md", "references/extra.md"]


def upload(client, auth, name: str) -> dict[str, Any]:
    body = {"file": (io.BytesIO(skill_zip(name)), f"{name}.zip")}
    response = client.post(
        "/api/skills", headers=auth, data=body, content_type="multipart/form-data"
    )
    assert response.status_code == 201, response.json
    return dict(response.json)


def test_a_draft_may_not_take_the_name_of_an_imported_or_built_in_skill(client, auth, services):
    imported = upload(client, auth, "ledger")
    folder = skill_folder(services, "ledger")
    before = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*.*")}
    for name in ("skill-authoring", "ledger"):
        denied = tool(client, auth, "draft_skill", draft_arguments(name))
        assert denied["status"] == "denied", name
        assert "drafts-never-touch-reviewed-skills" in denied["error"]["message"]
    ledger = client.get("/api/skills/ledger", headers=auth).json
    assert ledger["hash"] == imported["hash"] and ledger["enabled"] is True
    assert ledger["author"] != "assistant" and ledger["source_chats"] is None
    assert {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*.*")} == before
    assert client.get("/api/review", headers=auth).json["drafts"] == []


ALLOW_EVERY_DRAFT = "default_action: allow\nrules: []\n"


def test_under_a_policy_that_allows_every_draft_the_store_still_refuses_one_over_a_reviewed_skill(
    settings, tmp_path, auth, services
):
    policy = tmp_path / "policy.yaml"
    policy.write_text(ALLOW_EVERY_DRAFT)
    lenient = Services.build(dataclasses.replace(settings, policy_file=policy))
    try:
        client = create_app(services=lenient).test_client()
        imported = upload(client, auth, "ledger")
        for name, code in (("ledger", "skill_locked"), ("skill-authoring", "skill_builtin")):
            refused = tool(client, auth, "draft_skill", draft_arguments(name))
            assert refused["status"] == "failed", (name, refused)
            assert refused["error"]["code"] == code, name
            assert refused["error"]["message"].startswith("HOST: "), name
        ledger = client.get("/api/skills/ledger", headers=auth).json
        assert ledger["hash"] == imported["hash"] and ledger["enabled"] is True
        assert client.get("/api/review", headers=auth).json["drafts"] == []
    finally:
        lenient.engine.dispose()


def test_an_invalid_draft_is_refused_with_every_problem_and_nothing_is_saved(client, auth):
    arguments = draft_arguments(
        "broken-one",
        files={"scripts/bad.py": "def (:\n"},
        metadata={"skillfleet.tier": "sometimes"},
    )
    refused = tool(client, auth, "draft_skill", arguments)
    assert refused["status"] == "failed"
    assert refused["error"]["code"] == "skill_invalid"
    message = refused["error"]["message"]
    assert message.startswith("HOST: the draft was refused:")
    assert "scripts/bad.py" in message and "sometimes" in message
    assert client.get("/api/skills/broken-one", headers=auth).status_code == 404
    unsafe = tool(client, auth, "draft_skill", draft_arguments("broken-one", files={"../x": "y"}))
    assert unsafe["status"] == "failed" and unsafe["error"]["code"] == "archive_unsafe"
    clash = draft_arguments("broken-one", files={"a.md": "x", "A.md": "y"})
    collided = tool(client, auth, "draft_skill", clash)
    assert collided["error"]["code"] == "archive_unsafe"
    raw = json.dumps({"arguments": draft_arguments("broken-one", files={"a.md": "x"})})
    lone = raw.replace('"a.md": "x"', '"a.md": "\\ud800"')
    surrogate = client.post(
        "/api/tools/draft_skill", headers=auth, data=lone, content_type="application/json"
    ).json
    assert surrogate["error"]["code"] == "skill_invalid"
    assert "a.md is not valid UTF-8 text" in surrogate["error"]["message"]
    assert client.get("/api/skills/broken-one", headers=auth).status_code == 404


def test_draft_caps_hold_at_exactly_the_limit_and_refuse_one_over(client, auth):
    for i in range(11):
        tool(client, auth, "list_skills", {}, chat=f"chat-{i}")
    chats = [f"chat-{i}" for i in range(11)]
    files = {f"references/r{i:02d}.md": f"# R{i}\n" for i in range(41)}
    at_limit = draft_arguments(
        "capped",
        files=dict(list(files.items())[:40]),
        source_chats=chats[:10],
        rationale="r" * 1000,
    )
    saved = tool(client, auth, "draft_skill", at_limit)
    assert saved["status"] == "done", saved
    detail = client.get("/api/skills/capped", headers=auth).json
    assert detail["file_count"] == 41  # 40 files and SKILL.md
    assert detail["source_chats"] == chats[:10] and len(detail["rationale"]) == 1000
    for field, value, code in (
        ("files", files, "skill_too_large"),
        ("source_chats", chats, "invalid_call"),
        ("rationale", "r" * 1001, "invalid_call"),
    ):
        over = tool(client, auth, "draft_skill", {**at_limit, field: value})
        assert over["status"] == "failed", field
        assert over["error"]["code"] == code and over["error"]["message"].startswith("HOST: ")
    assert client.get("/api/skills/capped", headers=auth).json["hash"] == detail["hash"]
    ghost = tool(client, auth, "draft_skill", {**at_limit, "source_chats": ["ghost"]})
    assert ghost["error"]["code"] == "chat_not_found"


# -- parameters_schema sent as JSON text (the seed takes an object or its text) ---------------

TEXT_SCHEMA = {"type": "object", "properties": {"host": {"type": "string"}}, "required": ["host"]}


def test_a_draft_takes_parameters_schema_as_json_text_and_saves_the_object(client, auth):
    arguments = draft_arguments("text-schema", parameters_schema=json.dumps(TEXT_SCHEMA))
    drafted = tool(client, auth, "draft_skill", arguments)
    assert drafted["status"] == "done", drafted
    got = tool(client, auth, "get_skill", {"skill_name": "text-schema"})["result"]
    assert got["parameters_schema"] == TEXT_SCHEMA
    assert got["header"]["metadata"]["parameters_schema"] == TEXT_SCHEMA  # a mapping, not text


def test_a_draft_with_malformed_schema_text_is_refused_with_the_place_and_nothing_is_saved(
    client, auth
):
    arguments = draft_arguments("bad-text", parameters_schema='{"type": "object",}')
    refused = tool(client, auth, "draft_skill", arguments)
    assert refused["status"] == "failed"
    assert refused["error"] == {
        "code": "skill_invalid",
        "message": "HOST: the draft was refused: The parameters_schema is not valid JSON: "
        "Expecting property name enclosed in double quotes (line 1, column 19).",
    }
    assert client.get("/api/skills/bad-text", headers=auth).status_code == 404


def test_a_draft_with_schema_text_that_is_not_an_object_is_refused(client, auth):
    refused = tool(client, auth, "draft_skill", draft_arguments("listy", parameters_schema="[1]"))
    assert refused["error"]["code"] == "skill_invalid"
    assert (
        "must be a JSON Schema object or a map from script path to schema, not a list"
        in (refused["error"]["message"])
    )
    number = tool(client, auth, "draft_skill", draft_arguments("numbery", parameters_schema=7))
    assert number["error"] == {
        "code": "invalid_call",
        "message": "HOST: parameters_schema must be a JSON Schema object or its JSON text.",
    }


def owned_skill(client, auth, name: str) -> None:
    response = client.post(
        "/api/skills",
        headers=auth,
        data={"file": (io.BytesIO(skill_zip(name)), "s.zip")},
        content_type="multipart/form-data",
    )
    assert response.status_code == 201, response.json


def test_an_edit_takes_parameters_schema_as_json_text_and_the_diff_shows_the_object(client, auth):
    owned_skill(client, auth, "edited")
    changes = {"parameters_schema": json.dumps(TEXT_SCHEMA)}
    edit = {"skill_name": "edited", "changes": changes, "rationale": "Check the host first."}
    asked = tool(client, auth, "edit_skill", edit)
    assert asked["status"] == "pending_approval", asked
    card = client.get(f"/api/approvals/{asked['approval_id']}", headers=auth).json
    assert "+  parameters_schema:\n" in card["diff"] and "+    - host\n" in card["diff"]
    answered = client.post(
        f"/api/approvals/{asked['approval_id']}", headers=auth, json={"decision": "approve"}
    )
    assert answered.status_code == 200, answered.json
    got = tool(client, auth, "get_skill", {"skill_name": "edited"})["result"]
    assert got["parameters_schema"] == TEXT_SCHEMA


def test_an_edit_with_malformed_schema_text_fails_before_the_owner_is_asked(client, auth):
    owned_skill(client, auth, "kept")
    before = tool(client, auth, "get_skill", {"skill_name": "kept"})["result"]["hash"]
    changes = {"parameters_schema": "{type: object}"}
    edit = {"skill_name": "kept", "changes": changes, "rationale": "Check the host first."}
    refused = tool(client, auth, "edit_skill", edit)
    assert refused["status"] == "failed"
    assert refused["error"] == {
        "code": "skill_invalid",
        "message": "HOST: the edited skill would be refused: The parameters_schema is not "
        "valid JSON: Expecting property name enclosed in double quotes (line 1, column 2).",
    }
    assert client.get("/api/approvals", headers=auth).json == []
    assert tool(client, auth, "get_skill", {"skill_name": "kept"})["result"]["hash"] == before

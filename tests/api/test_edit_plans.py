"""edit_skill: arguments read once, exactly; the plan the owner approves is what gets written."""

from __future__ import annotations

import io
import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from factories import skill_files, zip_bytes
from sqlalchemy import select, update
from toolcalls import tool

from store.db import transaction
from store.limits import MAX_EDIT_PLANS, MAX_EDITABLE_BYTES
from store.models import Approval, EditPlan, utcnow

GUIDE = "references/guide.md"


@pytest.fixture
def report(client, auth) -> dict:
    """An owner's skill, imported and enabled."""
    files = skill_files("disk-report")
    response = client.post(
        "/api/skills",
        headers=auth,
        data={"file": (io.BytesIO(zip_bytes(files, top="disk-report")), "s.zip")},
        content_type="multipart/form-data",
    )
    assert response.status_code == 201, response.json
    return response.json


def edit(files=None, rationale="Clearer steps.", **changes) -> dict:
    if files is not None:
        changes["files"] = files
    return {"skill_name": "disk-report", "changes": changes, "rationale": rationale}


def answer(client, auth, approval_id: str, decision: str = "approve"):
    return client.post(f"/api/approvals/{approval_id}", headers=auth, json={"decision": decision})


def guide(client, auth) -> bytes:
    return client.get(f"/api/skills/disk-report/files/{GUIDE}", headers=auth).data


def no_approvals(client, auth) -> bool:
    return client.get("/api/approvals", headers=auth).json == []


def test_an_edit_whose_skill_changed_before_the_answer_is_409_and_nothing_is_applied(
    client, auth, report
):
    asked = tool(client, auth, "edit_skill", edit({GUIDE: "# Guide\n\nAssistant's take.\n"}))
    assert asked["status"] == "pending_approval"
    owner = client.put(
        f"/api/skills/disk-report/files/{GUIDE}", headers=auth, json={"content": "# Mine\n"}
    )
    assert owner.status_code == 200
    changed_hash = owner.json["hash"]
    late = answer(client, auth, asked["approval_id"])
    assert late.status_code == 409 and late.json["code"] == "skill_changed"
    assert "Nothing was written" in late.json["message"]
    assert guide(client, auth) == b"# Mine\n"
    assert client.get("/api/skills/disk-report", headers=auth).json["hash"] == changed_hash
    call = client.get(f"/api/calls/{asked['call_id']}", headers=auth).json
    assert call["status"] == "failed" and call["error_code"] == "skill_changed"
    card = client.get(f"/api/approvals/{asked['approval_id']}", headers=auth).json
    assert card["status"] == "stale"
    assert client.get("/api/review", headers=auth).json["edits"] == []


def test_an_approved_edit_is_one_install_with_a_new_hash_and_the_old_grants_void(
    client, auth, report
):
    asked = tool(client, auth, "edit_skill", edit(body="Use scripts/hello.py to say hello."))
    card = client.get(f"/api/approvals/{asked['approval_id']}", headers=auth).json
    assert "+Use scripts/hello.py to say hello.\n" in card["diff"]
    assert card["diff"].startswith("--- a/SKILL.md\n+++ b/SKILL.md\n")
    assert card["expires_at"] > card["created_at"]
    chat_grant = answer(client, auth, asked["approval_id"], "approve_for_chat")
    assert chat_grant.status_code == 400 and chat_grant.json["code"] == "grant_not_offered"
    assert answer(client, auth, asked["approval_id"]).status_code == 200
    skill = client.get("/api/skills/disk-report", headers=auth).json
    assert skill["hash"] != report["hash"] and skill["enabled"] is True
    skill_md = client.get("/api/skills/disk-report/files/SKILL.md", headers=auth).data.decode()
    assert skill_md.startswith("---\nname: disk-report\ndescription: Does disk-report.\n---\n")
    assert skill_md.endswith("\n\nUse scripts/hello.py to say hello.\n")


def test_description_and_schema_changes_rewrite_the_header(client, auth, report):
    schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    asked = tool(
        client,
        auth,
        "edit_skill",
        edit(description="Reports disk usage of one server.", parameters_schema=schema),
    )
    assert answer(client, auth, asked["approval_id"]).status_code == 200
    got = tool(client, auth, "get_skill", {"skill_name": "disk-report"})["result"]
    assert got["header"]["description"] == "Reports disk usage of one server."
    assert got["parameters_schema"] == schema
    assert not any("no parameters_schema" in w for w in got["lint_warnings"])


def test_a_denied_edit_changes_nothing(client, auth, report):
    asked = tool(client, auth, "edit_skill", edit({GUIDE: None}))
    assert (
        "+++ /dev/null"
        in client.get(f"/api/approvals/{asked['approval_id']}", headers=auth).json["diff"]
    )
    assert answer(client, auth, asked["approval_id"], "deny").status_code == 200
    assert guide(client, auth) == b"# Guide\n\nRead me.\n"
    call = client.get(f"/api/calls/{asked['call_id']}", headers=auth).json
    assert call["status"] == "denied"


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"skill_name": "disk-report", "changes": {"body": "x"}}, "'rationale'"),
        ({**edit(body="x"), "force": True}, "'force'"),
        (edit(body="x", title="T"), "'changes.title'"),
        (edit(body=7), "'changes.body' must be a string, not a number"),
        (edit({GUIDE: 3}), "changes.files['references/guide.md']' must be a string or null"),
        (
            edit(parameters_schema=7),
            "'changes.parameters_schema' must be an object, its JSON text or null",
        ),
        (edit(rationale=["why"], body="x"), "'rationale' must be a non-empty string"),
        (edit(rationale="r" * 1001, body="x"), "'rationale' is 1001 characters"),
        ({"skill_name": "disk-report", "changes": [], "rationale": "r"}, "'changes' must be"),
    ],
)
def test_edit_arguments_are_read_exactly_and_a_wrong_field_is_named(
    client, auth, report, arguments, field
):
    refused = tool(client, auth, "edit_skill", arguments)
    assert refused["status"] == "failed", refused
    assert refused["error"]["message"].startswith("HOST: ")
    assert field in refused["error"]["message"]
    assert no_approvals(client, auth)


def test_a_field_given_twice_in_the_body_is_refused_by_name(client, auth, report):
    raw = (
        '{"chat_id": "c1", "arguments": {"skill_name": "disk-report", "rationale": "r", '
        '"changes": {"body": "one", "body": "two"}}}'
    )
    response = client.post(
        "/api/tools/edit_skill", headers=auth, data=raw, content_type="application/json"
    )
    assert response.status_code == 200
    assert response.json["status"] == "failed"
    assert response.json["error"]["message"] == (
        "HOST: edit_skill's field 'changes.body' is given more than once; send each field once."
    )
    assert no_approvals(client, auth)
    once = json.loads(raw.replace('"body": "one", ', ""))
    ok = client.post("/api/tools/edit_skill", headers=auth, json=once).json
    assert ok["status"] == "pending_approval"


def test_an_edit_that_would_break_the_skill_fails_before_the_owner_is_asked(client, auth, report):
    broken = tool(client, auth, "edit_skill", edit({"scripts/bad.py": "def (:\n"}))
    assert broken["status"] == "failed" and broken["error"]["code"] == "skill_invalid"
    assert broken["error"]["message"].startswith("HOST: the edited skill would be refused:")
    builtin = tool(
        client,
        auth,
        "edit_skill",
        {"skill_name": "skill-authoring", "changes": {"body": "x"}, "rationale": "r"},
    )
    assert builtin["error"]["code"] == "skill_builtin"
    same = tool(client, auth, "edit_skill", edit({GUIDE: "# Guide\n\nRead me.\n"}))
    assert same["error"]["code"] == "invalid_call"
    assert no_approvals(client, auth)


def test_edit_skill_is_refused_in_plan_mode_and_in_jobs(client, auth, report):
    body = {"arguments": edit(body="x"), "chat_id": "c1", "mode": "plan"}
    plan = client.post("/api/tools/edit_skill", headers=auth, json=body).json
    assert plan["status"] == "denied" and "skill-edit-plan-mode" in plan["error"]["message"]
    job = {"name": "edits", "cron": "0 3 * * *", "steps": [{"tool": "list_skills"}], "skills": "*"}
    job_id = client.post("/api/jobs", headers=auth, json=job).json["id"]
    run_id = client.post(f"/api/jobs/{job_id}/run", headers=auth).json["job_run_id"]
    body = {"arguments": edit(body="x"), "job_run_id": run_id}
    job = client.post("/api/tools/edit_skill", headers=auth, json=body).json
    assert job["status"] == "denied" and "skill-edit-chats-only" in job["error"]["message"]


# One line added to a new file: header, then "+" and the text and a newline.
NEW_FILE_HEADER = "--- /dev/null\n+++ b/references/long.md\n@@ -0,0 +1 @@\n"


def test_a_file_diff_of_exactly_32_kib_is_held_and_one_byte_more_is_413(client, auth, report):
    room = 32 * 1024 - len(NEW_FILE_HEADER) - 2
    at_limit = tool(client, auth, "edit_skill", edit({"references/long.md": "a" * room + "\n"}))
    assert at_limit["status"] == "pending_approval", at_limit
    card = client.get(f"/api/approvals/{at_limit['approval_id']}", headers=auth).json
    assert len(card["diff"].encode()) == 32 * 1024
    over = tool(client, auth, "edit_skill", edit({"references/long.md": "a" * (room + 1) + "\n"}))
    assert over["status"] == "failed" and over["error"]["code"] == "diff_too_large"
    assert "references/long.md" in over["error"]["message"]


def full_file_diff(path: str) -> str:
    """Text for a new file whose diff is exactly 32 KiB."""
    header = f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n"
    return "b" * (32 * 1024 - len(header) - 2) + "\n"


def test_a_whole_diff_of_exactly_192_kib_is_held_and_more_is_413(client, auth, report):
    files = {f"references/part{i}.md": full_file_diff(f"references/part{i}.md") for i in range(6)}
    at_limit = tool(client, auth, "edit_skill", edit(files))
    assert at_limit["status"] == "pending_approval", at_limit
    card = client.get(f"/api/approvals/{at_limit['approval_id']}", headers=auth).json
    assert len(card["diff"].encode()) == 192 * 1024
    files["references/z.md"] = "z\n"
    over = tool(client, auth, "edit_skill", edit(files))
    assert over["status"] == "failed" and over["error"]["code"] == "diff_too_large"
    assert "192 KiB" in over["error"]["message"]


def test_an_expired_plan_answers_410_and_changes_nothing(client, auth, services, report):
    asked = tool(client, auth, "edit_skill", edit({GUIDE: "# New\n"}))
    card = client.get(f"/api/approvals/{asked['approval_id']}", headers=auth).json
    made = card["created_at"].replace("Z", "+00:00")
    expires = card["expires_at"].replace("Z", "+00:00")
    assert datetime.fromisoformat(expires) - datetime.fromisoformat(made) == timedelta(hours=2)
    with transaction(services.sessions) as session:
        past = utcnow() - timedelta(seconds=1)
        session.execute(update(Approval).values(expires_at=past))
        session.execute(update(EditPlan).values(expires_at=past))
    late = answer(client, auth, asked["approval_id"])
    assert late.status_code == 410 and late.json["code"] == "edit_plan_expired"
    assert guide(client, auth) == b"# Guide\n\nRead me.\n"
    assert client.get("/api/review", headers=auth).json["edits"] == []


@pytest.mark.both_databases
def test_at_most_200_plans_are_held_and_the_oldest_pending_one_expires_first(
    client, auth, services, report
):
    asked = [
        tool(client, auth, "edit_skill", edit({GUIDE: f"# Take {i}\n"}), chat=f"c{i}")
        for i in range(MAX_EDIT_PLANS)
    ]
    assert all(a["status"] == "pending_approval" for a in asked)
    queue = client.get("/api/review", headers=auth).json
    assert len(queue["edits"]) == MAX_EDIT_PLANS
    one_more = tool(client, auth, "edit_skill", edit({GUIDE: "# One more\n"}), chat="c-last")
    assert one_more["status"] == "pending_approval"
    with services.sessions() as session:
        statuses = dict(session.execute(select(EditPlan.call_id, EditPlan.status)).all())
    assert statuses[asked[0]["call_id"]] == "expired"
    assert statuses[asked[1]["call_id"]] == "pending"
    assert list(statuses.values()).count("pending") == MAX_EDIT_PLANS
    oldest = answer(client, auth, asked[0]["approval_id"])
    assert oldest.status_code == 410 and oldest.json["code"] == "edit_plan_expired"
    call = client.get(f"/api/calls/{asked[0]['call_id']}", headers=auth).json
    assert call["status"] == "expired"
    assert answer(client, auth, one_more["approval_id"]).status_code == 200
    assert guide(client, auth) == b"# One more\n"


def test_owners_edit_files_up_to_256_kib_and_delete_them(client, auth, report):
    url = "/api/skills/disk-report/files/references/big.md"
    at_limit = client.put(url, headers=auth, json={"content": "x" * MAX_EDITABLE_BYTES})
    assert at_limit.status_code == 200, at_limit.json
    assert at_limit.json["hash"] != report["hash"]
    assert {"path": "references/big.md", "size": MAX_EDITABLE_BYTES} in at_limit.json["files"]
    over = client.put(url, headers=auth, json={"content": "x" * (MAX_EDITABLE_BYTES + 1)})
    assert over.status_code == 413 and over.json["code"] == "file_too_large"
    stale = client.put(url, headers=auth, json={"content": "y", "hash": report["hash"]})
    assert stale.status_code == 409 and stale.json["code"] == "skill_changed"
    deleted = client.delete(url, headers=auth)
    assert deleted.status_code == 200
    assert deleted.json["hash"] == report["hash"]  # the content is the original again
    gone = client.delete(url, headers=auth)
    assert gone.status_code == 404 and gone.json["code"] == "resource_not_found"
    escape = client.put("/api/skills/disk-report/files/..%2Fx", headers=auth, json={"content": "x"})
    assert escape.status_code in (404, 422)
    broken = client.delete("/api/skills/disk-report/files/SKILL.md", headers=auth)
    assert broken.status_code == 422 and broken.json["code"] == "skill_invalid"
    assert client.get("/api/skills/disk-report", headers=auth).json["hash"] == report["hash"]


PUBLIC = Path(__file__).parent.parent / "fixtures" / "public-skills"


def import_public(client, auth, folder: str) -> dict:
    """A public skill that imports only with warnings (see test_lenient_import.py)."""
    root = PUBLIC / folder
    files = {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    data = {"file": (io.BytesIO(zip_bytes(files, top=folder)), "s.zip")}
    response = client.post("/api/skills", headers=auth, data=data)
    assert response.status_code == 201 and response.json["warnings"], response.json
    return response.json


@pytest.mark.parametrize(
    ("folder", "changes"),
    [
        # Claude Code's header keys and an allowed-tools list: the edit leaves the header alone.
        ("commit-helper", {"files": {"references/extra.md": "# Extra\n\nMore steps.\n"}}),
        # No front matter at all: a new body keeps the description the import derived.
        ("meeting-notes", {"body": "# Meeting Notes\n\nList decisions, owners and dates.\n"}),
    ],
)
def test_a_skill_imported_with_warnings_can_be_edited(client, auth, folder, changes):
    name = import_public(client, auth, folder)["name"]
    imported = client.get(f"/api/skills/{name}", headers=auth).json
    arguments = {"skill_name": name, "changes": changes, "rationale": "Clearer steps."}
    asked = tool(client, auth, "edit_skill", arguments)
    assert asked["status"] == "pending_approval", asked
    assert answer(client, auth, asked["approval_id"]).status_code == 200
    detail = client.get(f"/api/skills/{name}", headers=auth).json
    assert detail["hash"] != imported["hash"]
    assert detail["description"] == imported["description"]
    if "files" in changes:
        extra = client.get(f"/api/skills/{name}/files/references/extra.md", headers=auth)
        assert extra.data == b"# Extra\n\nMore steps.\n"
    else:
        skill_md = client.get(f"/api/skills/{name}/files/SKILL.md", headers=auth).data.decode()
        assert "List decisions, owners and dates." in skill_md

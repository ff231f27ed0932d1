"""`GET /api/audit`: the owner's records by keyset pages and filters, the JSON Lines export of
all of them, and the events that write them, each with its facts and never an argument."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from factories import finished_run, skill_files, zip_bytes
from flask.testing import FlaskClient
from sqlalchemy import select
from sshkeys import fingerprint, make_key, public_line

from api.services import Services
from broker.runs import Outcome, claim, finish
from store import audit, auditchain
from store.audit import AuditKind
from store.db import transaction
from store.models import Owner

SECRET_ARGUMENT = "s3cr3t-argument-value"


def records(client: FlaskClient, auth: dict[str, str], **params: Any) -> list[dict[str, Any]]:
    """Every record the export gives, oldest first."""
    response = client.get("/api/audit", headers=auth, query_string={"format": "jsonl", **params})
    assert response.status_code == 200, response.data
    assert response.mimetype == "application/jsonl"
    return [json.loads(line) for line in response.data.decode().splitlines()]


def of_kind(found: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [record for record in found if record["kind"] == kind]


def alice_id(services: Services) -> int:
    with services.sessions() as session:
        found = session.scalar(select(Owner.id).where(Owner.name == "alice"))
    assert found is not None
    return found


def fill(services: Services, owner_id: int, count: int, kind: AuditKind = AuditKind.RUN_ENDED):
    with transaction(services.sessions) as session:
        for number in range(count):
            audit.append(session, owner_id, kind, "worker", f"run-{number}", {"n": number})


def import_skill(client: FlaskClient, auth: dict[str, str], name: str, body: str = "") -> dict:
    files = skill_files(name, metadata={"skillfleet.tier": "read"})
    files["scripts/go.py"] = f"print('go{body}')\n".encode()
    response = client.post(
        "/api/skills?replace=true",
        headers=auth,
        data={"file": (io.BytesIO(zip_bytes(files, top=name)), "s.zip")},
        content_type="multipart/form-data",
    )
    assert response.status_code == 201, response.json
    return dict(response.json)


# -- reading ------------------------------------------------------------------------------


def test_pages_are_newest_first_and_follow_the_link(client, auth, services):
    fill(services, alice_id(services), 5)
    first = client.get("/api/audit", headers=auth, query_string={"page_size": 2})
    assert first.status_code == 200
    assert [r["seq"] for r in first.json] == [5, 4]
    assert first.headers["X-Total-Count"] == "5"
    following = first.headers["Link"].split(";")[0].strip("<>")
    second = client.get(following, headers=auth)
    assert [r["seq"] for r in second.json] == [3, 2]


def test_filters_by_kind_subject_and_time(client, auth, services):
    owner_id = alice_id(services)
    fill(services, owner_id, 3)
    fill(services, owner_id, 2, AuditKind.TOKEN_CHANGED)
    kinds = client.get("/api/audit", headers=auth, query_string={"kind": "token.changed"})
    assert {r["kind"] for r in kinds.json} == {"token.changed"} and len(kinds.json) == 2
    subject = client.get("/api/audit", headers=auth, query_string={"subject": "run-1"})
    assert [(r["seq"], r["kind"]) for r in subject.json] == [(5, "token.changed"), (2, "run.ended")]
    later = client.get("/api/audit", headers=auth, query_string={"since": "2999-01-01T00:00:00Z"})
    assert later.json == []
    earlier = client.get("/api/audit", headers=auth, query_string={"until": "2000-01-01"})
    assert earlier.json == []


def test_the_export_gives_every_record_over_many_batches_and_verifies(client, auth, services):
    owner_id = alice_id(services)
    with transaction(services.sessions) as session:
        for number in range(2600):  # more than two export batches
            audit.append(session, owner_id, AuditKind.RUN_ENDED, "worker", f"r{number}")
    found = records(client, auth)
    assert [r["seq"] for r in found] == list(range(1, 2601))
    assert auditchain.verify(found).broken is None


def test_a_cursor_of_other_filters_is_refused(client, auth, services):
    fill(services, alice_id(services), 3)
    first = client.get("/api/audit", headers=auth, query_string={"page_size": 1})
    cursor = first.headers["Link"].split("cursor=")[1].split(">")[0]
    other = client.get(
        "/api/audit", headers=auth, query_string={"page_size": 1, "kind": "run.ended"}
    )
    assert other.status_code == 200
    refused = client.get(f"/api/audit?kind=run.ended&page_size=1&cursor={cursor}", headers=auth)
    assert refused.status_code == 400 and refused.json["code"] == "invalid_cursor"


def test_without_a_token_it_is_refused(client):
    assert client.get("/api/audit").status_code == 401


def test_an_agent_token_is_refused(client, agent_auth):
    response = client.get("/api/audit", headers=agent_auth, query_string={"format": "jsonl"})
    assert response.status_code == 403 and response.json["code"] == "owner_only"


def test_another_owner_sees_only_their_own_records(client, auth, other_auth, services):
    fill(services, alice_id(services), 3)
    assert client.get("/api/audit", headers=other_auth).json == []
    assert records(client, other_auth) == []


@pytest.mark.parametrize(
    "params",
    [
        {"kind": "policy.nonsense"},
        {"kind": "../etc"},
        {"subject": "x" * 301},
        {"subject": ""},
        {"since": "yesterday"},
        {"format": "csv"},
        {"page_size": 0},
        {"cursor": "not-a-cursor"},
    ],
)
def test_bad_filters_are_refused_with_their_code(client, auth, params):
    response = client.get("/api/audit", headers=auth, query_string=params)
    assert response.status_code in (400, 422), response.json
    assert response.json["code"] in ("invalid_cursor", "validation_failed", "invalid_request")


def test_odd_subjects_are_filters_that_match_nothing(client, auth):
    for subject in ("../x", "a/b", "é" * 300, "'; DROP TABLE audit_records; --"):
        response = client.get("/api/audit", headers=auth, query_string={"subject": subject})
        assert response.status_code == 200, response.json
        assert response.json == []


def test_a_subject_with_a_nul_or_a_line_break_is_refused(client, auth):
    for subject in ("nul\x00here", "two\nlines"):
        response = client.get("/api/audit", headers=auth, query_string={"subject": subject})
        assert response.status_code == 422, response.json


# -- what writes records -----------------------------------------------------------------


def test_a_tool_call_records_the_policy_decision_without_its_arguments(client, auth):
    body = {"arguments": {"query": SECRET_ARGUMENT}, "chat_id": "c1"}
    called = client.post("/api/tools/list_skills", headers=auth, json=body)
    assert called.json["status"] == "done"
    [decision] = of_kind(records(client, auth), "policy.decision")
    assert decision["subject"] == called.json["call_id"]
    assert decision["actor"] == "policy"
    facts = decision["facts"]
    assert (facts["tool"], facts["tier"], facts["outcome"]) == ("list_skills", "read", "allow")
    assert facts["rule"]
    assert SECRET_ARGUMENT not in json.dumps(records(client, auth))


def test_a_refused_call_records_a_deny(client, auth):
    body = {"arguments": {}, "chat_id": "c1", "mode": "plan"}
    called = client.post("/api/tools/run_command", headers=auth, json=body)
    found = of_kind(records(client, auth), "policy.decision")
    if called.json["status"] == "failed":  # refused before the policy: nothing was decided
        assert found == []
        return
    assert [d["facts"]["outcome"] for d in found] == ["deny"]


def test_a_call_that_can_only_fail_decides_nothing(client, auth):
    body = {"arguments": {"skill_name": "no-such-skill"}, "chat_id": "c1"}
    called = client.post("/api/tools/load_skill", headers=auth, json=body)
    assert called.json["status"] == "failed"
    assert of_kind(records(client, auth), "policy.decision") == []


def test_an_approval_records_the_ask_and_the_answer_with_who(client, auth, token, wiper, services):
    body = {
        "arguments": {"skill_name": "wiper", "script": "scripts/wipe.sh",
                      "arguments": {"node": "web01", "target": SECRET_ARGUMENT}},
        "chat_id": "c1",
    }  # fmt: skip
    called = client.post("/api/tools/run_skill_script", headers=auth, json=body)
    assert called.json["status"] == "pending_approval", called.json
    approval_id = called.json["approval_id"]
    answered = client.post(f"/api/approvals/{approval_id}", headers=auth, json={"decision": "deny"})
    assert answered.status_code == 200, answered.json
    found = records(client, auth)
    [decision] = of_kind(found, "policy.decision")
    assert decision["facts"]["outcome"] == "require_approval"
    assert decision["facts"]["skill_hash"] == wiper["hash"]
    [answer] = of_kind(found, "approval.decided")
    assert answer["subject"] == approval_id
    assert answer["actor"].startswith("owner:")
    assert (answer["facts"]["decision"], answer["facts"]["status"]) == ("deny", "denied")
    assert SECRET_ARGUMENT not in json.dumps(found)


def test_skill_changes_record_the_hash_before_and_after(client, auth):
    first = import_skill(client, auth, "notes")
    second = import_skill(client, auth, "notes", body="2")
    switched = client.put(
        "/api/skills/notes/enabled", headers=auth, json={"enabled": False, "hash": second["hash"]}
    )
    assert switched.status_code == 200, switched.json
    assert client.delete("/api/skills/notes", headers=auth).status_code == 204
    changes = [r["facts"] for r in of_kind(records(client, auth), "skill.changed")]
    assert [(c["change"], c.get("before"), c.get("after")) for c in changes] == [
        ("created", None, first["hash"]),
        ("replaced", first["hash"], second["hash"]),
        ("disabled", second["hash"], second["hash"]),
        ("deleted", second["hash"], None),
    ]


def test_token_changes_are_recorded_by_id_never_the_token(client, auth):
    created = client.post("/api/tokens", headers=auth, json={"role": "agent", "label": "ci"})
    assert created.status_code == 201
    assert client.delete(f"/api/tokens/{created.json['id']}", headers=auth).status_code == 204
    found = of_kind(records(client, auth), "token.changed")
    assert [(r["subject"], r["facts"]["change"]) for r in found] == [
        (str(created.json["id"]), "created"),
        (str(created.json["id"]), "deleted"),
    ]
    assert created.json["token"] not in json.dumps(found)


def test_settings_changes_are_recorded_with_what_was_added_and_removed(client, auth):
    body: dict[str, Any] = {"auto_tools": ["host:example.com"]}
    assert client.put("/api/settings", headers=auth, json=body).status_code == 200
    body["auto_tools"] = []
    assert client.put("/api/settings", headers=auth, json=body).status_code == 200
    assert client.put("/api/settings", headers=auth, json=body).status_code == 200  # no change
    found = [r["facts"] for r in of_kind(records(client, auth), "settings.changed")]
    assert [(f["added"], f["removed"]) for f in found] == [
        (["host:example.com"], []),
        ([], ["host:example.com"]),
    ]


def test_question_answers_record_who_and_which_never_the_text(client, auth, agent_auth):
    body = {"arguments": {"question": "Deploy now?"}, "chat_id": "c1"}
    asked = client.post("/api/tools/ask_owner", headers=agent_auth, json=body).json
    answered = client.post(
        f"/api/questions/{asked['question_id']}", headers=auth, json={"answer": SECRET_ARGUMENT}
    )
    assert answered.status_code == 200, answered.json
    body = {"arguments": {"name": "TRACKER_TOKEN", "reason": "To call it."}, "chat_id": "c1"}
    wanted = client.post("/api/tools/request_secret", headers=agent_auth, json=body).json
    given = client.post(
        f"/api/questions/{wanted['question_id']}", headers=auth, json={"secret": SECRET_ARGUMENT}
    )
    assert given.status_code == 200, given.json
    found = records(client, auth)
    answers = of_kind(found, "question.answered")
    assert [r["subject"] for r in answers] == [asked["question_id"], wanted["question_id"]]
    assert all(r["actor"].startswith("owner:") for r in answers)
    assert answers[0]["facts"]["kind"] == "question" and "choice" not in answers[0]["facts"]
    assert answers[1]["facts"]["secret_name"] == "TRACKER_TOKEN"
    decisions = of_kind(found, "policy.decision")
    assert [d["facts"]["tool"] for d in decisions] == ["ask_owner", "request_secret"]
    assert SECRET_ARGUMENT not in json.dumps(found)


def test_a_runs_start_and_end_are_recorded_by_its_worker(client, auth, services, wiper):
    owner_id = alice_id(services)
    run = finished_run(owner_id, wiper["hash"], "7d1c4e0a-0000-4000-8000-0000000000a1", "queued")
    run.arguments = {"target": SECRET_ARGUMENT}
    with transaction(services.sessions) as session:
        session.add(run)
    assert claim(services.sessions, run.id, "web01@host", []) is not None
    outcome = Outcome("succeeded", 0, SECRET_ARGUMENT, "")
    assert finish(services.sessions, run.id, outcome, "uid", []) is not None
    found = [r for r in records(client, auth) if r["subject"] == run.id]
    assert [r["kind"] for r in found] == ["run.started", "run.ended"]
    assert found[0]["actor"] == "worker:web01@host"
    ended = found[1]["facts"]
    assert (ended["status"], ended["exit_code"], ended["skill_hash"]) == (
        "succeeded",
        0,
        wiper["hash"],
    )
    assert SECRET_ARGUMENT not in json.dumps(found)


def test_secrets_set_and_removed_are_settings_changes_by_name_only(client, auth):
    stored = client.put("/api/secrets/API_TOKEN", headers=auth, json={"value": SECRET_ARGUMENT})
    assert stored.status_code == 200, stored.json
    assert client.delete("/api/secrets/API_TOKEN", headers=auth).status_code == 204
    found = of_kind(records(client, auth), "settings.changed")
    assert [(r["subject"], r["facts"]["change"]) for r in found] == [
        ("secret:API_TOKEN", "set"),
        ("secret:API_TOKEN", "deleted"),
    ]
    assert SECRET_ARGUMENT not in json.dumps(found)


def test_a_rollback_is_recorded_as_one_with_the_hash_before_and_after(client, auth):
    first = import_skill(client, auth, "rolled")
    second = import_skill(client, auth, "rolled", body="2")
    back = client.post("/api/skills/rolled/rollback", headers=auth, json={"hash": first["hash"]})
    assert back.status_code == 200, back.json

    found = records(client, auth, subject="rolled")
    [rolled] = of_kind(found, "skill.rolled_back")
    assert rolled["actor"].startswith("owner:")  # the owner's token, by its id
    assert rolled["facts"] == {"before": second["hash"], "after": first["hash"]}
    # The rollback is its own record, not also a replace.
    assert [r["facts"]["change"] for r in of_kind(found, "skill.changed")] == [
        "created", "replaced"
    ]  # fmt: skip


def test_trusting_and_removing_a_key_and_an_override_are_recorded_by_name_and_fingerprint(
    client, auth, tmp_path
):
    key = make_key(tmp_path, "author")
    trusted = client.post(
        "/api/trusted-keys", headers=auth, json={"name": "author", "public_key": public_line(key)}
    )
    assert trusted.status_code == 201, trusted.json
    assert client.delete("/api/trusted-keys/author", headers=auth).status_code == 204
    required = {"auto_tools": [], "require_signature": True}
    assert client.put("/api/settings", headers=auth, json=required).status_code == 200
    held = import_skill(client, auth, "unsigned-one")
    assert held["signature_hold"] is True and held["enabled"] is False
    body = {"enabled": True, "hash": held["hash"], "override_signature": True}
    assert (
        client.put("/api/skills/unsigned-one/enabled", headers=auth, json=body).status_code == 200
    )

    found = records(client, auth)
    trust = [(r["subject"], r["facts"]) for r in of_kind(found, "trust.changed")]
    assert trust == [
        ("author", {"change": "added", "fingerprint": fingerprint(key)}),
        ("author", {"change": "removed", "fingerprint": fingerprint(key)}),
    ]
    assert public_line(key).split()[1] not in json.dumps(found)  # never the key itself
    [setting] = [r for r in of_kind(found, "settings.changed") if r["subject"] == "settings"]
    assert setting["facts"]["require_signature"] is True
    [override] = of_kind(found, "skill.enabled_override")
    assert (override["subject"], override["facts"]) == (
        "unsigned-one", {"skill_hash": held["hash"], "reason": "unsigned"}
    )  # fmt: skip

"""Broker decisions end to end: approvals, grants, plan mode, expiry, turn limits, chat counts."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from factories import skill_files, zip_bytes
from sqlalchemy import select, update
from test_metrics import sample

from store.db import transaction
from store.models import Approval, Grant, Owner, utcnow

WIPE = {"skillfleet.tier": "destructive", "skillfleet.execution": "node"}


def install(client, auth, name: str, metadata: dict[str, str], query: str = "", extra=None):
    files = skill_files(name, metadata=metadata)
    files["scripts/wipe.sh"] = b'#!/bin/bash\necho wiping "$SKILLFLEET_ARGS"\n'
    files.update(extra or {})
    response = client.post(
        f"/api/skills{query}",
        headers=auth,
        data={"file": (io.BytesIO(zip_bytes(files, top=name)), "s.zip")},
        content_type="multipart/form-data",
    )
    assert response.status_code == 201, response.json
    return response.json


def run(
    client, auth, name="wiper", chat="chat-1", mode="execute", arguments=None, turn=None, **extra
):
    body = {
        "arguments": {
            "skill_name": name,
            "script": "scripts/wipe.sh",
            "arguments": arguments
            if arguments is not None
            else {"node": "web01", "path": "/tmp/x"},
            **extra,
        },
        "chat_id": chat,
        "mode": mode,
    }
    if turn is not None:
        body["turn_id"] = turn
    response = client.post("/api/tools/run_skill_script", headers=auth, json=body)
    assert response.status_code == 200, response.json
    return response.json


def answer(client, auth, approval_id: str, decision: str):
    return client.post(f"/api/approvals/{approval_id}", headers=auth, json={"decision": decision})


CHANGE = {"skillfleet.tier": "change", "skillfleet.execution": "node"}


@pytest.fixture
def wiper(client, auth):
    return install(client, auth, "wiper", WIPE)


@pytest.fixture
def changer(client, auth):
    return install(client, auth, "changer", CHANGE)


def test_a_destructive_script_waits_for_approval_with_the_exact_call(client, auth, wiper):
    envelope = run(client, auth)
    assert envelope["status"] == "pending_approval"
    pending = client.get("/api/approvals?status=pending", headers=auth).json
    [approval] = pending
    assert approval["id"] == envelope["approval_id"]
    assert approval["call_id"] == envelope["call_id"]
    assert approval["tool"] == "run_skill_script"
    assert approval["skill_hash"] == wiper["hash"]
    assert approval["node"] == "web01"
    assert approval["arguments"]["arguments"] == {"node": "web01", "path": "/tmp/x"}
    assert approval["grant_key"] == f"skill:wiper@{wiper['hash'][:8]}"
    assert approval["rule"] == "destructive-always-asks"
    assert "scripts/wipe.sh" in approval["warning"] and "web01" in approval["warning"]
    call = client.get(f"/api/calls/{envelope['call_id']}", headers=auth).json
    assert call["status"] == "pending_approval"


def test_approve_for_chat_runs_the_call_and_the_next_one_passes_without_asking(
    client, auth, changer
):
    first = run(client, auth, name="changer")
    approval = client.get(f"/api/approvals/{first['approval_id']}", headers=auth).json
    assert approval["offers_chat_grant"] is True
    approved = answer(client, auth, first["approval_id"], "approve_for_chat")
    assert approved.status_code == 200 and approved.json["status"] == "approved_for_chat"
    done = client.get(f"/api/calls/{first['call_id']}", headers=auth).json
    assert done["status"] == "done"
    would = done["result"]["would_dispatch"]
    assert (would["node"], would["arguments"]) == ("web01", {"path": "/tmp/x"})
    again = run(client, auth, name="changer")
    assert again["status"] == "done"
    assert "approval_id" not in again
    other_chat = run(client, auth, name="changer", chat="chat-2")
    assert other_chat["status"] == "pending_approval"


def test_a_destructive_call_always_asks_in_a_chat_and_is_never_offered_for_the_chat(
    client, auth, wiper
):
    first = run(client, auth)
    approval = client.get(f"/api/approvals/{first['approval_id']}", headers=auth).json
    assert approval["offers_chat_grant"] is False
    refused = answer(client, auth, first["approval_id"], "approve_for_chat")
    assert refused.status_code == 400
    assert refused.json["code"] == "grant_not_offered"
    # The refused answer changed nothing: the approval still waits, and approve once runs it.
    assert (
        client.get(f"/api/approvals/{first['approval_id']}", headers=auth).json["status"]
        == "pending"
    )
    assert answer(client, auth, first["approval_id"], "approve").json["status"] == "approved"
    assert run(client, auth)["status"] == "pending_approval"


def test_plan_mode_refuses_with_the_rule_name(client, auth, wiper):
    envelope = run(client, auth, mode="plan")
    assert envelope["status"] == "denied"
    assert envelope["error"]["code"] == "policy_denied"
    assert "plan-mode-changes-nothing" in envelope["error"]["message"]


def test_approve_once_runs_once_and_the_next_call_asks_again(client, auth, wiper):
    first = run(client, auth)
    assert answer(client, auth, first["approval_id"], "approve").json["status"] == "approved"
    assert run(client, auth)["status"] == "pending_approval"


@pytest.mark.both_databases
def test_answering_twice_is_409_and_another_owners_approval_is_404(client, auth, other_auth, wiper):
    envelope = run(client, auth)
    theirs = answer(client, other_auth, envelope["approval_id"], "approve")
    assert theirs.status_code == 404
    assert theirs.json["code"] == "approval_not_found"
    assert answer(client, auth, envelope["approval_id"], "deny").status_code == 200
    twice = answer(client, auth, envelope["approval_id"], "approve")
    assert twice.status_code == 409
    assert twice.json["code"] == "approval_answered"


def test_a_denied_call_is_declined_and_counted_on_the_chat(client, auth, wiper):
    envelope = run(client, auth)
    answer(client, auth, envelope["approval_id"], "deny")
    call = client.get(f"/api/calls/{envelope['call_id']}", headers=auth).json
    assert call["status"] == "denied"
    assert call["error_code"] == "owner_denied"
    run(client, auth, mode="plan")
    chat = client.get("/api/chats/chat-1", headers=auth).json
    assert chat["declined_calls"] == 2


def test_editing_the_skill_before_the_answer_makes_the_approval_stale(client, auth, wiper):
    envelope = run(client, auth)
    install(client, auth, "wiper", WIPE, "?replace=true", {"references/guide.md": b"changed"})
    response = answer(client, auth, envelope["approval_id"], "approve")
    assert response.status_code == 409
    assert response.json["code"] == "approval_stale"
    call = client.get(f"/api/calls/{envelope['call_id']}", headers=auth).json
    assert call["status"] == "failed" and call["error_code"] == "skill_changed"
    approval = client.get(f"/api/approvals/{envelope['approval_id']}", headers=auth).json
    assert approval["status"] == "stale"


def test_an_approval_card_says_when_its_skill_changed_and_approving_it_runs_nothing(
    client, auth, wiper
):
    envelope, other = run(client, auth), run(client, auth)
    card = client.get(f"/api/approvals/{envelope['approval_id']}", headers=auth).json
    assert card["skill_hash"] == card["skill_hash_now"] == wiper["hash"]
    assert card["skill_changed"] is False and card["skill_change"] is None
    changed = install(client, auth, "wiper", WIPE, "?replace=true", {"references/x.md": b"new"})
    cards = {c["id"]: c for c in client.get("/api/approvals?status=pending", headers=auth).json}
    card = cards[envelope["approval_id"]]
    assert card["skill_changed"] is True and card["skill_hash_now"] == changed["hash"]
    assert f"version {wiper['hash'][:8]} is now {changed['hash'][:8]}" in card["skill_change"]
    assert "Approving runs nothing" in card["skill_change"]
    refused = answer(client, auth, envelope["approval_id"], "approve")
    assert refused.status_code == 409 and refused.json["code"] == "approval_stale"
    assert changed["hash"][:8] in refused.json["message"]
    call = client.get(f"/api/calls/{envelope['call_id']}", headers=auth).json
    assert call["status"] == "failed" and call["run_id"] is None
    answered = client.get(f"/api/approvals/{envelope['approval_id']}", headers=auth).json
    assert answered["status"] == "stale" and answered["skill_changed"] is None

    assert client.delete("/api/skills/wiper", headers=auth).status_code == 204
    removed = client.get(f"/api/approvals/{other['approval_id']}", headers=auth).json
    assert removed["skill_changed"] is True and removed["skill_hash_now"] is None
    assert "was removed after you were asked" in removed["skill_change"]


def test_a_skill_deleted_and_reinstalled_under_its_name_makes_the_approval_stale(
    client, auth, wiper
):
    envelope = run(client, auth)
    assert client.delete("/api/skills/wiper", headers=auth).status_code == 204
    install(client, auth, "wiper", WIPE, extra={"references/guide.md": b"someone else's"})
    response = answer(client, auth, envelope["approval_id"], "approve")
    assert response.status_code == 409 and response.json["code"] == "approval_stale"
    call = client.get(f"/api/calls/{envelope['call_id']}", headers=auth).json
    assert call["status"] == "failed" and "result" not in call or call["result"] is None


def test_editing_a_skill_makes_its_old_chat_grant_stop_matching(client, auth, changer):
    first = run(client, auth, name="changer")
    answer(client, auth, first["approval_id"], "approve_for_chat")
    assert run(client, auth, name="changer")["status"] == "done"
    install(client, auth, "changer", CHANGE, "?replace=true", {"references/guide.md": b"v2"})
    assert run(client, auth, name="changer")["status"] == "pending_approval"


def test_a_chat_grant_matches_the_full_hash_not_its_first_eight_digits(
    client, auth, services, changer
):
    first = run(client, auth, name="changer")
    answer(client, auth, first["approval_id"], "approve_for_chat")
    # A grant that agrees with the skill's hash in the first eight digits only (a collision
    # someone found) matches nothing: only the full hash is a match.
    with transaction(services.sessions) as session:
        session.execute(
            update(Grant)
            .where(Grant.key.like("skill:changer@%"))
            .values(key=f"skill:changer@{changer['hash'][:8]}{'0' * 56}")
        )
    assert run(client, auth, name="changer")["status"] == "pending_approval"


def test_deleting_a_chat_forgets_its_grants(client, auth, changer):
    first = run(client, auth, name="changer")
    answer(client, auth, first["approval_id"], "approve_for_chat")
    grants = client.get("/api/chats/chat-1/grants", headers=auth).json
    assert [g["key"] for g in grants] == [f"skill:changer@{changer['hash'][:8]}"]
    assert client.delete("/api/chats/chat-1", headers=auth).status_code == 204
    assert client.get("/api/chats/chat-1", headers=auth).status_code == 404
    assert run(client, auth, name="changer")["status"] == "pending_approval"


@pytest.mark.both_databases
def test_an_approval_expires_after_thirty_minutes(client, auth, services, wiper):
    envelope = run(client, auth)
    approval = client.get(f"/api/approvals/{envelope['approval_id']}", headers=auth).json
    made = approval["created_at"].replace("Z", "+00:00")
    expires = approval["expires_at"].replace("Z", "+00:00")
    from datetime import datetime

    assert datetime.fromisoformat(expires) - datetime.fromisoformat(made) == timedelta(minutes=30)
    with transaction(services.sessions) as session:
        session.execute(
            update(Approval)
            .where(Approval.id == envelope["approval_id"])
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
    assert client.get("/api/approvals?status=pending", headers=auth).json == []
    expired = client.get(f"/api/approvals/{envelope['approval_id']}", headers=auth).json
    assert expired["status"] == "expired"
    late = answer(client, auth, envelope["approval_id"], "approve")
    assert late.status_code == 409
    call = client.get(f"/api/calls/{envelope['call_id']}", headers=auth).json
    assert call["status"] == "expired"
    assert client.get("/api/chats/chat-1", headers=auth).json["expired_calls"] == 1


def test_a_change_skill_asks_unless_the_owner_allowed_it_in_settings(client, auth):
    changer = install(client, auth, "changer", {"skillfleet.tier": "change"})
    assert run(client, auth, name="changer")["status"] == "pending_approval"
    key = f"skill:changer@{changer['hash'][:8]}"
    settings = client.put("/api/settings", headers=auth, json={"auto_tools": [key]})
    assert settings.status_code == 200, settings.json
    assert run(client, auth, name="changer")["status"] == "done"


def test_settings_refuse_tools_that_are_not_change_tools(client, auth):
    malformed = (
        "skill:Bad@zz",
        "skill:a--b@12345678",
        "skill:../x@12345678",
        "skill:x\x00@1234abcd",
    )
    for entry in ("list_skills", "edit_skill", "no_such_tool", *malformed):
        response = client.put("/api/settings", headers=auth, json={"auto_tools": [entry]})
        assert response.status_code == 422, entry
        assert response.json["code"] == "invalid_setting"
        if entry.startswith("skill:"):  # refused by the one name rule, before any lookup
            assert "is not a skill:<name>@<hash8> key" in response.json["message"], entry


def test_a_read_skill_runs_without_asking(client, auth):
    install(client, auth, "reader", {"skillfleet.tier": "read"})
    assert run(client, auth, name="reader")["status"] == "done"


def no_approvals(client, auth) -> bool:
    return client.get("/api/approvals", headers=auth).json == []


def test_a_call_naming_no_skill_fails_at_once_and_asks_nobody(client, auth):
    envelope = run(client, auth, name="ghost")
    assert envelope["status"] == "failed"
    assert envelope["error"]["code"] == "skill_not_found"
    assert "approval_id" not in envelope
    assert no_approvals(client, auth)


def test_a_call_to_another_owners_skill_fails_as_not_found(client, auth, other_auth, wiper):
    envelope = run(client, other_auth)
    assert envelope["status"] == "failed"
    assert envelope["error"]["code"] == "skill_not_found"
    assert client.get("/api/approvals", headers=other_auth).json == []


def test_a_disabled_skill_fails_at_once_with_the_seed_text(client, auth, wiper):
    client.put("/api/skills/wiper/enabled", headers=auth, json={"enabled": False})
    envelope = run(client, auth)
    assert envelope["status"] == "failed"
    assert envelope["error"] == {
        "code": "skill_disabled",
        "message": "HOST: that skill is no longer enabled.",
    }
    assert no_approvals(client, auth)


def test_an_unknown_script_or_bad_arguments_fail_at_once_and_ask_nobody(client, auth, services):
    files = skill_files("typed", metadata=WIPE)
    files["scripts/wipe.sh"] = b"echo hi\n"
    files["SKILL.md"] = (
        files["SKILL.md"]
        .decode()
        .replace(
            "metadata:",
            'metadata:\n  parameters_schema: \'{"type": "object", "required": ["path"],'
            ' "properties": {"path": {"type": "string"}}}\'',
        )
        .encode()
    )
    response = client.post(
        "/api/skills",
        headers=auth,
        data={"file": (io.BytesIO(zip_bytes(files, top="typed")), "s.zip")},
        content_type="multipart/form-data",
    )
    assert response.status_code == 201, response.json
    missing = run(client, auth, name="typed", script="scripts/nope.sh")
    assert missing["status"] == "failed" and missing["error"]["code"] == "script_not_found"
    wrong = run(client, auth, name="typed", arguments={"node": "web01", "path": 7})
    assert wrong["status"] == "failed" and wrong["error"]["code"] == "arguments_schema"
    assert no_approvals(client, auth)


def test_an_edit_that_can_only_fail_is_never_put_to_the_owner(client, auth, wiper):
    for arguments in (
        {"skill_name": "wiper", "name": "wiper"},
        {"skill_name": "no-such", "changes": {"body": "x"}, "rationale": "r"},
        {"skill_name": "wiper", "changes": {"files": {"../x": "y"}}, "rationale": "r"},
    ):
        body = {"arguments": arguments, "chat_id": "c"}
        envelope = client.post("/api/tools/edit_skill", headers=auth, json=body).json
        assert envelope["status"] == "failed", envelope
    assert no_approvals(client, auth)


def wipe_job(client, auth, name: str = "wipe") -> str:
    job = {
        "name": name,
        "cron": "0 3 * * *",
        "steps": [{"tool": "list_skills"}],
        "skills": ["wiper"],
    }
    return str(client.post("/api/jobs", headers=auth, json=job).json["id"])


def call_in_a_new_run(client, auth, services, job_id: str) -> dict:
    """A wiper call in a new run of the job, which then ends (the next run may start)."""
    from store.lifecycle import jobruns as jobstate

    run_id = client.post(f"/api/jobs/{job_id}/run", headers=auth).json["job_run_id"]
    body = {
        "arguments": {
            "skill_name": "wiper",
            "script": "scripts/wipe.sh",
            "arguments": {"node": "web01"},
        },
        "job_run_id": run_id,
    }
    envelope = client.post("/api/tools/run_skill_script", headers=auth, json=body).json
    with transaction(services.sessions) as session:
        run = jobstate.claim(session, run_id, "test")
        jobstate.succeed(session, run, "test")
    return {**envelope, "job_run_id": run_id}


@pytest.mark.parametrize("decision", ["approve_for_job", "approve_for_chat"])
def test_a_job_approval_for_the_job_saves_the_grant_to_the_job(
    client, auth, wiper, services, decision
):
    job_id = wipe_job(client, auth)
    first = call_in_a_new_run(client, auth, services, job_id)
    assert first["status"] == "pending_approval"
    approved = answer(client, auth, first["approval_id"], decision)
    assert approved.status_code == 200, approved.json
    assert approved.json["grant_scope"] == "job"
    again = call_in_a_new_run(client, auth, services, job_id)  # the grant is the job's
    assert again["status"] == "done"
    call = client.get(f"/api/calls/{again['call_id']}", headers=auth).json
    assert call["rule"] == "job-granted"
    assert client.get(f"/api/jobs/{job_id}", headers=auth).json["grants"]["skills"] == [
        f"wiper@{wiper['hash']}"
    ]
    # Bound to the full hash, as every grant: the edited skill asks the job again.
    install(client, auth, "wiper", WIPE, "?replace=true", {"references/guide.md": b"v2"})
    assert call_in_a_new_run(client, auth, services, job_id)["status"] == "pending_approval"


def test_an_approval_says_which_chat_and_turn_asked(client, auth, changer, wiper):
    changing = run(client, auth, name="changer", chat="support-42", turn="t-7")
    approval = client.get(f"/api/approvals/{changing['approval_id']}", headers=auth).json
    assert (approval["chat_id"], approval["turn_id"]) == ("support-42", "t-7")
    assert approval["job_id"] is None and approval["job_name"] is None
    assert approval["job_run_id"] is None and approval["run_id"] is None  # nothing ran yet
    assert approval["asked_by"] == "chat 'support-42', turn t-7"
    assert approval["grant_scope"] == "chat"
    destructive = run(client, auth, chat="support-42")  # never granted for a chat
    listed = client.get("/api/approvals?status=pending", headers=auth).json
    shown = {a["id"]: a for a in listed}[destructive["approval_id"]]
    assert (shown["chat_id"], shown["turn_id"]) == ("support-42", None)
    assert shown["asked_by"] == "chat 'support-42'"
    assert shown["grant_scope"] is None and shown["offers_chat_grant"] is False


def test_a_job_approval_says_which_job_and_job_run_asked(client, auth, wiper, services):
    job_id = wipe_job(client, auth, "nightly wipe")
    asked = call_in_a_new_run(client, auth, services, job_id)
    approval = client.get(f"/api/approvals/{asked['approval_id']}", headers=auth).json
    assert approval["job_id"] == job_id and approval["job_name"] == "nightly wipe"
    assert approval["job_run_id"] == asked["job_run_id"]
    assert approval["chat_id"] is None
    assert approval["asked_by"] == f"job 'nightly wipe', run {asked['job_run_id'][:8]}"
    assert approval["grant_scope"] == "job"  # a job may be granted destructive skills
    [listed] = client.get("/api/approvals?status=pending", headers=auth).json
    assert listed["asked_by"] == approval["asked_by"]


def test_approve_for_job_is_refused_in_a_chat_and_nothing_changes(client, auth, changer):
    asked = run(client, auth, name="changer")
    refused = answer(client, auth, asked["approval_id"], "approve_for_job")
    assert refused.status_code == 400 and refused.json["code"] == "grant_not_offered"
    assert "approve it for the chat" in refused.json["message"]
    approval = client.get(f"/api/approvals/{asked['approval_id']}", headers=auth).json
    assert approval["status"] == "pending"
    assert client.get("/api/chats/chat-1/grants", headers=auth).json == []


def test_approving_always_is_refused_for_a_call_outside_any_chat_or_job(client, auth, changer):
    # Nothing could hold the grant: the answer would approve once and grant nothing.
    body = {
        "arguments": {"skill_name": "changer", "script": "scripts/wipe.sh",
                      "arguments": {"node": "web01"}},
        "turn_id": "lonely",
    }  # fmt: skip
    asked = client.post("/api/tools/run_skill_script", headers=auth, json=body).json
    approval = client.get(f"/api/approvals/{asked['approval_id']}", headers=auth).json
    assert approval["grant_scope"] is None and approval["asked_by"] == "turn lonely"
    refused = answer(client, auth, asked["approval_id"], "approve_for_chat")
    assert refused.status_code == 400 and refused.json["code"] == "grant_not_offered"
    assert (
        client.get(f"/api/approvals/{asked['approval_id']}", headers=auth).json["status"]
        == "pending"
    )
    assert answer(client, auth, asked["approval_id"], "approve").json["status"] == "approved"


def test_who_asked_is_the_owners_alone_and_an_agent_cannot_answer_for_the_job(
    client, auth, other_auth, agent_auth, wiper, services
):
    asked = call_in_a_new_run(client, auth, services, wipe_job(client, auth))
    path = f"/api/approvals/{asked['approval_id']}"
    assert client.get(path, headers=other_auth).status_code == 404
    assert client.get("/api/approvals", headers=other_auth).json == []
    theirs = answer(client, other_auth, asked["approval_id"], "approve_for_job")
    assert theirs.status_code == 404 and theirs.json["code"] == "approval_not_found"
    agent = answer(client, agent_auth, asked["approval_id"], "approve_for_job")
    assert agent.status_code == 403 and agent.json["code"] == "owner_only"
    seen = client.get(path, headers=agent_auth).json  # an agent reads its owner's approvals
    assert seen["status"] == "pending" and seen["job_name"] == "wipe"


def test_more_than_fifty_calls_in_one_turn_are_refused(client, auth):
    body = {"arguments": {}, "turn_id": "busy"}
    for _ in range(50):
        assert (
            client.post("/api/tools/list_skills", headers=auth, json=body).json["status"] == "done"
        )
    refused = client.post("/api/tools/list_skills", headers=auth, json=body).json
    assert refused["status"] == "denied"
    assert "50 tool calls" in refused["error"]["message"]
    other_turn = client.post(
        "/api/tools/list_skills", headers=auth, json={"arguments": {}, "turn_id": "fresh"}
    )
    assert other_turn.json["status"] == "done"


def test_wait_long_polls_until_the_owner_answers(client, auth, wiper, app):
    import threading
    import time

    envelope = run(client, auth)
    other = app.test_client()

    def answer_soon() -> None:
        time.sleep(0.3)
        answer(other, auth, envelope["approval_id"], "approve")

    thread = threading.Thread(target=answer_soon)
    thread.start()
    waited = client.get(f"/api/calls/{envelope['call_id']}?wait=10", headers=auth).json
    thread.join()
    assert waited["status"] == "done"


def test_the_owner_is_asked_while_the_call_still_waits_for_the_answer(
    client, auth, wiper, app, services
):
    # A waited call holds its events for its run's first read; one that waits for its owner
    # has no run yet, so the owner's "approval.created" must go out before the wait.
    import json
    import threading
    import time

    from relay import naming

    with services.sessions() as session:
        owner_id = session.scalar(select(Owner.id).where(Owner.name == "alice"))
    stream = naming.owner_events(owner_id)
    last = services.redis.xrevrange(stream, count=1)
    after = last[0][0] if last else b"0-0"
    waited: dict[str, object] = {}
    other = app.test_client()
    body = {"arguments": {"skill_name": "wiper", "script": "scripts/wipe.sh",
                          "arguments": {"node": "web01", "path": "/tmp/x"}}}  # fmt: skip

    def call() -> None:
        response = other.post("/api/tools/run_skill_script?wait=10", headers=auth, json=body)
        waited.update(response.json)

    thread = threading.Thread(target=call)
    thread.start()
    asked = None
    deadline = time.monotonic() + 5
    while asked is None and time.monotonic() < deadline:
        for _id, fields in services.redis.xrange(stream, min=f"({after.decode()}"):
            if fields[b"kind"] == b"approval.created":
                asked = json.loads(fields[b"data"])
        time.sleep(0.02)
    assert asked is not None and thread.is_alive()  # heard while the call waits
    answer(client, auth, asked["approval_id"], "approve")
    thread.join()
    assert waited.get("status") == "done" and waited["call_id"] == asked["call_id"], waited


def test_each_decision_is_counted_once_whichever_way_the_call_goes(client, auth, wiper):
    # A refused or asked call is counted in its record's round trip, a run after its task went
    # out: never both, never neither.
    def decided(action: str) -> float:
        text = client.get("/metrics").get_data(as_text=True)
        return sample(text, "skillfleet_policy_decisions_total", action=action)

    before = {action: decided(action) for action in ("deny", "require_approval", "allow")}
    asked = run(client, auth)
    assert run(client, auth, mode="plan")["status"] == "denied"
    assert answer(client, auth, asked["approval_id"], "approve").json["status"] == "approved"

    assert decided("deny") == before["deny"] + 1
    assert decided("require_approval") == before["require_approval"] + 1
    assert decided("allow") == before["allow"]  # the approved run was decided when it was asked

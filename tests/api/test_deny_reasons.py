"""A denial's reason: kept on the approval and told to the agent in the call's error."""

from __future__ import annotations

import pytest
from test_approvals import answer, run

from api.bodies import MAX_BODY_BYTES
from store.limits import MAX_DENY_REASON_CHARS


def deny(client, auth, approval_id: str, reason: object):
    body = {"decision": "deny", "reason": reason}
    return client.post(f"/api/approvals/{approval_id}", headers=auth, json=body)


@pytest.mark.both_databases
def test_a_reason_given_with_deny_is_kept_and_told_to_the_agent(client, auth, wiper):
    asked = run(client, auth)
    denied = deny(client, auth, asked["approval_id"], "  Not on a Friday; ask again Monday.  ")
    assert denied.status_code == 200, denied.json
    assert denied.json["status"] == "denied"
    assert denied.json["reason"] == "Not on a Friday; ask again Monday."
    call = client.get(f"/api/calls/{asked['call_id']}", headers=auth).json
    assert call["status"] == "denied" and call["error_code"] == "owner_denied"
    said = "The owner declined this call: Not on a Friday; ask again Monday."
    assert call["error_message"] == said
    shown = client.get(f"/api/approvals/{asked['approval_id']}", headers=auth).json
    assert shown["reason"] == "Not on a Friday; ask again Monday."


def test_a_deny_without_a_reason_or_with_a_blank_one_says_only_that_it_was_declined(
    client, auth, wiper
):
    for reason in (None, "   "):
        asked = run(client, auth)
        assert deny(client, auth, asked["approval_id"], reason).json["reason"] is None
        call = client.get(f"/api/calls/{asked['call_id']}", headers=auth).json
        assert call["error_message"] == "The owner declined this call."
    asked = run(client, auth)
    assert answer(client, auth, asked["approval_id"], "deny").json["reason"] is None


def test_a_reason_is_refused_with_an_approval_too_long_with_a_nul_or_not_text(client, auth, wiper):
    asked = run(client, auth)
    url = f"/api/approvals/{asked['approval_id']}"
    with_approve = {"decision": "approve", "reason": "fine"}
    refused = client.post(url, headers=auth, json=with_approve)
    assert refused.status_code == 422 and refused.json["code"] == "invalid_request"
    assert "deny only" in str(refused.json["errors"])
    for reason in ("x" * (MAX_DENY_REASON_CHARS + 1), "a\x00b", 7, ["no"], {"why": "no"}):
        refused = deny(client, auth, asked["approval_id"], reason)
        assert refused.status_code == 422, reason
        assert refused.json["code"] == "invalid_request"
    blank = {"decision": "approve_for_job", "reason": "  "}  # blank is none: judged without it
    assert client.post(url, headers=auth, json=blank).json["code"] == "grant_not_offered"
    fits = deny(client, auth, asked["approval_id"], "x" * MAX_DENY_REASON_CHARS)
    assert fits.status_code == 200  # nothing above was answered: the approval was still open


def test_denying_with_a_reason_takes_the_owners_token_and_only_their_approval(
    client, auth, other_auth, agent_auth, wiper
):
    asked = run(client, auth)
    approval = asked["approval_id"]
    assert deny(client, {}, approval, "no").status_code == 401
    as_agent = deny(client, agent_auth, approval, "no")
    assert as_agent.status_code == 403 and as_agent.json["code"] == "owner_only"
    theirs = deny(client, other_auth, approval, "no")
    assert theirs.status_code == 404 and theirs.json["code"] == "approval_not_found"
    for bad in ("..%2F..%2Fetc", "a%00b", "x" * 300, "a/b"):
        assert deny(client, auth, bad, "no").status_code in (404, 405), bad
    huge = client.post(
        f"/api/approvals/{approval}",
        headers={**auth, "Content-Type": "application/json"},
        data=b'{"decision": "deny", "reason": "' + b"x" * MAX_BODY_BYTES + b'"}',
    )
    assert huge.status_code == 413
    shapes = ([], "deny", {"reason": "no"}, {"decision": "deny", "reason": "no", "extra": 1})
    for shape in shapes:
        wrong = client.post(f"/api/approvals/{approval}", headers=auth, json=shape)
        assert wrong.status_code in (400, 422), shape
    pending = client.get(f"/api/approvals/{approval}", headers=auth).json
    assert pending["status"] == "pending"  # nothing refused answered it

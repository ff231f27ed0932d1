"""A secret card's consent is bound to the version of the skill the owner saw: the card records
the skill's full hash when asked, storing the secret allows exactly that version, and a skill
that changed meanwhile is refused (409 `skill_changed`) with nothing stored, until the owner
answers again naming the version they now allow."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from toolcalls import draft_arguments, tool

from store.models import Grant, OwnerSecret

PLAINTEXT = "consent-bound-secret-value"


def ask_for_secret(client, agent_auth, skill: str) -> dict[str, Any]:
    arguments = {"name": "HELPER_TOKEN", "reason": "To call the tracker.", "skill": skill}
    asked = tool(client, agent_auth, "request_secret", arguments)
    assert asked["status"] == "pending_question", asked
    return dict(asked)


def card(client, auth, question_id: str) -> dict[str, Any]:
    shown = client.get(f"/api/questions/{question_id}", headers=auth)
    assert shown.status_code == 200, shown.json
    return dict(shown.json)


def answer(client, auth, question_id: str, **body: Any):
    return client.post(f"/api/questions/{question_id}", headers=auth, json=body)


def stored(services) -> tuple[int, list[str]]:
    """How many secrets the owners stored, and every secret consent granted."""
    with services.sessions() as session:
        secrets = session.scalar(select(func.count()).select_from(OwnerSecret))
        keys = session.scalars(select(Grant.key).where(Grant.scope == "secret")).all()
    return int(secrets or 0), sorted(keys)


def draft(client, agent_auth, body: str) -> str:
    """The agent's own draft `helper`, (re)written with `body`; its hash."""
    drafted = tool(client, agent_auth, "draft_skill", draft_arguments("helper", body=body))
    assert drafted["status"] == "done", drafted
    return str(drafted["result"]["hash"])


def test_a_secret_card_records_the_skills_hash_and_storing_allows_exactly_that_version(
    services, client, auth, agent_auth
):
    first = draft(client, agent_auth, "# Helper\n\nFirst version.\n")
    asked = ask_for_secret(client, agent_auth, "helper")
    shown = card(client, auth, asked["question_id"])
    assert shown["skill_name"] == "helper" and shown["skill_hash"] == first
    assert shown["skill_hash_now"] == first and shown["skill_changed"] is False
    assert shown["skill_change"] is None
    given = answer(client, auth, asked["question_id"], secret=PLAINTEXT)
    assert given.status_code == 200, given.json
    assert stored(services) == (1, [f"secret:helper@{first}"])
    ended = client.get(f"/api/calls/{asked['call_id']}?wait=5", headers=agent_auth).json
    assert ended["status"] == "done" and ended["result"] == {"stored": True, "name": "HELPER_TOKEN"}


def test_secret_card_answered_after_the_skill_changed_is_refused_and_nothing_released(
    services, client, auth, agent_auth
):
    first = draft(client, agent_auth, "# Helper\n\nAn honest first version.\n")
    asked = ask_for_secret(client, agent_auth, "helper")
    swapped = draft(client, agent_auth, "# Helper\n\nA second version, swapped in after.\n")
    assert swapped != first

    shown = card(client, auth, asked["question_id"])
    assert shown["skill_hash"] == first and shown["skill_hash_now"] == swapped
    assert shown["skill_changed"] is True
    assert f"version {first[:8]}" in shown["skill_change"]
    assert f"skill_hash {swapped[:8]}" in shown["skill_change"]

    refused = answer(client, auth, asked["question_id"], secret=PLAINTEXT)
    assert refused.status_code == 409, refused.json
    assert refused.json["code"] == "skill_changed"
    assert first[:8] in refused.json["message"] and swapped[:8] in refused.json["message"]
    assert "Nothing was stored" in refused.json["message"]
    old = answer(client, auth, asked["question_id"], secret=PLAINTEXT, skill_hash=first)
    assert old.status_code == 409 and old.json["code"] == "skill_changed"
    assert stored(services) == (0, [])
    assert card(client, auth, asked["question_id"])["status"] == "pending"
    waiting = client.get(f"/api/calls/{asked['call_id']}", headers=agent_auth).json
    assert waiting["status"] == "pending_question"

    knowingly = answer(client, auth, asked["question_id"], secret=PLAINTEXT, skill_hash=swapped[:8])
    assert knowingly.status_code == 200, knowingly.json
    assert knowingly.json["status"] == "answered"
    assert stored(services) == (1, [f"secret:helper@{swapped}"])


def test_a_secret_card_whose_skill_was_removed_stores_nothing(services, client, auth, agent_auth):
    draft(client, agent_auth, "# Helper\n\nSoon gone.\n")
    asked = ask_for_secret(client, agent_auth, "helper")
    assert client.delete("/api/skills/helper", headers=auth).status_code == 204
    shown = card(client, auth, asked["question_id"])
    assert shown["skill_changed"] is True and shown["skill_hash_now"] is None
    assert "was removed" in shown["skill_change"]
    refused = answer(client, auth, asked["question_id"], secret=PLAINTEXT)
    assert refused.status_code == 409 and refused.json["code"] == "skill_changed"
    assert "removed" in refused.json["message"]
    assert stored(services) == (0, [])


def test_a_version_named_for_a_question_without_a_skill_or_malformed_is_refused(
    services, client, auth, agent_auth
):
    plain = tool(client, agent_auth, "request_secret", {"name": "GENERAL", "reason": "r"})
    shown = card(client, auth, plain["question_id"])
    assert shown["skill_hash"] is None and shown["skill_changed"] is None
    refused = answer(client, auth, plain["question_id"], secret=PLAINTEXT, skill_hash="ab" * 4)
    assert refused.status_code == 422 and refused.json["code"] == "answer_invalid"
    draft(client, agent_auth, "# Helper\n\nOne.\n")
    asked = ask_for_secret(client, agent_auth, "helper")
    for bad in ("abc", "XYZ" * 4, "g" * 64):
        malformed = answer(client, auth, asked["question_id"], secret=PLAINTEXT, skill_hash=bad)
        assert malformed.status_code == 422, (bad, malformed.json)
        assert malformed.json["code"] == "invalid_request"
    assert stored(services) == (0, [])


def test_setting_a_skills_secret_for_a_version_no_longer_current_stores_nothing(
    services, client, auth, agent_auth
):
    first = draft(client, agent_auth, "# Helper\n\nOne.\n")
    second = draft(client, agent_auth, "# Helper\n\nTwo.\n")
    body = {"value": PLAINTEXT, "skill": "helper", "hash": first[:8]}
    refused = client.put("/api/secrets/HELPER_TOKEN", headers=auth, json=body)
    assert refused.status_code == 409 and refused.json["code"] == "skill_changed"
    assert stored(services) == (0, [])
    body["hash"] = second
    given = client.put("/api/secrets/HELPER_TOKEN", headers=auth, json=body)
    assert given.status_code == 200 and given.json["allowed"] is True
    assert stored(services) == (1, [f"secret:helper@{second}"])

"""ask_owner, request_secret and notify_owner end to end: the call waits `pending_question`, the
owner answers over REST, and a secret's value reaches only the sealed owner_secrets table."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select, text, update
from test_authoring_loop import owned_skill

from broker.ownertools import OwnerDesk
from relay import events, naming
from store.db import transaction
from store.models import OwnerSecret, Question, ToolCall, utcnow
from store.secrets import Sealer
from store.settings import Settings

PLAINTEXT = "s3cr3t-value-that-must-not-leak"


def call(client, auth, tool: str, arguments: dict[str, Any], wait: float = 0, **envelope):
    query = f"?wait={wait}" if wait else ""
    body = {"arguments": arguments, "chat_id": "chat-q", **envelope}
    response = client.post(f"/api/tools/{tool}{query}", headers=auth, json=body)
    assert response.status_code == 200, response.json
    return response.json


def answer(client, auth, question_id: str, **body: Any):
    return client.post(f"/api/questions/{question_id}", headers=auth, json=body)


def pending(client, auth) -> list[dict[str, Any]]:
    response = client.get("/api/questions?status=pending", headers=auth)
    assert response.status_code == 200, response.json
    return list(response.json)


def test_ask_owner_waits_pending_until_the_owner_answers_and_the_agent_gets_the_answer(
    client, auth, agent_auth
):
    # Waiting through a `?wait=` while the owner answers is tested over real HTTP
    # (tests/skillfleet/test_cli_questions.py, tests/api/test_mcp_questions.py).
    envelope = call(client, agent_auth, "ask_owner", {"question": "Deploy now?"})
    [question] = pending(client, auth)
    assert question["kind"] == "question" and question["text"] == "Deploy now?"
    assert question["id"] == envelope["question_id"] == envelope["call_id"]
    call_row = client.get(f"/api/calls/{question['call_id']}", headers=agent_auth).json
    assert call_row["status"] == "pending_question"
    assert call_row["question_id"] == question["id"]
    answered = answer(client, auth, question["id"], answer="Yes, go")
    assert answered.status_code == 200, answered.json
    assert answered.json["status"] == "answered" and answered.json["answer"] == "Yes, go"
    ended = client.get(f"/api/calls/{envelope['call_id']}?wait=5", headers=agent_auth).json
    assert ended["status"] == "done"
    assert ended["result"] == {"answer": "Yes, go"}
    again = answer(client, auth, question["id"], answer="No")
    assert again.status_code == 409 and again.json["code"] == "question_answered"


def test_an_envelope_names_its_question_and_get_call_waits_through_it(client, auth):
    envelope = call(client, auth, "ask_owner", {"question": "Which?", "choices": ["a", "b"]})
    assert envelope["status"] == "pending_question"
    assert envelope["question_id"] == envelope["call_id"]
    short = client.get(f"/api/calls/{envelope['call_id']}?wait=0.3", headers=auth)
    assert short.json["status"] == "pending_question"


def test_choices_are_enforced_and_bad_answers_change_nothing(client, auth):
    envelope = call(client, auth, "ask_owner", {"question": "Which?", "choices": ["red", "blue"]})
    question_id = envelope["question_id"]
    for body, code in (
        ({"answer": "green"}, "answer_invalid"),
        ({"answer": "red\x00"}, "answer_invalid"),
        ({"answer": "x" * 4001}, "answer_invalid"),
        ({"secret": "red"}, "answer_kind"),
        ({}, "answer_kind"),
    ):
        refused = answer(client, auth, question_id, **body)
        assert refused.status_code == 422 and refused.json["code"] == code, (body, refused.json)
    wrong_shape = answer(client, auth, question_id, answer=["red"])
    assert wrong_shape.status_code == 422
    unknown_field = answer(client, auth, question_id, answer="red", extra=1)
    assert unknown_field.status_code == 422
    assert client.get(f"/api/questions/{question_id}", headers=auth).json["status"] == "pending"
    assert answer(client, auth, question_id, answer="blue").json["answer"] == "blue"
    done = client.get(f"/api/calls/{envelope['call_id']}", headers=auth).json
    assert done["status"] == "done" and done["result"] == {"answer": "blue"}


def test_questions_belong_to_their_owner_and_only_an_owner_token_answers(
    client, auth, agent_auth, other_auth
):
    question_id = call(client, auth, "ask_owner", {"question": "Mine?"})["question_id"]
    by_agent = answer(client, agent_auth, question_id, answer="yes")
    assert by_agent.status_code == 403 and by_agent.json["code"] == "owner_only"
    assert client.get(f"/api/questions/{question_id}", headers=agent_auth).status_code == 200
    for method in ("get", "post"):
        other = getattr(client, method)(
            f"/api/questions/{question_id}", headers=other_auth, json={"answer": "yes"}
        )
        assert other.status_code == 404 and other.json["code"] == "question_not_found"
    assert client.get("/api/questions", headers=other_auth).json == []
    assert client.get(f"/api/questions/{question_id}").status_code == 401
    for bad in ("..%2F..%2Fetc", "%00", "q" * 300):
        found = client.get(f"/api/questions/{bad}", headers=auth)
        assert found.status_code == 404, (bad, found.json)
        assert answer(client, auth, bad, answer="x").status_code == 404
    bad_filter = client.get("/api/questions?status=nope", headers=auth)
    assert bad_filter.status_code == 422


def test_an_oversized_answer_body_is_refused(client, auth):
    question_id = call(client, auth, "ask_owner", {"question": "Big?"})["question_id"]
    huge = b'{"answer": "' + b"x" * (6 * 1024 * 1024) + b'"}'
    response = client.post(
        f"/api/questions/{question_id}",
        headers=auth,
        data=huge,
        content_type="application/json",
    )
    assert response.status_code == 413


def test_fifty_answers_at_once_exactly_one_wins_and_its_answer_is_the_agents(app, auth):
    client = app.test_client()
    question_id = call(client, auth, "ask_owner", {"question": "Race?"})["question_id"]

    def one(word: str) -> int:
        return answer(app.test_client(), auth, question_id, answer=word).status_code

    words = [f"a{i}" for i in range(50)]
    with ThreadPoolExecutor(max_workers=16) as pool:
        statuses = list(pool.map(one, words))
    assert statuses.count(200) == 1
    assert set(statuses) == {200, 409}
    shown = client.get(f"/api/calls/{question_id}", headers=auth).json
    assert shown["status"] == "done" and shown["result"] == {"answer": words[statuses.index(200)]}


def test_bad_questions_fail_at_once_without_asking(client, auth):
    for arguments in (
        {},
        {"question": ""},
        {"question": "x" * 2001},
        {"question": "nul\x00"},
        {"question": "ok", "choices": []},
        {"question": "ok", "choices": ["a"] * 2},
        {"question": "ok", "choices": [f"c{i}" for i in range(21)]},
        {"question": "ok", "choices": ["x" * 201]},
        {"question": "ok", "choices": "a,b"},
    ):
        envelope = call(client, auth, "ask_owner", arguments)
        assert envelope["status"] == "failed", arguments
        assert envelope["error"]["code"] == "invalid_call"
    assert pending(client, auth) == []


def test_an_unanswered_question_expires_and_its_call_says_so(services, client, auth):
    envelope = call(client, auth, "ask_owner", {"question": "Anyone?"})
    with transaction(services.sessions) as session:
        session.execute(
            update(Question)
            .where(Question.id == envelope["question_id"])
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
    ended = client.get(f"/api/calls/{envelope['call_id']}?wait=5", headers=auth).json
    assert ended["status"] == "expired"
    assert ended["error_code"] == "unanswered"
    assert "did not answer" in ended["error_message"]
    question = client.get(f"/api/questions/{envelope['question_id']}", headers=auth).json
    assert question["status"] == "unanswered"
    late = answer(client, auth, envelope["question_id"], answer="me")
    assert late.status_code == 409


def test_the_question_wait_comes_from_the_settings():
    settings = Settings.from_env({"SKILLFLEET_QUESTION_WAIT_SECONDS": "90"})
    assert settings.question_wait == 90
    assert OwnerDesk.of(settings, None, None).question_wait == 90  # type: ignore[arg-type]
    assert Settings().question_wait == 1800


def test_a_waiting_question_is_on_the_owners_feed(services, client, auth):
    envelope = call(client, auth, "ask_owner", {"question": "Feed?"})
    owner_id = services.sessions().get(ToolCall, envelope["call_id"]).owner_id
    kinds = {
        event.kind: event.data
        for event in events.read(services.redis, owner_id)
        if event.data.get("call_id") == envelope["call_id"]
    }
    assert kinds["question.waiting"]["question_id"] == envelope["question_id"]
    assert kinds["question.waiting"]["message"] == "An agent asks you: Feed?"


# -- notify_owner ------------------------------------------------------------------------


def owner_of(services, client, auth) -> int:
    call_id = call(client, auth, "list_skills", {})["call_id"]
    with services.sessions() as session:
        return session.get(ToolCall, call_id).owner_id


def fresh_notices(services, client, auth) -> int:
    """The owner's id, with no notices counted this hour: owner ids repeat from one test
    database to the next, and the test Redis keeps their counts."""
    owner_id = owner_of(services, client, auth)
    hour = naming.notices_of_hour(owner_id, 0).removesuffix("0")
    for key in services.redis.scan_iter(hour + "*"):
        services.redis.delete(key)
    return owner_id


def test_notify_owner_sends_a_notice_and_stops_at_the_turn_limit(services, client, auth):
    owner_id = fresh_notices(services, client, auth)
    turn = {"turn_id": f"t-{uuid.uuid4().hex}"}
    sent = [
        call(client, auth, "notify_owner", {"message": f"n{i}", "level": "warning"}, **turn)
        for i in range(4)
    ]
    assert [e["status"] for e in sent] == ["done", "done", "done", "failed"]
    assert sent[0]["result"] == {"sent": True}
    assert sent[3]["error"]["code"] == "notify_limit"
    assert "this turn" in sent[3]["error"]["message"]
    ours = {e["call_id"] for e in sent}
    notices = [
        e
        for e in events.read(services.redis, owner_id)
        if e.kind == "owner.notified" and e.data["call_id"] in ours
    ]
    assert [n.data["message"] for n in notices] == ["n0", "n1", "n2"]
    assert notices[0].data["level"] == "warning"
    bad = call(client, auth, "notify_owner", {"message": "x", "level": "loud"})
    assert bad["status"] == "failed" and bad["error"]["code"] == "invalid_call"


def test_fifty_notices_at_once_in_one_turn_send_exactly_the_turns_limit(app, services, auth):
    owner_id = fresh_notices(services, app.test_client(), auth)
    turn = {"turn_id": f"t-{uuid.uuid4().hex}"}

    def one(number: int) -> dict[str, Any]:
        arguments = {"message": f"burst {number}"}
        return call(app.test_client(), auth, "notify_owner", arguments, **turn)

    with ThreadPoolExecutor(max_workers=8) as pool:
        envelopes = list(pool.map(one, range(50)))
    done = [e for e in envelopes if e["status"] == "done"]
    assert len(done) == 3
    assert {e["error"]["code"] for e in envelopes if e not in done} == {"notify_limit"}
    turn_key = naming.notices_of_turn(owner_id, turn["turn_id"])
    assert int(services.redis.get(turn_key)) == 3  # refused notices are not counted


def test_notify_owner_stops_at_the_owners_hourly_limit(services, client, auth):
    owner_id = fresh_notices(services, client, auth)
    now = int(time.time()) // 3600
    hour = naming.notices_of_hour(owner_id, now)
    for at in (now, now + 1):  # the call may come in the next hour
        services.redis.set(naming.notices_of_hour(owner_id, at), 20, ex=7200)
    refused = call(client, auth, "notify_owner", {"message": "one more"}, turn_id="t-new")
    assert refused["status"] == "failed" and refused["error"]["code"] == "notify_limit"
    assert "this hour" in refused["error"]["message"]
    assert int(services.redis.get(hour)) == 20  # a refused notice is not counted


def questions_of(services) -> list[str]:
    with services.sessions() as session:
        return list(session.scalars(select(Question.id)))


def waiting_notices(services, owner_id: int, envelopes: list[dict[str, Any]]) -> list[str]:
    """The calls among `envelopes` whose question was sent to the owner (the test Redis keeps
    the feeds of earlier tests' owners of the same id)."""
    ours = {envelope["call_id"] for envelope in envelopes}
    return [
        e.data["call_id"]
        for e in events.read(services.redis, owner_id)
        if e.kind == "question.waiting" and e.data["call_id"] in ours
    ]


def test_questions_count_with_notices_against_the_turn_and_past_it_nothing_is_asked(
    services, client, auth
):
    owner_id = fresh_notices(services, client, auth)
    turn = {"turn_id": f"t-{uuid.uuid4().hex}"}
    notified = [call(client, auth, "notify_owner", {"message": f"n{i}"}, **turn) for i in (1, 2)]
    asked = call(client, auth, "ask_owner", {"question": "Third notice?"}, **turn)
    assert [e["status"] for e in notified] == ["done", "done"]
    assert asked["status"] == "pending_question"
    secret = call(client, auth, "request_secret", {"name": "ONE_TOO_MANY", "reason": "r"}, **turn)
    assert secret["status"] == "failed" and secret["error"]["code"] == "notify_limit"
    assert "this turn already sent 3 notices" in secret["error"]["message"]
    again = call(client, auth, "ask_owner", {"question": "And a fifth?"}, **turn)
    assert again["status"] == "failed" and again["error"]["code"] == "notify_limit"
    assert questions_of(services) == [asked["question_id"]]
    assert waiting_notices(services, owner_id, [asked, secret, again]) == [asked["call_id"]]
    assert int(services.redis.get(naming.notices_of_turn(owner_id, turn["turn_id"]))) == 3


def test_questions_stop_at_the_owners_hourly_limit_and_nothing_is_asked(services, client, auth):
    owner_id = fresh_notices(services, client, auth)
    now = int(time.time()) // 3600
    for at in (now, now + 1):  # the call may come in the next hour
        services.redis.set(naming.notices_of_hour(owner_id, at), 20, ex=7200)
    refused = [
        call(client, auth, tool, arguments, turn_id=f"t-{uuid.uuid4().hex}")
        for tool, arguments in (
            ("ask_owner", {"question": "Over the hour?"}),
            ("request_secret", {"name": "OVER", "reason": "r"}),
        )
    ]
    for envelope in refused:
        assert envelope["status"] == "failed" and envelope["error"]["code"] == "notify_limit"
        assert "this hour" in envelope["error"]["message"]
    assert questions_of(services) == []
    assert waiting_notices(services, owner_id, refused) == []
    assert int(services.redis.get(naming.notices_of_hour(owner_id, now))) == 20


def no_turn(client, auth, tool: str, arguments: dict[str, Any], chat: str | None):
    """A call made without a turn_id (and, with `chat` None, outside any chat)."""
    body: dict[str, Any] = {"arguments": arguments}
    if chat is not None:
        body["chat_id"] = chat
    response = client.post(f"/api/tools/{tool}", headers=auth, json=body)
    assert response.status_code == 200, response.json
    return response.json


@pytest.mark.parametrize("chat", ["chat-without-turns", None])
def test_notices_without_a_turn_still_meet_the_turns_limit(services, client, auth, chat):
    fresh_notices(services, client, auth)
    sent = [no_turn(client, auth, "notify_owner", {"message": f"n{i}"}, chat) for i in range(3)]
    assert [e["status"] for e in sent] == ["done"] * 3
    asked = no_turn(client, auth, "ask_owner", {"question": "A fourth?"}, chat)
    assert asked["status"] == "failed" and asked["error"]["code"] == "notify_limit"
    assert "this turn" in asked["error"]["message"]
    assert questions_of(services) == []
    elsewhere = no_turn(client, auth, "notify_owner", {"message": "other chat"}, "another-chat")
    assert elsewhere["status"] == "done"


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("ask_owner", {"question": "Deploy?", "urgent": True}),
        ("ask_owner", {"question": "Deploy?", "choices": ["y", "n"], "default": "y"}),
        ("request_secret", {"name": "TOKEN", "reason": "r", "scope": "all"}),
        ("notify_owner", {"message": "hi", "colour": "red"}),
    ],
)
def test_owner_tools_refuse_fields_their_schema_does_not_have_and_send_nothing(
    services, client, auth, tool, arguments
):
    owner_id = fresh_notices(services, client, auth)
    refused = call(client, auth, tool, arguments, turn_id="t-unknown-fields")
    assert refused["status"] == "failed" and refused["error"]["code"] == "invalid_call"
    extra = sorted(set(arguments) - {"question", "choices", "name", "reason", "message"})
    assert f"not {extra}" in refused["error"]["message"]
    assert questions_of(services) == []
    told = [
        e.kind
        for e in events.read(services.redis, owner_id)
        if e.data.get("call_id") == refused["call_id"]
    ]
    assert told == ["call.finished"]  # the failed call, and no notice
    assert services.redis.get(naming.notices_of_turn(owner_id, "t-unknown-fields")) is None


# -- request_secret -------------------------------------------------------------------------


def test_request_secret_stores_the_value_sealed_and_the_model_sees_only_its_name(
    services, client, auth, agent_auth
):
    owned_skill(client, auth, "deployer")
    arguments = {"name": "DEPLOY_TOKEN", "reason": "To deploy.", "skill": "deployer"}
    asked = call(client, agent_auth, "request_secret", arguments)
    assert asked["status"] == "pending_question"
    [question] = pending(client, auth)
    assert question["kind"] == "secret" and question["secret_name"] == "DEPLOY_TOKEN"
    plain = answer(client, auth, question["id"], answer=PLAINTEXT)
    assert plain.status_code == 422 and plain.json["code"] == "answer_kind"
    given = answer(client, auth, question["id"], secret=PLAINTEXT)
    assert given.status_code == 200 and given.json["answer"] is None
    envelope = client.get(f"/api/calls/{asked['call_id']}?wait=5", headers=agent_auth).json
    assert envelope["status"] == "done"
    assert envelope["result"] == {"stored": True, "name": "DEPLOY_TOKEN"}
    assert PLAINTEXT not in str(envelope)
    with services.sessions() as session:
        [secret] = session.scalars(select(OwnerSecret)).all()
        assert (secret.name, secret.skill_name) == ("DEPLOY_TOKEN", "deployer")
        assert secret.value != PLAINTEXT
        assert Sealer(services.settings.keys_dir).unseal(secret.value) == PLAINTEXT
        for table in ("tool_calls", "questions"):
            rows = session.execute(text(f"SELECT * FROM {table}")).all()  # noqa: S608
            assert rows and PLAINTEXT not in str(rows)
    owner_id = secret.owner_id
    assert PLAINTEXT not in str(events.read(services.redis, owner_id))
    shown = client.get(f"/api/calls/{envelope['call_id']}", headers=auth).json
    assert PLAINTEXT not in str(shown)


def test_request_secret_refuses_bad_names_unknown_skills_and_plan_mode(client, auth):
    for arguments, code in (
        ({"name": "lower", "reason": "r"}, "invalid_call"),
        ({"name": "A" * 65, "reason": "r"}, "invalid_call"),
        ({"name": "OK", "reason": "r", "skill": "no-such-skill"}, "skill_not_found"),
    ):
        envelope = call(client, auth, "request_secret", arguments)
        assert envelope["status"] == "failed" and envelope["error"]["code"] == code, arguments
    planned = call(client, auth, "request_secret", {"name": "OK", "reason": "r"}, mode="plan")
    assert planned["status"] == "denied"
    assert "plan-mode-changes-nothing" in planned["error"]["message"]
    question_id = call(client, auth, "ask_owner", {"question": "Plain?"})["question_id"]
    refused = answer(client, auth, question_id, secret="value")
    assert refused.status_code == 422 and refused.json["code"] == "answer_kind"


def test_a_secret_over_8_kib_is_refused(client, auth):
    question_id = call(client, auth, "request_secret", {"name": "BIG", "reason": "r"})[
        "question_id"
    ]
    refused = answer(client, auth, question_id, secret="x" * (8 * 1024 + 1))
    assert refused.status_code == 422 and refused.json["code"] == "answer_invalid"
    assert answer(client, auth, question_id, secret="x" * 8 * 1024).status_code == 200


@pytest.mark.parametrize("tool", ["ask_owner", "notify_owner", "request_secret"])
def test_the_owner_tools_are_listed(client, auth, tool):
    names = [d["function"]["name"] for d in client.get("/api/tools", headers=auth).json]
    assert tool in names

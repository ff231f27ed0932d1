"""What an owner approves or answers shows an agent's control and format characters as escapes
(the API's cards), while the call keeps exactly what it sent; what can't be shown faithfully is
refused before anyone is asked."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import offer_node
from sqlalchemy import func, select

from relay import heartbeat, naming
from store.models import Question, ToolCall

# Erases the line, returns to its start and writes something harmless over what runs; then a
# right-to-left override that shows "exe.sh" backwards. The warning shows the argv it runs.
COMMAND = "rm -rf ~/work\x1b[2K\recho tidy \u202ehs.exe"
ESCAPED = "rm -rf '~/work\\x1b[2K' echo tidy '\\u202ehs.exe'"


@pytest.fixture
def node(services, live_redis) -> Iterator[str]:
    """alice's node whose worker beats now, so run_command may ask about it."""
    name = f"shown-{uuid.uuid4().hex[:6]}"
    offer_node(services, name)
    instance = heartbeat.Instance(
        role="node", queue=naming.node_queue(name), name=name, features=["skills"]
    )
    heartbeat.beat(live_redis, instance, alive_seconds=60)
    yield name
    live_redis.zrem(naming.all_workers(), instance.id)
    live_redis.zrem(naming.queue_workers(instance.queue), instance.id)
    live_redis.delete(naming.worker_key(instance.id))


def call(client, auth, tool: str, arguments: dict[str, Any], chat: str = "shown") -> Any:
    body = {"arguments": arguments, "chat_id": chat}
    return client.post(f"/api/tools/{tool}", headers=auth, json=body)


def test_a_commands_control_and_bidi_characters_show_as_escapes_and_run_as_sent(
    client, auth, agent_auth, node
):
    asked = call(client, agent_auth, "run_command", {"node": node, "command": COMMAND}).json
    assert asked["status"] == "pending_approval", asked
    card = client.get(f"/api/approvals/{asked['approval_id']}", headers=auth).json
    assert ESCAPED in card["warning"]
    assert "\x1b" not in card["warning"] and "\u202e" not in card["warning"]
    assert card["arguments"]["command"] == COMMAND  # what the approved call runs, exactly
    assert "\\u001b[2K\\r" in card["arguments_shown"] and "\\u202e" in card["arguments_shown"]
    assert "\u202e" not in card["arguments_shown"]
    [listed] = client.get("/api/approvals?status=pending", headers=auth).json
    assert listed["warning"] == card["warning"]


def test_a_questions_text_shows_as_escapes_and_choices_that_would_hide_are_refused(
    services, client, auth, agent_auth
):
    text = "Delete \u202eatad\u202c now?\x07"
    asked = call(client, agent_auth, "ask_owner", {"question": text}).json
    card = client.get(f"/api/questions/{asked['question_id']}", headers=auth).json
    assert card["text"] == "Delete \\u202eatad\\u202c now?\\x07"
    for choices in (["yes", "n\u200bo"], ["\u202eon", "yes"], ["ok\x1b[31m", "no"]):
        refused = call(client, agent_auth, "ask_owner", {"question": "Sure?", "choices": choices})
        assert refused.json["status"] == "failed", choices
        assert refused.json["error"]["code"] == "invalid_call"
        assert "control or format character" in refused.json["error"]["message"]
    with services.sessions() as session:
        assert session.scalars(select(Question.id)).all() == [asked["question_id"]]


@pytest.mark.parametrize(
    "envelope",
    [
        {"chat_id": "support\u202e24-troppus"},
        {"chat_id": "c1", "turn_id": "t\x1b[2K7"},
        {"chat_id": "line\nbreak"},
    ],
)
def test_a_chat_or_turn_id_the_owner_could_not_read_is_refused_and_nothing_recorded(
    services, client, agent_auth, envelope
):
    body = {"arguments": {"question": "Hi?"}, **envelope}
    refused = client.post("/api/tools/ask_owner", headers=agent_auth, json=body)
    assert refused.status_code == 400, refused.json
    assert refused.json["code"] == "invalid_call" and "printable" in refused.json["message"]
    with services.sessions() as session:
        assert session.scalar(select(func.count()).select_from(ToolCall)) == 0

"""`skillfleet questions`: the owner lists what agents asked and answers it, a secret typed
at a prompt that does not echo it, against the API served over HTTP."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fleet import Fleet, fleet, sqlite_settings, wait_until
from toolcalls import draft_arguments

from skillfleet.cli import cli

pytestmark = pytest.mark.fleet


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    """The API alone (no worker: asking needs none), shared by the module's owners."""
    with fleet(sqlite_settings(tmp_path_factory.mktemp("cli-q"), sqlite_template)) as started:
        yield started


@pytest.fixture
def running(shared: Fleet) -> Fleet:
    return shared.with_new_owner()


def questions(started: Fleet, *args: str, typed: str | None = None) -> Any:
    env = {"SKILLFLEET_URL": started.url, "SKILLFLEET_TOKEN": started.owner_token}
    return CliRunner().invoke(cli, ["questions", *args], env=env, input=typed)


def ask(started: Fleet, tool: str, arguments: dict[str, Any], wait: float = 0) -> dict[str, Any]:
    with started.http() as http:
        body = {"arguments": arguments, "chat_id": "cli-chat"}
        response = http.post(f"/api/tools/{tool}", params={"wait": wait}, json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_a_question_is_listed_and_answered_from_the_command_line_while_the_agent_waits(running):
    got: dict[str, Any] = {}
    arguments = {"question": "Which region?", "choices": ["eu", "us"]}
    waiting = threading.Thread(target=lambda: got.update(ask(running, "ask_owner", arguments, 30)))
    waiting.start()
    listed = wait_until(
        lambda: "Which region?" in (shown := questions(running, "list")).output and shown,
        20,
        "the question to be listed",
    )
    assert listed.exit_code == 0 and "eu | us" in listed.output
    [row] = [line for line in listed.output.splitlines() if "Which region?" in line]
    question_id = row.split()[0]
    refused = questions(running, "answer", question_id, "asia")
    assert refused.exit_code == 1 and "answer_invalid" in refused.output
    answered = questions(running, "answer", question_id, "eu")
    assert answered.exit_code == 0, answered.output
    assert answered.output.strip() == f"{question_id}: answered"
    waiting.join(timeout=40)
    assert got["status"] == "done" and got["result"] == {"answer": "eu"}
    assert "Which region?" not in questions(running, "list").output
    assert "answered" in questions(running, "list", "--all").output


def test_a_secret_is_typed_without_echo_and_never_shown(running):
    asked = ask(running, "request_secret", {"name": "API_KEY", "reason": "For the report."})
    listed = questions(running, "list")
    assert "secret API_KEY: For the report." in listed.output
    as_argument = questions(running, "answer", asked["question_id"], "--secret", "hunter2")
    assert as_argument.exit_code == 2 and "history" in as_argument.output
    typed = questions(running, "answer", asked["question_id"], "--secret", typed="hunter2\n")
    assert typed.exit_code == 0, typed.output
    assert "hunter2" not in typed.output
    with running.http() as http:
        call = http.get(f"/api/calls/{asked['call_id']}").json()
    assert call["status"] == "done" and call["result"] == {"stored": True, "name": "API_KEY"}


def test_an_unknown_question_is_a_clear_error(running):
    missing = questions(running, "answer", "no-such-question", "x")
    assert missing.exit_code == 1 and "question_not_found" in missing.output


def drafted(started: Fleet, body: str) -> str:
    """The agent's draft `helper`, (re)written with `body`; its hash."""
    envelope = ask(started, "draft_skill", draft_arguments("helper", body=body))
    assert envelope["status"] == "done", envelope
    return str(envelope["result"]["hash"])


def test_a_secret_for_a_skill_that_changed_is_stored_only_for_the_version_named(running):
    first = drafted(running, "# Helper\n\nFirst.\n")
    arguments = {"name": "HELPER_TOKEN", "reason": "For the tracker.", "skill": "helper"}
    asked = ask(running, "request_secret", arguments)
    swapped = drafted(running, "# Helper\n\nSwapped in.\n")
    listed = questions(running, "list")
    assert f"helper@{first[:8]} (CHANGED: now {swapped[:8]})" in listed.output
    shown = questions(running, "show", asked["question_id"])
    assert f"skill_hash {swapped[:8]}" in shown.output
    refused = questions(running, "answer", asked["question_id"], "--secret", typed="tok\n")
    assert refused.exit_code == 1 and "skill_changed" in refused.output
    alone = questions(running, "answer", asked["question_id"], "--skill-hash", swapped[:8])
    assert alone.exit_code == 2 and "--secret" in alone.output
    with running.http() as http:
        assert http.get(f"/api/calls/{asked['call_id']}").json()["status"] == "pending_question"
    given = questions(
        running, "answer", asked["question_id"], "--secret", "--skill-hash", swapped[:8],
        typed="tok\n",
    )  # fmt: skip
    assert given.exit_code == 0, given.output
    with running.http() as http:
        assert http.get(f"/api/calls/{asked['call_id']}").json()["status"] == "done"

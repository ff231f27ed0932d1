"""Short ids on the command line, and `skillfleet tokens list/revoke`, against the API served
over HTTP: a unique start of an id names it, a start shared by several ids is refused naming
them, a start of none is not found; another owner's ids are never found."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fleet import Fleet, fleet, seemingly_served, sqlite_settings

from skillfleet.cli import cli

pytestmark = pytest.mark.fleet

NODE = f"cli-short-{uuid.uuid4().hex[:6]}"
HEX = "0123456789abcdef"


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    """The API alone, with a node whose worker seems to beat (asking needs no real worker)."""
    with fleet(sqlite_settings(tmp_path_factory.mktemp("cli-s"), sqlite_template)) as started:
        with seemingly_served(started, NODE):
            yield started


@pytest.fixture
def running(shared: Fleet) -> Fleet:
    return shared.with_new_owner()


def skillfleet(started: Fleet, *args: str, token: str | None = None) -> Any:
    env = {"SKILLFLEET_URL": started.url, "SKILLFLEET_TOKEN": token or started.owner_token}
    return CliRunner().invoke(cli, list(args), env=env)


def ask(started: Fleet, tool: str, arguments: dict[str, Any], chat: str = "c") -> dict[str, Any]:
    with started.http() as http:
        body = {"arguments": arguments, "chat_id": chat}
        response = http.post(f"/api/tools/{tool}", json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def question(started: Fleet, text: str = "Which region?", chat: str = "c") -> str:
    asked = ask(started, "ask_owner", {"question": text, "choices": ["eu", "us"]}, chat)
    assert "question_id" in asked, asked
    return str(asked["question_id"])


def test_a_question_is_shown_and_answered_by_the_eight_characters_the_console_shows(running):
    asked = question(running)

    shown = skillfleet(running, "questions", "show", asked[:8])
    answered = skillfleet(running, "questions", "answer", asked[:8], "eu")

    assert shown.exit_code == 0, shown.output
    assert asked in shown.output and "Which region?" in shown.output
    assert answered.exit_code == 0, answered.output
    with running.http() as http:
        assert http.get(f"/api/questions/{asked}").json()["status"] == "answered"


def test_a_start_shared_by_several_ids_is_refused_naming_them(running):
    # Seventeen ids: at least two begin with the same hex digit.
    asked = [question(running, f"Question {n}?", f"chat-{n}") for n in range(17)]
    digit, count = Counter(item[0] for item in asked).most_common(1)[0]
    assert count >= 2
    sharing = sorted(item for item in asked if item[0] == digit)

    refused = skillfleet(running, "questions", "show", digit)

    assert refused.exit_code == 1
    assert f"Error (ambiguous_id): '{digit}' is the start of {count} question ids" in refused.output
    assert all(item in refused.output for item in sharing)
    assert "Give more of the id." in refused.output
    unique = skillfleet(running, "questions", "show", sharing[0][:13])
    assert unique.exit_code == 0 and sharing[0] in unique.output


def test_a_start_of_no_id_is_not_found(running):
    asked = question(running)
    unused = next(digit for digit in HEX if digit != asked[0])

    missing = skillfleet(running, "questions", "show", unused)
    odd = skillfleet(running, "questions", "show", "../etc")

    assert missing.exit_code == 1
    assert f"Error (question_not_found): You have no question whose id starts with '{unused}'" in (
        missing.output
    )
    assert odd.exit_code == 1 and "question_not_found" in odd.output


def test_another_owners_id_is_not_found_by_its_start(running, shared):
    theirs = question(shared.with_new_owner())

    missing = skillfleet(running, "questions", "show", theirs[:8])

    assert missing.exit_code == 1 and "question_not_found" in missing.output


def test_an_approval_is_denied_by_a_unique_start(running):
    asked = ask(running, "run_command", {"node": NODE, "command": "rm -rf /tmp/x"})
    assert asked["status"] == "pending_approval", asked

    denied = skillfleet(running, "approvals", "deny", asked["approval_id"][:8])

    assert denied.exit_code == 0, denied.output
    assert denied.output.strip() == f"{asked['approval_id']}: denied"


READ = {"skillfleet.tier": "read", "skillfleet.execution": "node"}


def test_a_run_is_shown_by_a_unique_start(running):
    running.import_skill("echoer", READ, {"scripts/echo.sh": "echo hi\n"})
    arguments = {"skill_name": "echoer", "script": "scripts/echo.sh", "arguments": {"node": NODE}}
    asked = ask(running, "run_skill_script", arguments)
    run_id = asked["run_id"]

    shown = skillfleet(running, "runs", "show", run_id[:8])

    assert shown.exit_code == 0, shown.output
    assert f"run_id:       {run_id}" in shown.output
    missing = skillfleet(running, "runs", "cancel", "zz")
    assert missing.exit_code == 1 and "Error (run_not_found)" in missing.output


def test_a_job_is_shown_and_its_runs_listed_by_a_unique_start(running):
    body = {"name": "nightly", "cron": "0 3 * * *", "steps": [{"prompt": "Say hello."}]}
    with running.http() as http:
        created = http.post("/api/jobs", json=body)
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]

    shown = skillfleet(running, "jobs", "show", job_id[:8])
    listed = skillfleet(running, "jobs", "runs", job_id[:8])

    assert shown.exit_code == 0, shown.output
    assert f'"id": "{job_id}"' in shown.output
    assert listed.exit_code == 0, listed.output


def test_tokens_list_shows_the_owners_tokens_and_revoke_ends_one_at_once(running):
    with running.http() as http:
        made = http.post("/api/tokens", json={"role": "agent", "label": "ci agent"}).json()
    agent = made["token"]

    listed = skillfleet(running, "tokens", "list")
    revoked = skillfleet(running, "tokens", "revoke", str(made["id"]))

    assert listed.exit_code == 0, listed.output
    header, *rows = listed.output.splitlines()
    assert header.split() == ["ID", "ROLE", "LABEL", "CREATED", "LAST", "USED", "EXPIRES"]
    assert any(row.split()[:4] == [str(made["id"]), "agent", "ci", "agent"] for row in rows)
    assert agent not in listed.output
    assert revoked.exit_code == 0, revoked.output
    assert revoked.output.strip() == f"Revoked token {made['id']}."
    refused = skillfleet(running, "skills", "list", token=agent)
    assert refused.exit_code == 1 and "not a valid token" in refused.output
    again = skillfleet(running, "tokens", "revoke", str(made["id"]))
    assert again.exit_code == 1 and "Error (token_not_found)" in again.output


def test_tokens_revoke_refuses_what_is_not_a_token_id_and_another_owners_token(running, shared):
    other = shared.with_new_owner()
    with other.http() as http:
        theirs = http.post("/api/tokens", json={"role": "agent"}).json()

    for given in ("abc", "../1", "1.5", "9" * 30, str(theirs["id"])):
        refused = skillfleet(running, "tokens", "revoke", given)
        assert refused.exit_code == 1, given
        assert "Error (token_not_found)" in refused.output, refused.output
    with other.http() as http:
        assert http.get("/api/tokens").status_code == 200
        kept = [t["id"] for t in http.get("/api/tokens").json()]
    assert theirs["id"] in kept


def test_an_agent_token_can_not_list_or_revoke_tokens(running):
    with running.http() as http:
        agent = http.post("/api/tokens", json={"role": "agent"}).json()

    listed = skillfleet(running, "tokens", "list", token=agent["token"])
    revoked = skillfleet(running, "tokens", "revoke", str(agent["id"]), token=agent["token"])

    assert listed.exit_code == 1 and "Error (owner_only)" in listed.output
    assert revoked.exit_code == 1 and "Error (owner_only)" in revoked.output

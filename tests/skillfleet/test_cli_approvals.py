"""`skillfleet approvals list/show` and `skillfleet questions list/show` against the API served
over HTTP: an agent's control and format characters reach the terminal as escapes, never as
the sequences that would rewrite what the owner reads; an approval whose skill changed since it
was asked says so; a denial carries its reason."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fleet import Fleet, fleet, seemingly_served, sqlite_settings

from skillfleet.cli import cli

pytestmark = pytest.mark.fleet

NODE = f"cli-shown-{uuid.uuid4().hex[:6]}"
# Erases the line, returns to its start and writes a harmless command over the real one; then a
# right-to-left override that shows "exe.sh" backwards.
COMMAND = "rm -rf ~/work\x1b[2K\recho tidy \u202ehs.exe"
HIDING = ("\x1b", "\r", "\u202e", "\u2066")


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    """The API alone, with a node whose worker seems to beat (asking needs no real worker)."""
    with fleet(sqlite_settings(tmp_path_factory.mktemp("cli-a"), sqlite_template)) as started:
        with seemingly_served(started, NODE):
            yield started


@pytest.fixture
def running(shared: Fleet) -> Fleet:
    return shared.with_new_owner()


def skillfleet(started: Fleet, *args: str) -> Any:
    env = {"SKILLFLEET_URL": started.url, "SKILLFLEET_TOKEN": started.owner_token}
    return CliRunner().invoke(cli, list(args), env=env)


def ask(started: Fleet, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    with started.http() as http:
        response = http.post(f"/api/tools/{tool}", json={"arguments": arguments, "chat_id": "c"})
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_a_commands_escape_and_bidi_characters_reach_the_terminal_as_escapes(running):
    asked = ask(running, "run_command", {"node": NODE, "command": COMMAND})
    assert asked["status"] == "pending_approval", asked
    listed = skillfleet(running, "approvals", "list")
    assert listed.exit_code == 0, listed.output
    assert asked["approval_id"] in listed.output and "run_command" in listed.output
    shown = skillfleet(running, "approvals", "show", asked["approval_id"])
    assert shown.exit_code == 0, shown.output
    for output in (listed.output, shown.output):
        assert not any(char in output for char in HIDING), output
    assert "rm -rf '~/work\\x1b[2K' echo tidy '\\u202ehs.exe'" in shown.output  # the warning
    assert '"command": "rm -rf ~/work\\u001b[2K\\recho tidy \\u202ehs.exe"' in shown.output
    assert f"on {NODE}" in shown.output and "destructive" in shown.output


def test_a_questions_text_reaches_the_terminal_as_escapes(running):
    asked = ask(running, "ask_owner", {"question": "Approve \u2066\u202eevil\u2069 now?\x1b[8m"})
    listed = skillfleet(running, "questions", "list")
    shown = skillfleet(running, "questions", "show", asked["question_id"])
    for output in (listed.output, shown.output):
        assert not any(char in output for char in HIDING), output
        assert "Approve \\u2066\\u202eevil\\u2069 now?\\x1b[8m" in output


def test_showing_an_approval_that_is_not_yours_fails_with_its_code(running):
    missing = skillfleet(running, "approvals", "show", "no-such-approval")
    assert missing.exit_code == 1 and "approval_not_found" in missing.output


WIPE = {"skillfleet.tier": "destructive", "skillfleet.execution": "node"}


def test_an_approval_whose_skill_changed_says_so_in_list_and_show(running):
    skill = running.import_skill("wiper", WIPE, {"scripts/wipe.sh": "echo wiped\n"})
    arguments = {"skill_name": "wiper", "script": "scripts/wipe.sh", "arguments": {"node": NODE}}
    asked = ask(running, "run_skill_script", arguments)
    assert asked["status"] == "pending_approval", asked
    with running.http() as http:
        edited = http.put("/api/skills/wiper/files/references/x.md", json={"content": "new\n"})
    assert edited.status_code == 200, edited.text
    now = edited.json()["hash"]
    listed = skillfleet(running, "approvals", "list")
    assert f"wiper@{skill['hash'][:8]} (CHANGED: now {now[:8]})" in listed.output
    shown = skillfleet(running, "approvals", "show", asked["approval_id"])
    assert f"version {skill['hash'][:8]} is now {now[:8]}" in shown.output


def test_deny_with_a_reason_tells_the_agent_why(running):
    asked = ask(running, "run_command", {"node": NODE, "command": "uptime"})
    denied = skillfleet(running, "approvals", "deny", asked["approval_id"], "--reason", "Not now.")
    assert denied.exit_code == 0, denied.output
    assert f"{asked['approval_id']}: denied" in denied.output
    with running.http() as http:
        call = http.get(f"/api/calls/{asked['call_id']}").json()
    assert call["error_message"] == "The owner declined this call: Not now."

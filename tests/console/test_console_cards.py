"""The cards the owner answers on the console: an agent's control and format characters show as
escapes (a command's ESC and right-to-left override can't make it read as something else), and
an approval whose skill changed since it was asked says so."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browsing import browser, call_tool, page, signed_in  # fixtures and helpers
from fleet import Fleet, fleet, seemingly_served, sqlite_settings

from relay import heartbeat, naming

__all__ = ["browser", "page"]

NODE = f"shown-{uuid.uuid4().hex[:6]}"
COMMAND = "rm -rf ~/work\x1b[2K\recho tidy \u202ehs.exe"
HIDING = ("\x1b", "\u202e", "\u2066")


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    """The API alone, with a node whose worker seems to beat: asking needs no real worker."""
    with fleet(sqlite_settings(tmp_path_factory.mktemp("console-s"), sqlite_template)) as started:
        with seemingly_served(started, NODE):
            yield started


def test_an_approval_card_shows_a_commands_hidden_characters_as_escapes(
    page: Any, console: Fleet
) -> None:
    asked = call_tool(console, "run_command", {"node": NODE, "command": COMMAND})
    assert asked["status"] == "pending_approval", asked
    signed_in(page, console)
    card = page.locator(f"[data-approval-id='{asked['approval_id']}']")
    card.wait_for()
    warning = card.locator("p.warning").inner_text()
    assert "rm -rf '~/work\\x1b[2K' echo tidy '\\u202ehs.exe'" in warning
    arguments = card.locator("pre.arguments").inner_text()
    assert '"command": "rm -rf ~/work\\u001b[2K\\recho tidy \\u202ehs.exe"' in arguments
    assert not any(char in card.inner_text() for char in HIDING)


def test_a_question_card_shows_hidden_characters_as_escapes(page: Any, console: Fleet) -> None:
    asked = call_tool(console, "ask_owner", {"question": "Approve \u2066\u202eevil\u2069 now?"})
    signed_in(page, console)
    page.goto(f"{console.url}/#/questions")
    page.wait_for_selector("main[data-ready=questions]")
    card = page.locator(f"[data-question-id='{asked['question_id']}']")
    assert card.locator(".question-text").inner_text() == "Approve \\u2066\\u202eevil\\u2069 now?"
    assert not any(char in card.inner_text() for char in HIDING)


WIPE = {"skillfleet.tier": "destructive", "skillfleet.execution": "node"}


def test_an_approval_card_says_its_skill_changed_since_it_was_asked(
    page: Any, console: Fleet
) -> None:
    console = console.with_new_owner()
    skill = console.import_skill("wiper", WIPE, {"scripts/wipe.sh": "echo wiped\n"})
    arguments = {"skill_name": "wiper", "script": "scripts/wipe.sh", "arguments": {"node": NODE}}
    asked = call_tool(console, "run_skill_script", arguments)
    assert asked["status"] == "pending_approval", asked
    with console.http() as http:
        edited = http.put("/api/skills/wiper/files/references/x.md", json={"content": "new\n"})
    assert edited.status_code == 200, edited.text
    signed_in(page, console)
    card = page.locator(f"[data-approval-id='{asked['approval_id']}']")
    card.wait_for()
    assert card.locator(".skill-ref").inner_text() == f"wiper@{skill['hash'][:8]}"
    changed = card.locator(".skill-changed").inner_text()
    assert f"version {skill['hash'][:8]} is now {edited.json()['hash'][:8]}" in changed
    assert "Approving runs nothing" in changed

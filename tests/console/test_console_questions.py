"""The console's Questions page: a question's choices are buttons, a secret is typed into a
password field, and both end the agent's waiting call."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browsing import browser, call_tool, page, signed_in  # fixtures and helpers
from fleet import Fleet, fleet, sqlite_settings, wait_until
from toolcalls import draft_arguments

__all__ = ["browser", "page"]


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    """The API alone, which serves the console: asking needs no worker."""
    with fleet(sqlite_settings(tmp_path_factory.mktemp("console-q"), sqlite_template)) as started:
        yield started


def on_questions_page(page: Any, console: Fleet) -> None:
    signed_in(page, console)
    page.goto(f"{console.url}/#/questions")
    page.wait_for_selector("main[data-ready=questions]")


def call_of(console: Fleet, call_id: str) -> dict[str, Any]:
    with console.http() as client:
        return dict(client.get(f"/api/calls/{call_id}").json())


def test_questions_are_answered_with_a_choice_and_a_secret_from_their_cards(
    page: Any, console: Fleet
) -> None:
    question = call_tool(console, "ask_owner", {"question": "Ship it?", "choices": ["yes", "no"]})
    secret = call_tool(console, "request_secret", {"name": "SHIP_TOKEN", "reason": "To ship."})
    signed_in(page, console)
    page.wait_for_selector("#question-count:not([hidden])")
    page.goto(f"{console.url}/#/questions")
    page.wait_for_selector("main[data-ready=questions]")
    card = page.locator(f"[data-question-id='{question['question_id']}']")
    assert card.locator(".question-text").inner_text() == "Ship it?"
    card.get_by_role("button", name="no").click()
    wait_until(lambda: call_of(console, question["call_id"])["status"] == "done", 10, "the answer")
    assert call_of(console, question["call_id"])["result"] == {"answer": "no"}
    secret_card = page.locator(f"[data-question-id='{secret['question_id']}']")
    field = secret_card.locator("input[name=secret]")
    assert field.get_attribute("type") == "password"
    assert field.get_attribute("autocomplete") == "off"
    field.fill("tok-123")
    secret_card.get_by_role("button", name="Store secret").click()
    wait_until(lambda: call_of(console, secret["call_id"])["status"] == "done", 10, "the secret")
    assert call_of(console, secret["call_id"])["result"] == {"stored": True, "name": "SHIP_TOKEN"}
    page.wait_for_selector("#questions .empty")
    settled = page.locator("#settled").inner_text()
    assert "SHIP_TOKEN" in settled and "tok-123" not in settled


def test_the_secrets_page_sets_lists_and_deletes_a_secret_without_ever_showing_its_value(
    page: Any, console: Fleet
) -> None:
    console = console.with_new_owner()  # its secrets alone on the page
    signed_in(page, console)
    page.goto(f"{console.url}/#/secrets")
    page.wait_for_selector("main[data-ready=secrets]")
    assert page.locator("#secret-value").get_attribute("type") == "password"
    page.fill("#secret-name", "DEPLOY_KEY")
    page.fill("#secret-value", "dk-9f8e7d")
    page.locator("#secret-form button[type=submit]").click()
    row = page.locator("#secrets tr", has=page.locator("code", has_text="DEPLOY_KEY"))
    row.wait_for()
    assert "dk-9f8e7d" not in page.content()
    with console.http() as client:
        listed = client.get("/api/secrets").json()["secrets"]
    assert [(s["name"], s["skill"]) for s in listed] == [("DEPLOY_KEY", None)]
    row.get_by_role("button", name="Delete").click()
    page.wait_for_selector("#secrets p.muted")
    with console.http() as client:
        assert client.get("/api/secrets").json()["secrets"] == []


def test_a_skill_page_names_the_secrets_it_declares_and_which_are_set(
    page: Any, console: Fleet
) -> None:
    console = console.with_new_owner()
    console.import_skill(
        "deployer",
        {"skillfleet.tier": "read", "skillfleet.secrets": "DEPLOY_KEY REGISTRY_TOKEN"},
        {"scripts/deploy.py": "print('deployed')\n"},
    )
    with console.http() as client:
        stored = client.put(
            "/api/secrets/DEPLOY_KEY", json={"value": "dk-5a4b3c", "skill": "deployer"}
        )
        assert stored.status_code == 200, stored.text
    signed_in(page, console)
    page.goto(f"{console.url}/#/skills/deployer")
    section = page.wait_for_selector("#skill-secrets")

    assert "Secrets (2)" in section.inner_text()
    items = [item.inner_text() for item in section.query_selector_all("li")]
    assert items == ["DEPLOY_KEY — set", "REGISTRY_TOKEN — not set"]
    assert "dk-5a4b3c" not in page.content()


def drafted(console: Fleet, body: str) -> str:
    """The agent's draft `helper`, (re)written with `body`; its hash."""
    arguments = draft_arguments(
        "helper", body=body, metadata={"skillfleet.secrets": "HELPER_TOKEN"}
    )
    envelope = call_tool(console, "draft_skill", arguments)
    assert envelope["status"] == "done", envelope
    return str(envelope["result"]["hash"])


def helper_secret_asked(console: Fleet) -> tuple[str, dict[str, Any]]:
    """The draft `helper`'s first version (its hash) and an agent's request for its secret."""
    first = drafted(console, "# Helper\n\nFirst. Needs HELPER_TOKEN.\n")
    arguments = {"name": "HELPER_TOKEN", "reason": "To call the tracker.", "skill": "helper"}
    return first, call_tool(console, "request_secret", arguments)


def secret_consents(console: Fleet) -> list[tuple[str, str, bool]]:
    with console.http() as client:
        skills = client.get("/api/secrets").json()["skills"]
    return [(s["skill"], s["hash"], s["allowed"]) for s in skills]


def test_a_secret_card_names_its_skill_version_and_a_changed_skill_needs_an_explicit_choice(
    page: Any, console: Fleet
) -> None:
    console = console.with_new_owner()
    first, asked = helper_secret_asked(console)
    on_questions_page(page, console)
    card = page.locator(f"[data-question-id='{asked['question_id']}']")
    assert card.locator(".skill-ref").inner_text() == f"helper@{first[:8]}"
    assert card.locator(".skill-changed").count() == 0

    swapped = drafted(console, "# Helper\n\nSwapped in while the owner looked.\n")
    card.locator("input[name=secret]").fill("tok-on-screen")
    card.get_by_role("button", name="Store secret").click()
    banner = page.locator("#error")
    banner.wait_for()
    assert "skill_changed" in banner.inner_text() and "Nothing was stored" in banner.inner_text()
    assert call_of(console, asked["call_id"])["status"] == "pending_question"

    changed = card.locator(".skill-changed")
    changed.wait_for()  # the page read the card again after the refusal
    assert first[:8] in changed.inner_text() and swapped[:8] in changed.inner_text()
    assert card.get_by_role("button", name="Store secret").count() == 0
    card.locator("input[name=secret]").fill("tok-knowingly")
    card.get_by_role("button", name=f"Allow version {swapped[:8]} and store").click()
    wait_until(lambda: call_of(console, asked["call_id"])["status"] == "done", 10, "the secret")
    assert secret_consents(console) == [("helper", swapped, True)]


def test_a_redraw_keeps_what_the_owner_typed_unless_the_version_it_allows_changed(
    page: Any, console: Fleet
) -> None:
    console = console.with_new_owner()
    first, secret = helper_secret_asked(console)
    plain = call_tool(console, "request_secret", {"name": "PLAIN_TOKEN", "reason": "To ship."})
    question = call_tool(console, "ask_owner", {"question": "Which branch?"})
    on_questions_page(page, console)

    def card(asked: dict[str, Any]) -> Any:
        return page.locator(f"[data-question-id='{asked['question_id']}']")

    card(secret).locator("input[name=secret]").fill("tok-helper")
    card(plain).locator("input[name=secret]").fill("tok-plain")
    card(question).locator("textarea[name=answer]").fill("main")
    swapped = drafted(console, "# Helper\n\nSwapped while the owner typed.\n")
    later = call_tool(console, "ask_owner", {"question": "Anything else?"}, chat="another-chat")
    card(later).wait_for()  # the page drew every card again

    assert card(plain).locator("input[name=secret]").input_value() == "tok-plain"
    assert card(question).locator("textarea[name=answer]").input_value() == "main"
    changed = card(secret).locator(".skill-changed")
    assert first[:8] in changed.inner_text() and swapped[:8] in changed.inner_text()
    assert card(secret).locator("input[name=secret]").input_value() == ""

    card(plain).get_by_role("button", name="Store secret").click()
    wait_until(lambda: call_of(console, plain["call_id"])["status"] == "done", 10, "the secret")
    assert call_of(console, plain["call_id"])["result"] == {"stored": True, "name": "PLAIN_TOKEN"}
    card(question).get_by_role("button", name="Answer").click()
    wait_until(lambda: call_of(console, question["call_id"])["status"] == "done", 10, "the answer")
    assert call_of(console, question["call_id"])["result"] == {"answer": "main"}

"""The Settings page, and what the owner is asked before acting, in a real browser against a
real fleet.

Every tool shows with its tier; a change skill ticked runs without asking and unticked asks
again; destructive tools are never offered; run_command's shell and the hosts are set here.
Revoke asks first and says when the token is the console's own; Deny takes a reason the agent
is told; a skill is replaced or deleted once confirmed. Each test works as an owner of its own.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from browsing import (  # fixtures and helpers
    CHANGE_NODE,
    NODE,
    TICKER,
    browser,
    console,
    page,
    signed_in,
)
from conftest import TLS
from factories import skill_files, zip_bytes
from fleet import Fleet

__all__ = ["browser", "console", "page"]

pytestmark = pytest.mark.timeout(240)


def mine(console: Fleet) -> Fleet:
    owned = console.with_new_owner()
    owned.import_skill("changer", CHANGE_NODE, {"scripts/tick.py": TICKER})
    return owned


def open_route(page: Any, fleet: Fleet, route: str) -> None:
    signed_in(page, fleet)
    page.goto(f"{fleet.url}/#/{route}")
    page.wait_for_selector(f"main[data-ready={route.split('/')[0]}]")


def call_changer(fleet: Fleet) -> dict[str, Any]:
    arguments = {"skill_name": "changer", "script": "scripts/tick.py",
                 "arguments": {"node": NODE, "count": 1}}  # fmt: skip
    with fleet.http() as client:
        response = client.post(
            "/api/tools/run_skill_script", json={"arguments": arguments, "chat_id": "settings"}
        )
    assert response.status_code == 200, response.text
    return dict(response.json())


def settings_of(fleet: Fleet) -> dict[str, Any]:
    with fleet.http() as client:
        return dict(client.get("/api/settings").json())


def accept_next_dialog(page: Any, said: list[str], accept: bool = True) -> None:
    def answer(dialog: Any) -> None:
        said.append(dialog.message)
        if accept:
            dialog.accept()
        else:
            dialog.dismiss()

    page.once("dialog", answer)


def test_settings_list_every_tool_with_its_tier_and_a_ticked_change_skill_runs_without_asking(
    page: Any, console: Fleet
) -> None:
    owner = mine(console)
    open_route(page, owner, "settings")
    with owner.http() as client:
        tools = client.get("/api/settings/tools?page_size=100").json()
        changer = client.get("/api/skills/changer").json()
    rows = page.locator("#settings-tools tbody tr")
    assert rows.count() == len(tools)
    for tool in tools:
        row = page.locator(f"#settings-tools tr[data-tool='{tool['name']}']")
        assert tool["tier"] in row.locator(".tier").inner_text()
    destructive = page.locator("#settings-tools tr[data-tool='run_command']")
    assert destructive.locator("input").count() == 0  # never offered
    assert page.locator("#settings-tools input").count() == sum(t["owner_may_allow"] for t in tools)

    assert call_changer(owner)["status"] == "pending_approval"  # unticked: it asks
    key = f"skill:changer@{changer['hash'][:8]}"
    page.get_by_label("Run changer without asking").check()
    page.wait_for_selector(".notice:has-text('Saved: changer runs without asking')")
    assert settings_of(owner)["auto_tools"] == [key]
    assert call_changer(owner)["status"] in ("running", "done")  # ticked: it runs

    page.get_by_label("Run changer without asking").uncheck()
    page.wait_for_selector(".notice:has-text('Saved: changer asks first')")
    assert settings_of(owner)["auto_tools"] == []
    assert call_changer(owner)["status"] == "pending_approval"


def test_run_commands_shell_and_the_hosts_are_set_on_the_settings_page(
    page: Any, console: Fleet
) -> None:
    owner = mine(console)
    open_route(page, owner, "settings")
    assert not page.is_checked("#run-command-shell")
    page.check("#run-command-shell")
    page.wait_for_selector(".notice:has-text('run_command runs through /bin/sh -c')")
    assert settings_of(owner)["run_command_shell"] is True

    page.fill("#host-grant", "Docs.Example.com")
    page.get_by_role("button", name="Allow").click()
    row = page.locator("#settings-hosts tr[data-host='docs.example.com']")
    row.wait_for()
    assert settings_of(owner)["auto_tools"] == ["host:docs.example.com"]
    assert page.is_checked("#run-command-shell")  # the shell setting stays as it was

    said: list[str] = []
    accept_next_dialog(page, said, accept=False)
    row.get_by_role("button", name="Revoke").click()
    assert said == ["Revoke docs.example.com? Reads of it ask again."]
    assert settings_of(owner)["auto_tools"] == ["host:docs.example.com"]  # dismissed: kept
    accept_next_dialog(page, said)
    row.get_by_role("button", name="Revoke").click()
    row.wait_for(state="detached")
    assert settings_of(owner) == {
        "auto_tools": [],
        "run_command_shell": True,
        "require_signature": False,
    }


def test_revoke_asks_first_and_warns_that_the_consoles_own_token_signs_it_out(
    page: Any, console: Fleet
) -> None:
    owner = mine(console)
    with owner.http() as client:
        agent = client.post("/api/tokens", json={"role": "agent", "label": "laptop"}).json()
    open_route(page, owner, "tokens")
    said: list[str] = []
    row = page.locator("#tokens tbody tr", has_text="laptop")
    accept_next_dialog(page, said, accept=False)
    row.get_by_role("button", name="Revoke").click()
    assert said == [
        f"Revoke token {agent['id']} (laptop)? Whatever uses it is refused from its next request."
    ]
    with httpx.Client(verify=TLS, base_url=owner.url) as bare:
        headers = {"Authorization": f"Bearer {agent['token']}"}
        assert bare.get("/api/tools", headers=headers).status_code == 200  # not revoked
        accept_next_dialog(page, said)
        row.get_by_role("button", name="Revoke").click()
        row.wait_for(state="detached")
        assert bare.get("/api/tools", headers=headers).status_code == 401

    mine_row = page.locator("#tokens tbody tr", has_text="this console")
    assert mine_row.count() == 1
    accept_next_dialog(page, said)
    mine_row.get_by_role("button", name="Revoke").click()
    assert "This console is signed in with it: revoking it signs you out here." in said[-1]
    page.wait_for_selector("main[data-ready=sign-in]")
    assert "You revoked the token this console was signed in with." in page.inner_text("main")
    with httpx.Client(verify=TLS, base_url=owner.url) as bare:
        headers = {"Authorization": f"Bearer {owner.owner_token}"}
        assert bare.get("/api/settings", headers=headers).status_code == 401


def test_deny_takes_a_reason_that_the_agent_is_told_and_a_new_card_does_not_wipe_it(
    page: Any, console: Fleet
) -> None:
    owner = mine(console)
    signed_in(page, owner)
    asked = call_changer(owner)
    card = page.locator(f"article[data-approval-id='{asked['approval_id']}']")
    card.get_by_role("button", name="Deny").click()
    card.get_by_label("Why (optional; the agent is told)").fill("Use the staging node.")
    later = call_changer(owner)  # a new card arrives while the reason is written
    page.wait_for_selector(f"article[data-approval-id='{later['approval_id']}']")
    reason = card.get_by_label("Why (optional; the agent is told)")
    assert reason.input_value() == "Use the staging node."  # kept through the reload
    card.get_by_role("button", name="Deny call").click()
    card.wait_for(state="detached")
    with owner.http() as client:
        call = client.get(f"/api/calls/{asked['call_id']}").json()
    assert call["status"] == "denied"
    assert call["error_message"] == "The owner declined this call: Use the staging node."
    row = page.locator(f"#answered tr[data-approval-id='{asked['approval_id']}']")
    row.wait_for()
    assert "denied" in row.inner_text() and "Use the staging node." in row.inner_text()


def upload(page: Any, selector: str, name: str, text: str) -> None:
    files = skill_files(name, metadata=CHANGE_NODE)
    files["scripts/tick.py"] = text.encode()
    data = zip_bytes(files, top=name)
    page.set_input_files(selector, {"name": f"{name}.zip", "mimeType": "application/zip",
                                    "buffer": data})  # fmt: skip


def test_an_import_over_an_installed_skill_offers_to_replace_it_and_a_skill_page_deletes_it(
    page: Any, console: Fleet
) -> None:
    owner = mine(console)
    with owner.http() as client:
        before = client.get("/api/skills/changer").json()["hash"]
    open_route(page, owner, "skills")
    upload(page, "#skill-zip", "changer", TICKER + "# v2\n")
    page.get_by_role("button", name="Import zip").click()
    offer = page.wait_for_selector("#replace-skill")
    assert (
        "pass replace=true" in page.inner_text(".notice")
        and offer.inner_text() == "Replace changer"
    )
    said: list[str] = []
    accept_next_dialog(page, said)
    offer.click()
    page.wait_for_selector(".notice:has-text('Replaced changer@')")
    assert said[0].startswith("Replace changer with this import?")
    with owner.http() as client:
        replaced = client.get("/api/skills/changer").json()["hash"]
    assert replaced != before

    # The skill's own page: a new zip over it, then delete, each once confirmed.
    page.goto(f"{owner.url}/#/skills/changer")
    page.wait_for_selector("main[data-ready=skills] #replace-form")
    upload(page, "#replace-zip", "other-folder-name", TICKER + "# v3\n")
    accept_next_dialog(page, said)
    page.get_by_role("button", name="Replace", exact=True).click()
    page.wait_for_function(
        "old => (document.querySelector('code.hash') || {}).textContent === undefined "
        "? false : document.querySelector('code.hash').textContent !== old",
        arg=replaced,
    )
    assert said[-1].startswith(f"Replace changer@{replaced[:8]} with other-folder-name.zip?")
    with owner.http() as client:
        third = client.get("/api/skills/changer").json()
        assert (
            third["hash"] != replaced
            and "# v3" in client.get("/api/skills/changer/files/scripts/tick.py").text
        )

    accept_next_dialog(page, said, accept=False)
    page.locator("#delete-skill").click()
    assert said[-1].startswith("Delete changer?")
    with owner.http() as client:
        assert client.get("/api/skills/changer").status_code == 200  # dismissed: kept
    accept_next_dialog(page, said)
    page.locator("#delete-skill").click()
    page.wait_for_selector("main[data-ready=skills] #skills table")
    assert page.locator("#skills tr[data-skill='changer']").count() == 0
    with owner.http() as client:
        assert client.get("/api/skills/changer").status_code == 404
    built_in = page.locator("#skills tr:has(.read-only)").first.get_attribute("data-skill")
    page.goto(f"{owner.url}/#/skills/{built_in}")
    page.wait_for_selector("main[data-ready=skills] #skill-actions")
    assert page.locator("#delete-skill, #replace-form").count() == 0  # read-only: neither


def test_the_favicon_is_an_svg_linked_from_the_page(page: Any, console: Fleet) -> None:
    signed_in(page, console)
    href = page.get_attribute("link[rel=icon]", "href")
    with httpx.Client(verify=TLS, base_url=console.url) as bare:
        icon = bare.get(href)
    assert icon.status_code == 200
    assert icon.headers["content-type"].startswith("image/svg+xml")
    assert icon.text.lstrip().startswith("<svg")

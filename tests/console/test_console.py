"""The owner console in a real browser against a real fleet: approvals, runs and skills."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from browsing import (  # fixtures and helpers
    APPROVAL_SECONDS,
    NODE,
    READ_NODE,
    TICKER,
    browser,
    call_script,
    console,
    import_owned,
    page,
    propose_edit,
    run_frames,
    signed_in,
)
from factories import skill_files, zip_bytes
from fleet import NODE_ISOLATION, Fleet, wait_until

from store.lifecycle.calls import OPEN_STATES

pytestmark = pytest.mark.timeout(180)


def test_an_approval_appears_live_is_approved_and_its_run_streams_to_the_end(
    page: Any, console: Fleet
) -> None:
    signed_in(page, console)
    assert "Nothing is waiting" in page.inner_text("#approvals")

    started = time.monotonic()
    envelope = call_script(console, "changer", count=6, every=0.4)
    card = page.wait_for_selector(f"article[data-approval-id='{envelope['approval_id']}']")
    latency = time.monotonic() - started
    assert envelope["status"] == "pending_approval"
    # The page never polls for approvals, so the card came over the event feed. How soon is a
    # figure (target APPROVAL_SECONDS), not a bar a loaded machine could miss.
    target = APPROVAL_SECONDS * 1000
    print(f"\napproval reached the console {latency * 1000:.0f} ms after the call ({target=})")

    text = card.inner_text()
    with console.http() as client:
        skill_hash = client.get("/api/skills/changer").json()["hash"]
    assert "run_skill_script" in text and "change" in text
    assert f"changer@{skill_hash[:8]}" in text
    assert f"on {NODE}" in text
    assert '"count": 6' in card.inner_text()  # the exact arguments
    assert "scripts/tick.py" in card.query_selector(".warning").inner_text()
    buttons = [b.inner_text() for b in card.query_selector_all("button")]
    assert buttons == ["Approve once", "Approve for this chat", "Deny"]
    assert page.inner_text("#pending-count") == "1"

    card.query_selector("button:text('Approve once')").click()
    page.wait_for_selector(
        f"article[data-approval-id='{envelope['approval_id']}']", state="detached"
    )
    assert page.is_hidden("#pending-count")

    run_id = wait_until(
        lambda: console.http().get(f"/api/calls/{envelope['call_id']}").json().get("run_id"),
        10,
        "the approved call's run",
    )
    page.get_by_role("link", name="Runs").click()
    page.click(f"tr[data-run-id='{run_id}'] a")
    page.wait_for_selector("main[data-ready=runs] #run-facts")
    page.locator("#output", has_text="line 1").wait_for()
    assert page.get_attribute("#run-facts", "data-status") == "running"  # output came in live
    page.wait_for_selector("#run-facts[data-status=succeeded]", timeout=30_000)
    output = page.inner_text("#output")
    assert "line 0\nline 1\nline 2\nline 3\nline 4\nline 5" in output
    assert "done" in page.inner_text("#output .stderr")
    facts = page.inner_text("#run-facts")
    assert "Exit code\n0" in facts and f"Node\n{NODE}" in facts
    assert f"Isolation\n{NODE_ISOLATION}" in facts and skill_hash in facts
    assert page.is_hidden("#cancel")


def test_a_running_script_is_cancelled_from_its_page(page: Any, console: Fleet) -> None:
    envelope = call_script(console, "ticker", count=200, every=0.2)
    assert envelope["status"] == "running", envelope
    signed_in(page, console)

    page.goto(f"{console.url}/#/runs/{envelope['run_id']}")
    page.locator("#output", has_text="line 0").wait_for()
    page.once("dialog", lambda dialog: dialog.accept())  # "Cancel run …?"
    page.get_by_role("button", name="Cancel").click()

    page.wait_for_selector("#run-facts[data-status=cancelled]", timeout=20_000)
    assert page.is_hidden("#cancel")
    with console.http() as client:
        assert client.get(f"/api/runs/{envelope['run_id']}").json()["status"] == "cancelled"


def test_the_run_page_resumes_from_last_event_id_after_its_stream_drops(
    page: Any, console: Fleet
) -> None:
    envelope = call_script(console, "ticker", count=6)
    run_id = envelope["run_id"]
    with console.http() as client:
        wait_until(
            lambda: client.get(f"/api/runs/{run_id}").json()["status"] == "succeeded",
            30,
            "the run to finish",
        )
        frames = run_frames(client, run_id)
    cut = next(i for i, (_id, text) in enumerate(frames) if "line 1" in text) + 1
    asked_after: list[str | None] = []

    def drop_after_line_1(route: Any) -> None:
        asked_after.append(route.request.headers.get("last-event-id"))
        if len(asked_after) == 1:  # the first connection ends early, as a dropped one does
            body = "".join(text for _id, text in frames[:cut])
            route.fulfill(status=200, headers={"Content-Type": "text/event-stream"}, body=body)
        else:
            route.continue_()

    page.route(f"**/api/runs/{run_id}/events", drop_after_line_1)
    signed_in(page, console)
    page.goto(f"{console.url}/#/runs/{run_id}")

    page.locator("#stream-state", has_text="ended").wait_for(timeout=15_000)
    assert asked_after == [None, frames[cut - 1][0]]
    assert page.inner_text("#output") == "line 0\nline 1\nline 2\nline 3\nline 4\nline 5\ndone\n"


def test_the_runs_list_filters_by_status(page: Any, console: Fleet) -> None:
    signed_in(page, console)
    page.goto(f"{console.url}/#/runs")
    page.wait_for_selector("main[data-ready=runs] #runs table")
    page.select_option("select[name=status]", "cancelled")
    page.locator("#runs tbody tr", has_text="cancelled").first.wait_for()
    wait_until(
        lambda: page.locator("#runs tbody tr").filter(has_not_text="cancelled").count() == 0,
        10,
        "only cancelled runs",
    )
    assert "Page 1 of" in page.inner_text(".pager")


def test_a_skill_zip_is_imported_through_the_page_and_a_bad_one_shows_the_api_message(
    page: Any, console: Fleet
) -> None:
    signed_in(page, console)
    page.goto(f"{console.url}/#/skills")
    page.wait_for_selector("main[data-ready=skills] #skills table")
    name = f"uploaded-{uuid.uuid4().hex[:6]}"
    data = zip_bytes(skill_files(name, metadata=READ_NODE), top=name)

    page.set_input_files("#skill-zip", {"name": f"{name}.zip", "mimeType": "application/zip",
                                         "buffer": data})  # fmt: skip
    page.get_by_role("button", name="Import zip").click()

    page.wait_for_selector(f"tr[data-skill='{name}']")
    assert f"Imported {name}@" in page.inner_text(".notice")
    with console.http() as client:
        assert client.get(f"/api/skills/{name}").status_code == 200

    broken = zip_bytes({"SKILL.md": b"---\nname: Not Valid\n---\n"}, top="broken")
    page.set_input_files("#skill-zip", {"name": "broken.zip", "mimeType": "application/zip",
                                         "buffer": broken})  # fmt: skip
    page.get_by_role("button", name="Import zip").click()
    page.wait_for_selector("#error:not([hidden])")
    assert "(skill_invalid)" in page.inner_text("#error")

    page.click(f"tr[data-skill='{name}'] a")
    page.wait_for_selector("main[data-ready=skills] #file")
    assert f"name: {name}" in page.inner_text("#file")  # SKILL.md is shown
    page.get_by_role("link", name="← Skills").click()
    page.click(f"tr[data-skill='{name}'] button")  # Disable, sending the hash shown
    page.locator(f"tr[data-skill='{name}']", has_text="disabled").wait_for()


def test_a_skill_is_imported_from_a_github_folder_through_the_page(
    page: Any, console: Fleet
) -> None:
    signed_in(page, console)
    page.goto(f"{console.url}/#/skills")
    page.wait_for_selector("main[data-ready=skills] #skills table")

    # A folder holding a symlink: refused, with the API's message, and nothing imported.
    unsafe = "https://github.com/octo/skills/tree/main/skills/linked"
    page.fill("#github-url", unsafe)
    page.get_by_role("button", name="Import from GitHub").click()
    banner = page.wait_for_selector("#error:not([hidden])")
    with console.http() as client:
        refused = client.post("/api/skills", json={"github": unsafe})
        assert refused.status_code == 422, refused.text
        assert client.get("/api/skills/linked").status_code == 404
    assert refused.json()["message"] in banner.inner_text()
    assert "(archive_unsafe)" in banner.inner_text()

    url = "https://github.com/octo/skills/tree/main/skills/demo"
    page.fill("#github-url", url)
    page.get_by_role("button", name="Import from GitHub").click()
    row = page.wait_for_selector("tr[data-skill='demo']")
    assert "github" in row.inner_text()
    with console.http() as client:
        skill = client.get("/api/skills/demo").json()
        script = client.get("/api/skills/demo/files/scripts/run.py").text
    assert skill["source"] == "github" and skill["origin"] == url
    assert script == "print('hi')\n"  # the stand-in's file
    assert f"Imported demo@{skill['hash'][:8]} (4 files" in page.inner_text(".notice")


def card_diff(card: Any) -> list[str]:
    return [line.inner_text().removesuffix("\n") for line in card.query_selector_all(".diff .line")]


def test_an_edit_approval_card_shows_the_diff_and_approving_it_applies_the_edit(
    page: Any, console: Fleet
) -> None:
    skill = f"tidy-{uuid.uuid4().hex[:4]}"
    before = import_owned(console, skill)
    signed_in(page, console)
    asked = propose_edit(console, skill, "print('ok')\n")  # an agent's edit_skill call

    card = page.wait_for_selector(f"article[data-approval-id='{asked['approval_id']}']")
    with console.http() as client:
        shown = client.get(f"/api/approvals/{asked['approval_id']}").json()
    assert "edit_skill" in card.inner_text()
    lines = card_diff(card)
    assert lines == shown["diff"].split("\n")
    assert "--- a/scripts/tick.py" in lines and "+++ b/scripts/tick.py" in lines
    assert "+print('ok')" in lines
    assert [f"-{line}" for line in TICKER.splitlines()] == [
        line for line in lines if line.startswith("-") and not line.startswith("---")
    ]
    added = [span.inner_text() for span in card.query_selector_all(".diff .line.add")]
    removed = [span.inner_text() for span in card.query_selector_all(".diff .line.del")]
    assert added == ["+print('ok')\n"] and "-import json, os, sys, time\n" in removed
    buttons = [b.inner_text() for b in card.query_selector_all("button")]
    assert buttons == ["Approve once", "Deny"]  # an edit is never granted for the chat

    card.query_selector("button:text('Approve once')").click()
    page.wait_for_selector(f"article[data-approval-id='{asked['approval_id']}']", state="detached")

    # The card goes with the feed's news of the answer, which may come before the answer's own
    # request has applied the edit: the call ends once it has.
    def ended_call() -> dict[str, Any] | None:
        with console.http() as client:
            call = client.get(f"/api/calls/{asked['call_id']}").json()
        return call if call["status"] not in OPEN_STATES else None

    call = wait_until(ended_call, 10, "the approved edit's call to end")
    with console.http() as client:
        after = client.get(f"/api/skills/{skill}").json()
        script = client.get(f"/api/skills/{skill}/files/scripts/tick.py").text
    assert call["status"] == "done", call
    assert after["hash"] != before["hash"]
    assert script == "print('ok')\n"


def test_a_destructive_card_offers_no_approval_for_the_chat_and_a_change_card_does(
    page: Any, console: Fleet
) -> None:
    wiper = f"wiper-{uuid.uuid4().hex[:4]}"
    destructive = {"skillfleet.tier": "destructive", "skillfleet.execution": "node"}
    console.import_skill(wiper, destructive, {"scripts/tick.py": TICKER})
    signed_in(page, console)
    dangerous = call_script(console, wiper, count=1)
    changing = call_script(console, "changer", count=1)
    assert dangerous["status"] == changing["status"] == "pending_approval"

    cards = {
        asked["approval_id"]: page.wait_for_selector(
            f"article[data-approval-id='{asked['approval_id']}']"
        )
        for asked in (dangerous, changing)
    }
    danger_card, change_card = cards[dangerous["approval_id"]], cards[changing["approval_id"]]
    assert "destructive" in danger_card.query_selector(".tier").inner_text()
    assert "change" in change_card.query_selector(".tier").inner_text()
    buttons = [b.inner_text() for b in danger_card.query_selector_all("button")]
    assert buttons == ["Approve once", "Deny"]
    buttons = [b.inner_text() for b in change_card.query_selector_all("button")]
    assert buttons == ["Approve once", "Approve for this chat", "Deny"]

    for asked in (dangerous, changing):
        card = page.locator(f"article[data-approval-id='{asked['approval_id']}']")
        card.get_by_role("button", name="Deny").click()
        card.get_by_role("button", name="Deny call").click()  # no reason given
        card.wait_for(state="detached")
    with console.http() as client:
        for asked in (dangerous, changing):
            approval = client.get(f"/api/approvals/{asked['approval_id']}").json()
            assert approval["status"] == "denied"

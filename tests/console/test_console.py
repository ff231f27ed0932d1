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
    browser,
    call_script,
    console,
    page,
    run_frames,
    signed_in,
)
from factories import skill_files, zip_bytes
from fleet import Fleet, wait_until

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
    assert latency <= APPROVAL_SECONDS, f"the approval took {latency:.2f} s to appear"
    print(f"\napproval reached the console {latency * 1000:.0f} ms after the call")

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
    assert "Isolation\nprocess" in facts and skill_hash in facts
    assert page.is_hidden("#cancel")


def test_a_running_script_is_cancelled_from_its_page(page: Any, console: Fleet) -> None:
    envelope = call_script(console, "ticker", count=200, every=0.2)
    assert envelope["status"] == "running", envelope
    signed_in(page, console)

    page.goto(f"{console.url}/#/runs/{envelope['run_id']}")
    page.locator("#output", has_text="line 0").wait_for()
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

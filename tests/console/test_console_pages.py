"""The owner console in a real browser: signing in, the other pages, phones, speed, pictures.

`make screenshots` runs the last test with SKILLFLEET_SCREENSHOTS set to write a picture of
every page under docs/img/.
"""

from __future__ import annotations

import os
import statistics
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from browsing import (  # fixtures and helpers
    FIRST_PAGE_MS,
    NODE,
    PHONE,
    READ_NODE,
    TICKER,
    browser,
    call_script,
    call_tool,
    console,
    first_page_ms,
    page,
    sign_in,
    signed_in,
    ticker_job,
    with_control_worker,
)
from fleet import Fleet, wait_until
from sqlalchemy import delete
from toolcalls import draft_arguments

from store.cron import next_time
from store.db import transaction
from store.models import ApiToken, Node
from store.tokens import Role, create_node_token, create_owner_token, create_token, token_digest

pytestmark = pytest.mark.timeout(180)


def test_a_node_token_cannot_sign_in(page: Any, console: Fleet) -> None:
    with transaction(console.services.sessions) as session:
        if session.get(Node, "signin-probe") is None:
            session.add(Node(name="signin-probe"))
        node_token = create_node_token(session, "signin-probe")

    sign_in(page, console, node_token)

    alert = page.wait_for_selector("form.sign-in .error:not([hidden])")
    assert "needs an owner token" in alert.inner_text()
    assert page.is_hidden("#nav")


def test_a_wrong_token_gets_the_apis_message(page: Any, console: Fleet) -> None:
    sign_in(page, console, "sf_not_a_token")
    alert = page.wait_for_selector("form.sign-in .error:not([hidden])")
    assert "The bearer token is not valid." in alert.inner_text()


def test_a_token_revoked_while_signed_in_sends_the_tab_back_to_sign_in(
    page: Any, console: Fleet
) -> None:
    with transaction(console.services.sessions) as session:
        doomed = create_owner_token(session, f"revoked-{uuid.uuid4().hex[:6]}")
    sign_in(page, console, doomed)
    page.wait_for_selector("main[data-ready=approvals]")

    with transaction(console.services.sessions) as session:
        session.execute(delete(ApiToken).where(ApiToken.token_hash == token_digest(doomed)))
    headers = {"Authorization": f"Bearer {doomed}"}
    wait_until(  # the API forgets a deleted token within a few seconds
        lambda: httpx.get(f"{console.url}/api/settings", headers=headers).status_code == 401,
        15,
        "the deleted token to be refused",
    )
    page.get_by_role("link", name="Runs").click()

    alert = page.wait_for_selector("form.sign-in .error:not([hidden])")
    assert "The bearer token is not valid." in alert.inner_text()
    assert page.evaluate("sessionStorage.getItem('skillfleet.owner-token')") is None


def test_an_agent_token_cannot_sign_in(page: Any, console: Fleet) -> None:
    with transaction(console.services.sessions) as session:
        agent = create_token(session, "agent-owner", Role.AGENT)

    sign_in(page, console, agent)

    alert = page.wait_for_selector("form.sign-in .error:not([hidden])")
    assert "This is an agent token" in alert.inner_text()


def test_the_jobs_review_and_tokens_pages_load_from_their_routes(page: Any, console: Fleet) -> None:
    signed_in(page, console)
    for route in ("jobs", "review", "tokens"):
        page.goto(f"{console.url}/#/{route}")
        main = page.wait_for_selector(f"main[data-ready={route}]")
        assert "Not available on this server" not in main.inner_text(), route
        assert page.is_hidden("#error"), (route, page.inner_text("#error"))
    page.goto(f"{console.url}/#/skills/no-such-skill")
    page.wait_for_selector("#error:not([hidden])")
    assert "no-such-skill" in page.inner_text("#error")


def test_the_nodes_page_shows_the_heartbeat_and_asks_for_a_sync(page: Any, console: Fleet) -> None:
    signed_in(page, console)
    page.goto(f"{console.url}/#/nodes")
    row = page.wait_for_selector(f"tr[data-node='{NODE}']")
    assert "alive" in row.inner_text() and "skills" in row.inner_text()
    row.query_selector("button").click()
    page.wait_for_selector(".notice:not([hidden])")
    assert f"Asked {NODE} to sync; 1 agent(s) listening." in page.inner_text(".notice")


def test_the_cron_preview_gives_the_next_five_times_in_the_jobs_time_zone(
    page: Any, console: Fleet
) -> None:
    page.goto(console.url + "/")
    times = page.evaluate(
        """async () => {
            const cron = await import("/console/cron.js");
            const from = new Date("2026-03-26T12:00:00Z");
            const times = cron.nextTimes("0 6 * * 1-5", "Europe/Berlin", 5, from);
            return times.map((t) => t.toISOString());
        }"""
    )
    # Summer time starts in Berlin on Sunday 29 March 2026: 06:00 moves from 05:00 to 04:00 UTC.
    assert times == [
        "2026-03-27T05:00:00.000Z",
        "2026-03-30T04:00:00.000Z",
        "2026-03-31T04:00:00.000Z",
        "2026-04-01T04:00:00.000Z",
        "2026-04-02T04:00:00.000Z",
    ]
    refused = page.evaluate(
        """async () => {
            const cron = await import("/console/cron.js");
            try {
                cron.nextTimes("61 * * * *", "UTC");
                return null;
            } catch (e) {
                return e.message;
            }
        }"""
    )
    assert refused == "'61' is outside minute 0–59."


# Around daylight saving time changes, the preview must say what the server will do.
DST_CASES = [
    ("30 2 * * *", "Europe/Berlin", "2026-03-27T12:00:00+00:00"),  # a time in the spring gap
    ("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00+00:00"),  # a time the autumn repeats
    ("30 0 * * 1", "Europe/Berlin", "2026-03-27T12:00:00+00:00"),  # a day skipped over the gap
    ("*/20 2 * * *", "America/New_York", "2026-03-07T12:00:00+00:00"),
    ("0 9 * * 1", "America/New_York", "2026-10-20T12:00:00+00:00"),
    ("45 1 29 3 *", "Europe/London", "2026-03-01T00:00:00+00:00"),
    ("15 3 * * 0", "Australia/Sydney", "2026-03-30T00:00:00+00:00"),
]


def test_the_cron_preview_agrees_with_the_server_around_dst_changes(
    page: Any, console: Fleet
) -> None:
    page.goto(console.url + "/")
    for cron, zone, start in DST_CASES:
        shown = page.evaluate(
            """async ([cron, zone, start]) => {
                const module = await import("/console/cron.js");
                return module.nextTimes(cron, zone, 5, new Date(start)).map((t) => t.getTime());
            }""",
            [cron, zone, start],
        )
        expected = [next_time(cron, zone, datetime.fromisoformat(start))]
        while len(expected) < 5:
            expected.append(next_time(cron, zone, expected[-1]))
        as_ms = [int(t.timestamp() * 1000) for t in expected]
        assert shown == as_ms, (cron, zone, start)


def test_at_a_phones_width_nothing_overflows_sideways(browser: Any, console: Fleet) -> None:
    context = browser.new_context(viewport=PHONE, is_mobile=True)
    phone = context.new_page()
    try:
        signed_in(phone, console)
        for route in ("approvals", "runs", "skills", "nodes"):
            phone.goto(f"{console.url}/#/{route}")
            phone.wait_for_selector(f"main[data-ready={route}]")
            width = phone.evaluate("document.documentElement.scrollWidth")
            assert width <= PHONE["width"], f"{route} is {width} px wide"
    finally:
        context.close()


def test_the_first_page_marks_when_it_is_usable(browser: Any, console: Fleet) -> None:
    # The figure (target: FIRST_PAGE_MS) goes to docs/benchmarks.md; timing thresholds don't
    # belong in tests on a shared, noisy machine, so this checks the measurement itself.
    first_page_ms(browser, console)  # warm the server's code paths once
    times = [first_page_ms(browser, console) for _ in range(3)]
    median = statistics.median(times)
    print(f"\nfirst page usable after {median:.0f} ms (target {FIRST_PAGE_MS} ms; {times})")
    assert all(0 < t < 60_000 for t in times)


SCREENSHOTS = os.environ.get("SKILLFLEET_SCREENSHOTS")


@pytest.mark.skipif(not SCREENSHOTS, reason="`make screenshots` sets SKILLFLEET_SCREENSHOTS")
def test_screenshots_of_every_page(page: Any, console: Fleet) -> None:
    folder = Path(str(SCREENSHOTS))
    folder.mkdir(parents=True, exist_ok=True)
    page.goto(console.url + "/")
    page.wait_for_selector("main[data-ready=sign-in]")
    page.screenshot(path=str(folder / "console-sign-in.png"))
    signed_in(page, console)
    finished = call_script(console, "ticker", count=4)
    wait_until(
        lambda: (
            console.http().get(f"/api/runs/{finished['run_id']}").json()["status"] == "succeeded"
        ),
        30,
        "the sample run",
    )
    asked = call_script(console, "changer", count=2)
    page.wait_for_selector(f"article[data-approval-id='{asked['approval_id']}']")
    page.screenshot(path=str(folder / "console-approvals.png"), full_page=True)
    shots = {
        "runs": "#/runs",
        "run": f"#/runs/{finished['run_id']}",
        "skills": "#/skills",
        "skill": "#/skills/ticker",
        "nodes": "#/nodes",
        "settings": "#/settings",
    }
    for name, route in shots.items():
        page.goto(f"{console.url}/{route}")
        page.wait_for_selector(f"main[data-ready={route.split('/')[1]}]")
        if name == "run":
            page.wait_for_selector("#run-facts[data-status=succeeded]")
        page.screenshot(path=str(folder / f"console-{name}.png"), full_page=True)

    # Jobs: a job with a finished run in its history, and the editor's cron preview.
    with_control_worker(console)
    report = ticker_job("morning disk report", "30 7 * * 1-5", "Europe/Berlin")
    tidy = {**ticker_job("weekly tidy", "0 3 * * 0"), "enabled": False}
    with console.http() as client:
        job = client.post("/api/jobs", json=report).json()
        client.post("/api/jobs", json=tidy)
        client.post(f"/api/jobs/{job['id']}/run")
    page.goto(f"{console.url}/#/jobs")
    page.wait_for_selector("main[data-ready=jobs]")
    page.locator(f"tr[data-job-id='{job['id']}']").get_by_role("button", name="History").click()
    page.wait_for_selector("#job-history tr[data-status=succeeded]", timeout=60_000)
    page.screenshot(path=str(folder / "console-jobs.png"), full_page=True)
    page.locator(f"tr[data-job-id='{job['id']}']").get_by_role("button", name="Edit").click()
    page.wait_for_selector("#cron-preview li:nth-child(5)")
    page.locator("#job-editor").screenshot(path=str(folder / "console-job-editor.png"))

    # Review: an agent's draft and an edit plan, each with what it would write.
    draft = draft_arguments(
        "disk-usage",
        description="Shows how full a server's disks are. Use it for disk space questions.",
        body="# Disk usage\n\nRun scripts/usage.sh with the server in `node`.\n",
        files={"scripts/usage.sh": "#!/bin/bash\nset -eu\ndf -h /\n"},
        rationale="In chat-17 the owner asked for disk usage on web01 and no skill could answer.",
    )
    call_tool(console, "draft_skill", draft)
    console.import_skill("log-tail", READ_NODE, {"scripts/tick.py": TICKER})
    capped = TICKER.replace("range(args.get('count', 3))", "range(min(args.get('count', 3), 50))")
    change = {
        "skill_name": "log-tail",
        "changes": {"files": {"scripts/tick.py": capped}},
        "rationale": "Cap the lines printed at 50, so a typo can't flood the chat.",
    }
    edit = call_tool(console, "edit_skill", change)
    page.goto(f"{console.url}/#/review")
    page.wait_for_selector(f"article[data-approval-id='{edit['approval_id']}']")
    page.wait_for_selector("article[data-draft='disk-usage']")
    page.screenshot(path=str(folder / "console-review.png"), full_page=True)

    # Tokens: a new agent token, shown once, above the list.
    page.goto(f"{console.url}/#/tokens")
    page.wait_for_selector("main[data-ready=tokens]")
    page.fill("#token-label", "laptop agent")
    page.get_by_role("button", name="Create agent token").click()
    page.wait_for_selector("#new-token .secret")
    page.wait_for_selector("#tokens td:has-text('laptop agent')")
    page.screenshot(path=str(folder / "console-tokens.png"), full_page=True)

    page.set_viewport_size(PHONE)
    page.goto(f"{console.url}/#/approvals")
    page.wait_for_selector(f"article[data-approval-id='{asked['approval_id']}']")
    page.screenshot(path=str(folder / "console-phone.png"))
    with console.http() as client:
        for approval in (asked, edit):
            client.post(f"/api/approvals/{approval['approval_id']}", json={"decision": "deny"})

"""The owner console in a real browser against a real fleet (API, Redis, a node worker).

Playwright drives Debian's Chromium (`/usr/bin/chromium`); browsers are never downloaded.
Without it these tests skip, and fail in CI. `make screenshots` runs the last test with
SKILLFLEET_SCREENSHOTS set to write a picture of every page under docs/img/.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import IN_CI, REDIS_URL
from factories import skill_files, zip_bytes
from fleet import Fleet, fleet, wait_until
from sqlalchemy import delete

from skillfleet.settings import Settings
from store.db import transaction
from store.models import ApiToken, Node
from store.tokens import create_node_token, create_owner_token, token_digest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
# The console's bar: its first page usable this soon after navigation; approvals this soon.
FIRST_PAGE_MS = 300
NODE = f"c-{uuid.uuid4().hex[:6]}"
APPROVAL_SECONDS = 1.0

CHANGE_NODE = {"skillfleet.tier": "change", "skillfleet.execution": "node"}
READ_NODE = {"skillfleet.tier": "read", "skillfleet.execution": "node"}
TICKER = (
    "import json, os, sys, time\n"
    "args = json.loads(os.environ['SKILLFLEET_ARGS'])\n"
    "for i in range(args.get('count', 3)):\n"
    "    print(f'line {i}', flush=True)\n"
    "    time.sleep(args.get('every', 0))\n"
    "print('done', file=sys.stderr)\n"
)

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} is missing: install Debian's chromium package"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    """The API (which serves the console) and one node worker, on SQLite and the test Redis."""
    root = tmp_path_factory.mktemp("console")
    database = root / "skillfleet.db"
    shutil.copy(sqlite_template, database)
    settings = Settings(
        data_dir=root / "var",
        database_url=f"sqlite:///{database}",
        redis_url=REDIS_URL,
        run_timeout=60,
    )
    with fleet(settings) as started:
        started.start_node(NODE)
        started.import_skill("ticker", READ_NODE, {"scripts/tick.py": TICKER})
        started.import_skill("changer", CHANGE_NODE, {"scripts/tick.py": TICKER})
        yield started


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport=DESKTOP)
    opened = context.new_page()
    yield opened
    context.close()


def sign_in(page: Any, console: Fleet, token: str | None = None) -> None:
    page.goto(console.url + "/")
    page.get_by_label("Owner token").fill(token or console.owner_token)
    page.get_by_role("button", name="Sign in").click()


def signed_in(page: Any, console: Fleet) -> None:
    sign_in(page, console)
    page.wait_for_selector("main[data-ready=approvals]")
    page.wait_for_selector("#live.live-open")  # the event feed is connected


def call_script(console: Fleet, skill: str, **arguments: object) -> dict[str, Any]:
    body = {
        "arguments": {
            "skill_name": skill,
            "script": "scripts/tick.py",
            "arguments": {"node": NODE, **arguments},
        },
        "chat_id": "console-chat",
    }
    with console.http() as client:
        response = client.post("/api/tools/run_skill_script", json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


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


def run_frames(client: Any, run_id: str) -> list[tuple[str, str]]:
    """Every SSE frame of a finished run: (event id, frame text)."""
    frames = []
    with client.stream("GET", f"/api/runs/{run_id}/events") as response:
        fields: dict[str, str] = {}
        for line in response.iter_lines():
            if line:
                key, _, value = line.partition(": ")
                fields[key] = value
                continue
            if "id" in fields:
                text = "".join(f"{key}: {value}\n" for key, value in fields.items()) + "\n"
                frames.append((fields["id"], text))
                if fields.get("event") == "exit":
                    break
            fields = {}
    return frames


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


@pytest.mark.xfail(
    reason="agent tokens (token roles) are not in this server yet; GET /api/settings "
    "answers 403 owner_only for them once they are",
    strict=False,
)
def test_an_agent_token_cannot_sign_in(page: Any, console: Fleet) -> None:
    with transaction(console.services.sessions) as session:
        agent = create_owner_token(session, "agent-owner", role="agent")  # type: ignore[call-arg]

    sign_in(page, console, agent)

    alert = page.wait_for_selector("form.sign-in .error:not([hidden])")
    assert "This is an agent token" in alert.inner_text()


def test_pages_whose_routes_are_missing_say_so_instead_of_going_blank(
    page: Any, console: Fleet
) -> None:
    signed_in(page, console)
    for route, title in (("jobs", "Jobs"), ("review", "Review"), ("tokens", "Tokens")):
        page.goto(f"{console.url}/#/{route}")
        panel = page.wait_for_selector(f"main[data-ready={route}] .unavailable")
        if "Not available on this server" not in panel.inner_text():
            pytest.fail(f"{title}: {panel.inner_text()}")
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


def first_page_ms(browser: Any, console: Fleet) -> float:
    """Milliseconds from navigation to the approvals page with its data, in a signed-in tab."""
    context = browser.new_context(viewport=DESKTOP)
    opened = context.new_page()
    try:
        opened.goto(console.url + "/console/console.css")  # same origin, to set the tab's token
        opened.evaluate(
            "token => sessionStorage.setItem('skillfleet.owner-token', token)", console.owner_token
        )
        opened.goto(console.url + "/")
        opened.wait_for_selector("main[data-ready=approvals]")
        ready: float = opened.evaluate("performance.getEntriesByName('console-ready')[0].startTime")
        return ready
    finally:
        context.close()


def test_the_first_page_is_usable_within_300_ms(browser: Any, console: Fleet) -> None:
    first_page_ms(browser, console)  # warm the server's code paths once
    times = [first_page_ms(browser, console) for _ in range(9)]
    median = statistics.median(times)
    print(f"\nfirst page usable after {median:.0f} ms (median of {[round(t) for t in times]})")
    assert median <= FIRST_PAGE_MS


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
        "jobs": "#/jobs",
        "review": "#/review",
        "tokens": "#/tokens",
    }
    for name, route in shots.items():
        page.goto(f"{console.url}/{route}")
        page.wait_for_selector(f"main[data-ready={route.split('/')[1]}]")
        if name == "run":
            page.wait_for_selector("#run-facts[data-status=succeeded]")
        page.screenshot(path=str(folder / f"console-{name}.png"), full_page=True)
    page.set_viewport_size(PHONE)
    page.goto(f"{console.url}/#/approvals")
    page.wait_for_selector(f"article[data-approval-id='{asked['approval_id']}']")
    page.screenshot(path=str(folder / "console-phone.png"))
    with console.http() as client:
        client.post(f"/api/approvals/{asked['approval_id']}", json={"decision": "deny"})

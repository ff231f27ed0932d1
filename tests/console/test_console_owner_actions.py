"""What the owner acts on in the console, in a real browser against a real fleet.

An approval says who asked and approves a job's call for the job; an answered one leads to its
call and run; Cancel asks first; Review counts what waits; a skill's page shows its review
warnings and switches it (never a built-in); the Skills table stays readable with 200
descriptions as long as real ones; a phone's width labels every value; the job editor offers
only what a job can be granted. Each test works as an owner of its own.
"""

from __future__ import annotations

import io
import uuid
from pathlib import Path
from typing import Any

import pytest
from browsing import (  # fixtures and helpers
    CHANGE_NODE,
    NODE,
    PHONE,
    READ_NODE,
    TICKER,
    browser,
    call_tool,
    console,
    page,
    propose_edit,
    signed_in,
)
from factories import skill_files, zip_bytes
from fleet import Fleet, wait_until
from toolcalls import draft_arguments

from relay.streams import read_events

pytestmark = pytest.mark.timeout(240)

WIPE_NODE = {"skillfleet.tier": "destructive", "skillfleet.execution": "node"}
PDF = Path(__file__).parent.parent / "fixtures" / "public-skills" / "pdf"
# Sentences as public skills write them; descriptions are cut from them at lengths up to the
# 1,024 characters a description may have.
PROSE = (
    "Extract text and tables from PDF files, fill PDF forms, merge and split documents and "
    "read their metadata. Use when the user mentions a PDF, a form to fill, or a scanned "
    "document that needs its text; also when asked to combine several reports into one file, "
    "to rotate pages, to add a watermark or to check which fields of a form are fillable. "
)


def mine(console: Fleet) -> Fleet:
    """The fleet as an owner of this test's own, with the change skill `changer`."""
    owned = console.with_new_owner()
    owned.import_skill("changer", CHANGE_NODE, {"scripts/tick.py": TICKER})
    return owned


def ask(fleet: Fleet, skill: str = "changer", **where: str | bool) -> dict[str, Any]:
    """A script call that waits for the owner: in a chat (chat_id, turn_id) or a job run."""
    arguments = {"skill_name": skill, "script": "scripts/tick.py",
                 "arguments": {"node": NODE, "count": 2}}  # fmt: skip
    with fleet.http() as client:
        response = client.post(
            "/api/tools/run_skill_script", json={"arguments": arguments, **where}
        )
    assert response.status_code == 200, response.text
    asked = dict(response.json())
    assert asked["status"] == "pending_approval", asked
    return asked


def job_run(fleet: Fleet, name: str, skills: list[str]) -> tuple[str, str]:
    """A job and one run of it (no control worker runs here: the run stays queued)."""
    job = {"name": name, "cron": "0 3 * * *", "steps": [{"tool": "list_skills"}], "skills": skills}
    with fleet.http() as client:
        job_id = client.post("/api/jobs", json=job).json()["id"]
        return job_id, client.post(f"/api/jobs/{job_id}/run").json()["job_run_id"]


def open_route(page: Any, fleet: Fleet, route: str) -> None:
    signed_in(page, fleet)
    page.goto(f"{fleet.url}/#/{route}")
    page.wait_for_selector(f"main[data-ready={route.split('/')[0]}]")


def buttons(card: Any) -> list[str]:
    return [button.inner_text() for button in card.query_selector_all("button")]


def test_a_card_says_which_chat_and_turn_asked_and_a_jobs_card_approves_for_the_job(
    page: Any, console: Fleet
) -> None:
    owner = mine(console)
    signed_in(page, owner)
    in_chat = ask(owner, chat_id="support-42", turn_id="t-7")
    job_id, run_id = job_run(owner, "nightly report", ["changer"])
    in_job = ask(owner, job_run_id=run_id)

    chat_card = page.wait_for_selector(f"article[data-approval-id='{in_chat['approval_id']}']")
    assert "Asked by chat support-42, turn t-7" in chat_card.inner_text()
    assert buttons(chat_card) == ["Approve once", "Approve for this chat", "Deny"]
    job_card = page.wait_for_selector(f"article[data-approval-id='{in_job['approval_id']}']")
    assert f"Asked by job nightly report, run {run_id[:8]}" in job_card.inner_text()
    assert buttons(job_card) == ["Approve once", "Approve for this job", "Deny"]

    job_card.query_selector("button:text('Approve for this job')").click()
    page.wait_for_selector(f"article[data-approval-id='{in_job['approval_id']}']", state="detached")
    with owner.http() as client:
        skill_hash = client.get("/api/skills/changer").json()["hash"]
        grants = client.get(f"/api/jobs/{job_id}").json()["grants"]
        approval = client.get(f"/api/approvals/{in_job['approval_id']}").json()
    assert grants["skills"] == [f"changer@{skill_hash}"]  # the job's, at the full hash
    assert approval["status"] == "approved_for_chat" and approval["grant_scope"] == "job"
    row = page.locator(f"#answered tr[data-approval-id='{in_job['approval_id']}']")
    row.wait_for()
    assert "approved for job" in row.inner_text()
    assert f"nightly report, run {run_id[:8]}" in row.inner_text()


def test_an_answered_approval_leads_to_its_call_and_run_and_the_run_back_to_them(
    page: Any, console: Fleet
) -> None:
    owner = mine(console)
    signed_in(page, owner)
    asked = ask(owner, chat_id="support-7", turn_id="t-1")
    card = page.wait_for_selector(f"article[data-approval-id='{asked['approval_id']}']")
    card.query_selector("button:text('Approve once')").click()

    row = f"#answered tr[data-approval-id='{asked['approval_id']}']"
    page.wait_for_selector(f"{row} a.run-link")  # once the approved call started its run
    with owner.http() as client:
        run_id = client.get(f"/api/calls/{asked['call_id']}").json()["run_id"]
    assert page.get_attribute(f"{row} a.run-link", "href") == f"#/runs/{run_id}"
    assert "chat support-7, turn t-1" in page.inner_text(row)

    page.click(f"{row} a.call-link")
    page.wait_for_selector(f"main[data-ready=calls] #call-facts a[href='#/runs/{run_id}']")
    assert "run_skill_script" in page.inner_text("#call-facts")
    assert "Chat\nsupport-7" in page.inner_text("#call-facts")
    approval = page.inner_text("#call-approval")
    assert "chat support-7, turn t-1" in approval and "approved" in approval

    page.click(f"#call-facts a[href='#/runs/{run_id}']")
    page.wait_for_selector("#run-origin .call-link")
    origin = page.inner_text("#run-origin")
    assert "Asked by\nchat support-7, turn t-1" in origin and "approved" in origin
    assert page.get_attribute("#run-origin .call-link", "href") == f"#/calls/{asked['call_id']}"
    # The output comes first, the details below it; the link back goes to the call it came from.
    assert page.evaluate(
        "document.getElementById('output').compareDocumentPosition("
        "document.getElementById('run-facts')) & Node.DOCUMENT_POSITION_FOLLOWING"
    )
    assert page.inner_text("a.back-link") == f"← Call {asked['call_id'][:8]}"
    page.click("a.back-link")
    page.wait_for_selector(f"main[data-ready=calls] #call-facts a[href='#/runs/{run_id}']")
    assert page.inner_text("a.back-link") == "← Approvals"  # where the call was opened from


def test_cancel_asks_first_and_saying_no_leaves_the_run_running(page: Any, console: Fleet) -> None:
    owner = console.with_new_owner()
    owner.import_skill("ticker", READ_NODE, {"scripts/tick.py": TICKER})
    arguments = {"skill_name": "ticker", "script": "scripts/tick.py",
                 "arguments": {"node": NODE, "count": 600, "every": 0.2}}  # fmt: skip
    with owner.http() as client:
        started = client.post("/api/tools/run_skill_script", json={"arguments": arguments}).json()
    run_id = started["run_id"]
    cancels: list[str] = []
    page.on("request", lambda r: cancels.append(r.url) if r.url.endswith("/cancel") else None)
    # The run's first line, in its stream first: a busy machine may start the script late,
    # which is not the page's doing; then the page must show it.
    wait_until(
        lambda: any(e.kind == "stdout" for e in read_events(owner.redis, run_id)),
        90,
        "the run's first line",
    )
    open_route(page, owner, f"runs/{run_id}")
    page.locator("#output", has_text="line 0").wait_for()

    asked: list[str] = []

    def say_no(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", say_no)
    page.get_by_role("button", name="Cancel").click()
    page.wait_for_selector("#cancel:not([disabled])")  # the click's work is done
    assert asked == [f"Cancel run {run_id[:8]}? Its script is stopped where it is."]
    assert cancels == []
    with owner.http() as client:
        assert client.get(f"/api/runs/{run_id}").json()["status"] == "running"

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Cancel").click()
    page.wait_for_selector("#run-facts[data-status=cancelled]", timeout=30_000)
    assert len(cancels) == 1


def test_the_review_tab_counts_drafts_and_edit_plans_as_they_come_and_go(
    page: Any, console: Fleet
) -> None:
    owner = console.with_new_owner()
    owner.import_skill("notes", READ_NODE, {"scripts/tick.py": TICKER})
    open_route(page, owner, "runs")
    assert page.is_hidden("#review-count")

    draft = f"disk-{uuid.uuid4().hex[:4]}"
    assert call_tool(owner, "draft_skill", draft_arguments(draft))["status"] == "done"
    page.wait_for_selector("#review-count:text-is('1')")  # from the event feed
    propose_edit(owner, "notes", "print('ok')\n")
    page.wait_for_selector("#review-count:text-is('2')")

    page.get_by_role("link", name="Review").click()
    page.wait_for_selector(f"article[data-draft='{draft}']")
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator(f"article[data-draft='{draft}']").get_by_role("button", name="Discard").click()
    page.wait_for_selector("#review-count:text-is('1')")
    with owner.http() as client:
        assert client.get("/api/review").json()["needs_review"] == 1


def folder_zip(root: Path, top: str) -> bytes:
    files = {str(path.relative_to(root)): path.read_bytes() for path in root.rglob("*")
             if path.is_file()}  # fmt: skip
    return zip_bytes(files, top=top)


def test_a_skill_page_shows_its_review_warnings_and_switches_it_but_never_a_built_in(
    page: Any, console: Fleet
) -> None:
    owner = console.with_new_owner()
    with owner.http() as client:
        imported = client.post("/api/skills", files={"file": ("pdf.zip", folder_zip(PDF, "pdf"))})
        assert imported.status_code == 201, imported.text
        name = imported.json()["name"]
        lint = client.get(f"/api/skills/{name}").json()["lint_warnings"]
    assert lint, "the public pdf skill has review warnings to show"

    open_route(page, owner, f"skills/{name}")
    section = page.wait_for_selector("#lint-warnings")
    assert f"Review warnings ({len(lint)})" in section.inner_text()
    assert [item.inner_text() for item in section.query_selector_all("li")] == lint

    page.get_by_role("button", name="Disable").click()
    page.wait_for_selector("#skill-state:text-is('disabled')")
    with owner.http() as client:
        assert client.get(f"/api/skills/{name}").json()["enabled"] is False
    page.get_by_role("button", name="Enable").click()
    page.wait_for_selector("#skill-state:text-is('enabled')")
    with owner.http() as client:
        assert client.get(f"/api/skills/{name}").json()["enabled"] is True

    # A built-in answers 403 to a switch: neither its page nor its row offers one.
    page.goto(f"{owner.url}/#/skills/skill-authoring")
    page.wait_for_selector("#skill-actions .read-only")
    assert page.locator("#skill-actions button").count() == 0
    page.goto(f"{owner.url}/#/skills")
    builtin = page.wait_for_selector("tr[data-skill='skill-authoring']")
    assert builtin.query_selector("button") is None and "read-only" in builtin.inner_text()
    assert page.locator(f"tr[data-skill='{name}'] button", has_text="Disable").count() == 1


ANYWHERE = "the Spark while a Spark worker serves, else the node a call names"


def test_a_skill_page_chooses_where_it_runs_and_keeps_its_hash(page: Any, console: Fleet) -> None:
    owner = console.with_new_owner()
    imported = owner.import_skill("anywhere", {"skillfleet.tier": "read"}, {"scripts/go.py": "1\n"})

    open_route(page, owner, "skills/anywhere")
    assert page.wait_for_selector("#skill-runs-on").inner_text() == ANYWHERE
    page.select_option("#skill-execution", "spark")
    page.locator("#skill-runs-on", has_text="(your choice)").wait_for()
    assert page.inner_text("#skill-runs-on") == "the Spark (a throwaway container) (your choice)"
    with owner.http() as client:
        detail = client.get("/api/skills/anywhere").json()
    assert (detail["execution"], detail["execution_choice"]) == ("spark", "spark")
    assert detail["hash"] == imported["hash"]

    page.select_option("#skill-execution", "")
    page.locator("#skill-runs-on", has_text="while a Spark worker serves").wait_for()
    # A built-in is read-only: its page says where it runs and offers no choice.
    page.goto(f"{owner.url}/#/skills/skill-authoring")
    page.locator("#skill-runs-on", has_text="a node the call names").wait_for()
    assert page.locator("#skill-execution").count() == 0


def import_described(fleet: Fleet, count: int) -> list[str]:
    """`count` skills whose descriptions run from a line to the 1,024-character limit."""
    descriptions = []
    with fleet.http() as client:
        for number in range(count):
            name = f"real-{number:03d}"
            text = (PROSE * 4)[: 60 + (number * 131) % 965].rstrip(" ,;")
            files = skill_files(name, description=text, metadata=READ_NODE)
            body = {"file": ("s.zip", io.BytesIO(zip_bytes(files, top=name)))}
            assert client.post("/api/skills", files=body).status_code == 201
            descriptions.append(text)
    return descriptions


ROW_HEIGHTS = """() => {
  const rows = [...document.querySelectorAll('#skills tbody tr')];
  const line = parseFloat(getComputedStyle(rows[0].querySelector('td')).lineHeight);
  return {line, table: document.querySelector('#skills table').getBoundingClientRect().height,
          rows: rows.map((row) => row.getBoundingClientRect().height)};
}"""


def test_the_skills_table_stays_readable_with_200_real_descriptions(
    browser: Any, console: Fleet
) -> None:
    owner = console.with_new_owner()
    descriptions = import_described(owner, 200)
    assert max(len(text) for text in descriptions) > 1000  # the limit is 1,024
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    desk = context.new_page()
    try:
        open_route(desk, owner, "skills")
        desk.wait_for_selector("tr[data-skill='real-199']")
        sizes = desk.evaluate(ROW_HEIGHTS)
        # Each row at most three lines of text and its padding: a description is cut at two.
        tallest = 3 * sizes["line"] + 16
        print(f"\n{len(sizes['rows'])} skills: the table is {sizes['table']:.0f} px tall")
        assert len(sizes["rows"]) == 201  # and the built-in
        assert max(sizes["rows"]) <= tallest, max(sizes["rows"])
        assert sizes["table"] <= 201 * tallest

        longest = descriptions.index(max(descriptions, key=len))
        cell = desk.locator(f"tr[data-skill='real-{longest:03d}'] .clamp")
        assert cell.get_attribute("title") == descriptions[longest]  # the whole text, on hover
        before = cell.bounding_box()["height"]
        cell.click()  # and unfolded on a click
        assert cell.get_attribute("aria-expanded") == "true"
        assert cell.bounding_box()["height"] > 4 * before
        desk.click(f"tr[data-skill='real-{longest:03d}'] a")
        desk.wait_for_selector("main[data-ready=skills] .description")
        assert desk.inner_text(".description") == descriptions[longest]  # whole on its page
    finally:
        context.close()


LABELS = """(selector) => [...document.querySelectorAll(selector)].map((cell) =>
  getComputedStyle(cell, '::before').content.replaceAll('"', ''))"""


def test_at_a_phones_width_every_value_says_what_it_is(browser: Any, console: Fleet) -> None:
    owner = mine(console)
    asked = ask(owner, chat_id="pocket")
    with owner.http() as client:
        client.post(f"/api/approvals/{asked['approval_id']}", json={"decision": "approve"})
        wait_until(lambda: client.get(f"/api/calls/{asked['call_id']}").json()["run_id"], 30,
                   "the approved call's run")  # fmt: skip
    context = browser.new_context(viewport=PHONE, is_mobile=True)
    phone = context.new_page()
    try:
        open_route(phone, owner, "skills")
        row = "tr[data-skill='changer'] td"
        assert phone.evaluate(LABELS, row) == [
            "Name",
            "Description",
            "Tier",
            "Runs on",
            "Hash",
            "Source",
            "State",
            "none",
        ]  # the last cell is the button, which says what it does
        for route, selector, first in (
            ("runs", "#runs tbody tr:first-child td", "Run"),
            ("approvals", "#answered tbody tr:first-child td", "Tool"),
        ):
            phone.goto(f"{owner.url}/#/{route}")
            phone.wait_for_selector(selector)
            assert phone.evaluate(LABELS, selector)[0] == first, route
            width = phone.evaluate("document.documentElement.scrollWidth")
            assert width <= PHONE["width"], f"{route} is {width} px wide"
        phone.set_viewport_size({"width": 1280, "height": 800})  # at a desktop's, the headings
        assert set(phone.evaluate(LABELS, "#answered tbody td")) == {"none"}
    finally:
        context.close()


def test_the_job_editor_offers_only_what_a_job_can_be_granted(page: Any, console: Fleet) -> None:
    owner = mine(console)
    owner.import_skill("reader", READ_NODE, {"scripts/tick.py": TICKER})
    wiper = owner.import_skill("wiper", WIPE_NODE, {"scripts/tick.py": TICKER})
    owner.import_skill("resting", CHANGE_NODE, {"scripts/tick.py": TICKER})
    drafted = draft_arguments("drafted", metadata={"skillfleet.tier": "change"})
    assert call_tool(owner, "draft_skill", drafted)["status"] == "done"
    with owner.http() as client:
        off = client.get("/api/skills/resting").json()["hash"]
        body = {"enabled": False, "hash": off}
        assert client.put("/api/skills/resting/enabled", json=body).status_code == 200
        assert client.get("/api/skills/drafted").json()["tier"] == "change"
    open_route(page, owner, "jobs")
    page.get_by_role("button", name="New job").click()
    page.wait_for_selector("#job-grants")
    offered = page.eval_on_selector_all("#job-grants input", "boxes => boxes.map(b => b.value)")
    # Read skills and built-ins never ask a job; a disabled skill and a draft are not offered.
    assert offered == ["changer", "wiper"]
    tools = page.eval_on_selector_all("#job-grant-tools input", "boxes => boxes.map(b => b.value)")
    assert tools == ["run_command"]  # run_skill_script takes each skill's tier instead

    page.fill("#job-name", "weekly wipe")
    page.fill("#job-skills", "wiper")
    page.check("#job-grants input[value='wiper']")
    page.check("#job-grant-tools input[value='run_command']")
    page.get_by_role("button", name="Create").click()
    page.wait_for_selector(".notice:has-text('Created weekly wipe')")
    with owner.http() as client:
        job = next(j for j in client.get("/api/jobs").json() if j["name"] == "weekly wipe")
    assert job["grants"] == {"tools": ["run_command"], "skills": [f"wiper@{wiper['hash']}"]}

    # The skill changes: its grant no longer matches, and the editor says so.
    files = skill_files("wiper", metadata=WIPE_NODE)
    files["scripts/tick.py"] = (TICKER + "# v2\n").encode()
    with owner.http() as client:
        body = {"file": ("s.zip", io.BytesIO(zip_bytes(files, top="wiper")))}
        changed = client.post("/api/skills?replace=true", files=body).json()
    assert changed["hash"] != wiper["hash"]
    page.locator(f"tr[data-job-id='{job['id']}']").get_by_role("button", name="Edit").click()
    old = page.locator(f"#job-grants input[value='wiper@{wiper['hash']}']")
    old.wait_for()
    assert old.is_checked() and not page.is_checked("#job-grants input[value='wiper']")
    assert "an earlier version: it no longer matches" in page.inner_text("#job-grants")
    assert page.is_checked("#job-grant-tools input[value='run_command']")


def test_saving_a_job_keeps_its_host_grants_and_never_overwrites_a_change_made_since(
    page: Any, console: Fleet
) -> None:
    owner = mine(console)
    body = {
        "name": "docs digest", "cron": "0 8 * * 1", "time_zone": "UTC",
        "steps": [{"tool": "list_skills", "arguments": {}}],
        "grants": {"tools": [], "skills": [], "hosts": ["docs.example.com"]},
        "skills": [], "enabled": True,
    }  # fmt: skip
    with owner.http() as client:
        job = client.post("/api/jobs", json=body).json()
    open_route(page, owner, "jobs")
    row = page.locator(f"tr[data-job-id='{job['id']}']")

    row.get_by_role("button", name="Edit").click()
    page.fill("#job-name", "docs digest, weekly")
    page.get_by_role("button", name="Save").click()
    page.wait_for_selector(".notice:has-text('Saved docs digest, weekly')")
    with owner.http() as client:
        saved = client.get(f"/api/jobs/{job['id']}").json()
    assert saved["grants"]["hosts"] == ["docs.example.com"]

    # Changed elsewhere while the editor is open: saving is refused, the change stays.
    row.get_by_role("button", name="Edit").click()
    page.wait_for_selector("#job-name")
    with owner.http() as client:
        revoked = dict(body, name="docs digest, weekly", grants={"tools": [], "skills": []})
        assert client.put(f"/api/jobs/{job['id']}", json=revoked).status_code == 200
    page.fill("#job-name", "docs digest, daily")
    page.get_by_role("button", name="Save").click()
    page.wait_for_selector("#error:not([hidden])")
    assert "(job_changed)" in page.inner_text("#error")
    with owner.http() as client:
        now = client.get(f"/api/jobs/{job['id']}").json()
    assert now["name"] == "docs digest, weekly" and not now["grants"].get("hosts")


def test_a_guessed_chat_s_card_says_why_it_only_approves_once_and_a_withdrawn_one_says_so(
    page: Any, console: Fleet
) -> None:
    owner = mine(console)
    signed_in(page, owner)
    guessed = ask(owner, chat_id="mcp-cursor-0a1b2c3d4e5f", chat_guessed=True)

    card = page.wait_for_selector(f"article[data-approval-id='{guessed['approval_id']}']")
    assert buttons(card) == ["Approve once", "Deny"]
    assert "skillfleet had to guess this call's chat" in card.inner_text()

    with owner.http() as client:  # the agent stops waiting
        withdrawn = client.post(f"/api/calls/{guessed['call_id']}/withdraw")
    assert withdrawn.status_code == 200, withdrawn.text
    approval = guessed["approval_id"]
    page.wait_for_selector(f"article[data-approval-id='{approval}']", state="detached")
    row = page.locator(f"#answered tr[data-approval-id='{approval}']")
    row.wait_for()
    assert "withdrawn: the agent stopped waiting" in row.inner_text()

"""The console's forms in a real browser against a real fleet: Jobs, Review, Tokens and Keys.

A job is created through the page's form (with its cron preview), run now and followed to a
history entry; on Review an agent's draft is enabled and its edit plans answered by clicking;
on Tokens an agent token is made, used against the API and revoked. Whatever the API refuses is
shown with the API's own message.
"""

from __future__ import annotations

import io
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from browsing import (  # fixtures and helpers
    PHONE,
    browser,
    call_tool,
    console,
    import_owned,
    page,
    propose_edit,
    signed_in,
    ticker_job,
    with_control_worker,
)
from conftest import TLS
from factories import skill_files, zip_bytes
from fleet import Fleet, wait_until
from sshkeys import fingerprint, make_key, public_line, ssh_sign
from toolcalls import draft_arguments

from store.cron import next_time
from store.hashing import SIGNATURE_FILE, hash_entries

pytestmark = pytest.mark.timeout(180)


def open_page(page: Any, console: Fleet, route: str) -> None:
    signed_in(page, console)
    page.goto(f"{console.url}/#/{route}")
    page.wait_for_selector(f"main[data-ready={route}]")


def preview_times(page: Any) -> list[str]:
    items = page.query_selector_all("#cron-preview li")
    return [item.get_attribute("data-time") for item in items]


def as_js(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def cron_times(cron: str, zone: str, after: datetime) -> list[str]:
    times = [next_time(cron, zone, after)]
    while len(times) < 5:
        times.append(next_time(cron, zone, times[-1]))
    return [as_js(t) for t in times]


def test_a_job_made_in_the_form_previews_its_times_runs_now_and_shows_its_history(
    page: Any, console: Fleet
) -> None:
    with_control_worker(console)
    open_page(page, console, "jobs")
    page.get_by_role("button", name="New job").click()
    name = f"morning report {uuid.uuid4().hex[:4]}"
    page.fill("#job-name", name)

    # The preview follows the cron and the zone as they are typed.
    page.fill("#job-cron", "61 8 * * 1-5")
    assert page.inner_text("#cron-preview") == "'61' is outside minute 0–59."
    before = datetime.now(UTC)
    page.fill("#job-time_zone", "America/New_York")
    page.fill("#job-cron", "30 8 * * 1-5")
    page.wait_for_function("document.querySelectorAll('#cron-preview li').length === 5")
    after = datetime.now(UTC)
    shown = preview_times(page)
    zone = "America/New_York"
    assert shown in (
        cron_times("30 8 * * 1-5", zone, before),
        cron_times("30 8 * * 1-5", zone, after),
    )
    assert all(zone in text for text in page.locator("#cron-preview li").all_inner_texts())
    page.fill("#job-time_zone", "Mars/Olympus")
    assert "'Mars/Olympus' is not an IANA time zone" in page.inner_text("#cron-preview")
    page.fill("#job-time_zone", zone)

    # A step the API refuses: the banner carries the API's message and code, nothing is saved.
    page.fill("#job-steps", '[{"tool": "no_such_tool", "arguments": {}}]')
    page.get_by_role("button", name="Create").click()
    banner = page.wait_for_selector("#error:not([hidden])")
    with console.http() as client:
        body = ticker_job(name, "30 8 * * 1-5", zone)
        refused = client.post("/api/jobs", json={**body, "steps": [{"tool": "no_such_tool"}]})
    assert refused.status_code == 422
    assert refused.json()["message"] in banner.inner_text()
    assert f"({refused.json()['code']})" in banner.inner_text()
    with console.http() as client:
        assert name not in [job["name"] for job in client.get("/api/jobs").json()]

    page.fill("#job-steps", json.dumps(ticker_job(name)["steps"]))
    page.fill("#job-skills", "ticker")
    page.get_by_role("button", name="Create").click()
    page.wait_for_selector(".notice:not([hidden])")
    assert f"Created {name}" in page.inner_text(".notice")
    with console.http() as client:
        job = next(job for job in client.get("/api/jobs").json() if job["name"] == name)
    assert job["cron"] == "30 8 * * 1-5" and job["time_zone"] == zone
    assert job["skills"] == ["ticker"] and job["enabled"] is True
    assert as_js(datetime.fromisoformat(job["next_run_at"])) in shown[:2]  # 08:30 may just pass
    row = page.wait_for_selector(f"tr[data-job-id='{job['id']}']")
    assert "30 8 * * 1-5" in row.inner_text() and zone in row.inner_text()

    # Run now: the history fills in from the event feed as the run moves on.
    page.locator(f"tr[data-job-id='{job['id']}']").get_by_role("button", name="Run now").click()
    page.wait_for_selector(f"#job-history[data-job-id='{job['id']}']")
    done = page.wait_for_selector("#job-history tr[data-status=succeeded]", timeout=60_000)
    assert "manual" in done.inner_text() and "done" in done.inner_text()
    with console.http() as client:
        runs = client.get(f"/api/jobs/{job['id']}/runs").json()
    assert [(r["id"], r["status"]) for r in runs] == [
        (done.get_attribute("data-job-run-id"), "succeeded")
    ]

    # Editing saves through PUT and keeps the rest of the job.
    page.locator(f"tr[data-job-id='{job['id']}']").get_by_role("button", name="Edit").click()
    assert page.input_value("#job-cron") == "30 8 * * 1-5"
    page.fill("#job-cron", "0 9 * * *")
    page.get_by_role("button", name="Save").click()
    page.wait_for_selector(f".notice:has-text('Saved {name}')")
    with console.http() as client:
        saved = client.get(f"/api/jobs/{job['id']}").json()
    assert saved["cron"] == "0 9 * * *" and saved["steps"] == job["steps"]


def test_running_a_job_that_is_still_running_shows_the_apis_refusal(
    page: Any, console: Fleet
) -> None:
    with_control_worker(console)
    body = ticker_job(f"asks {uuid.uuid4().hex[:4]}")
    body["steps"][0]["arguments"]["skill_name"] = "changer"  # a change skill: its step asks
    body["skills"] = ["changer"]
    with console.http() as client:
        job = client.post("/api/jobs", json=body).json()
        started = client.post(f"/api/jobs/{job['id']}/run").json()
        waiting = wait_until(
            lambda: next(
                (r for r in client.get(f"/api/jobs/{job['id']}/runs").json() if r["approval_id"]),
                None,
            ),
            30,
            "the job run to wait for its approval",
        )
        assert waiting["id"] == started["job_run_id"] and waiting["status"] == "waiting"
        again = client.post(f"/api/jobs/{job['id']}/run")
        assert again.status_code == 409, again.text

    open_page(page, console, "jobs")
    row = page.locator(f"tr[data-job-id='{job['id']}']")
    row.get_by_role("button", name="Run now").click()
    banner = page.wait_for_selector("#error:not([hidden])")
    assert f"Running {job['name']}: {again.json()['message']} (job_running)" in banner.inner_text()
    history = page.wait_for_selector(f"#job-history tr[data-job-run-id='{waiting['id']}']")
    assert "waiting" in history.inner_text() and "answer it" in history.inner_text()

    with console.http() as client:
        denied = client.post(f"/api/approvals/{waiting['approval_id']}", json={"decision": "deny"})
        assert denied.status_code == 200, denied.text
    failed = page.wait_for_selector("#job-history tr[data-status=failed]")
    assert failed.get_attribute("data-job-run-id") == waiting["id"]


def test_review_shows_drafts_and_edit_plans_with_their_diffs_and_acts_on_them(
    page: Any, console: Fleet
) -> None:
    suffix = uuid.uuid4().hex[:4]
    draft_name, doomed_name, edited, moved = (
        f"disk-{suffix}",
        f"doomed-{suffix}",
        f"notes-{suffix}",
        f"moved-{suffix}",
    )
    drafted = call_tool(
        console,
        "draft_skill",
        draft_arguments(
            draft_name,
            body="# Disk\n\nRun scripts/usage.py with the node.\n",
            files={"scripts/usage.py": "import shutil\nprint(shutil.disk_usage('/'))\n"},
        ),
    )
    assert drafted["status"] == "done", drafted
    draft_hash = drafted["result"]["hash"]
    call_tool(console, "draft_skill", draft_arguments(doomed_name))
    import_owned(console, edited)
    import_owned(console, moved)
    plan = propose_edit(console, edited, "print('ok')\n")
    stale = propose_edit(console, moved, "print('stale')\n")

    open_page(page, console, "review")
    card = page.wait_for_selector(f"article[data-approval-id='{plan['approval_id']}']")
    text = card.inner_text()
    assert (
        "Print less." in text and "+print('ok')" in text and "-import json, os, sys, time" in text
    )
    draft = page.wait_for_selector(f"article[data-draft='{draft_name}']")
    assert "+Run scripts/usage.py with the node." in draft.inner_text()
    assert "+++ b/scripts/usage.py\n@@ -0,0 +1,2 @@\n+import shutil" in draft.inner_text()
    assert f"Enable @{draft_hash[:8]}" in draft.inner_text()

    # An edit plan whose skill moved since: approving is refused with the API's message.
    with console.http() as client:
        changed = client.put(
            f"/api/skills/{moved}/files/scripts/extra.py", json={"content": "print(1)\n"}
        )
        assert changed.status_code == 200, changed.text
    stale_card = page.locator(f"article[data-approval-id='{stale['approval_id']}']")
    stale_card.get_by_role("button", name="Approve").click()
    banner = page.wait_for_selector("#error:not([hidden])")
    assert f"The skill '{moved}' changed after you were asked" in banner.inner_text()
    assert "(skill_changed)" in banner.inner_text()

    # Approve an edit: written at once, its card gone. The refusal redraws the cards (and the
    # feed's news of it may too): click once they stand still.
    page.wait_for_selector("#review:not([aria-busy])")
    page.locator(f"article[data-approval-id='{plan['approval_id']}']").get_by_role(
        "button", name="Approve"
    ).click()
    try:
        page.wait_for_selector(f".notice:has-text('Approved the edit of {edited}.')")
    except Exception as e:  # say what the page said instead (seen once under load)
        error = page.locator("#error")
        shown = error.inner_text() if error.is_visible() else "no error shown"
        with console.http() as client:
            call = client.get(f"/api/calls/{plan['call_id']}").json()
        raise AssertionError(f"no notice; the page: {shown!r}; the call: {call}") from e
    page.wait_for_selector(f"article[data-approval-id='{plan['approval_id']}']", state="detached")
    with console.http() as client:
        script = client.get(f"/api/skills/{edited}/files/scripts/tick.py")
        assert script.text == "print('ok')\n"
        assert client.get(f"/api/calls/{plan['call_id']}").json()["status"] == "done"

    # Enable a draft by the hash shown; discard another.
    page.locator(f"article[data-draft='{draft_name}']").get_by_role(
        "button", name=f"Enable @{draft_hash[:8]}"
    ).click()
    page.wait_for_selector(f"article[data-draft='{draft_name}']", state="detached")
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator(f"article[data-draft='{doomed_name}']").get_by_role(
        "button", name="Discard"
    ).click()
    page.wait_for_selector(f"article[data-draft='{doomed_name}']", state="detached")
    with console.http() as client:
        enabled = client.get(f"/api/skills/{draft_name}").json()
        assert enabled["enabled"] is True and enabled["hash"] == draft_hash
        assert enabled["locked"] is True
        assert client.get(f"/api/skills/{doomed_name}").status_code == 404


def test_an_edit_plan_is_denied_from_review_and_a_new_one_appears_live(
    page: Any, console: Fleet
) -> None:
    skill = f"live-{uuid.uuid4().hex[:4]}"
    import_owned(console, skill)
    open_page(page, console, "review")
    page.wait_for_selector("#live.live-open")
    asked = propose_edit(console, skill, "print('no')\n")  # after the page loaded
    card = page.wait_for_selector(f"article[data-approval-id='{asked['approval_id']}']")
    assert "+print('no')" in card.inner_text()
    page.locator(f"article[data-approval-id='{asked['approval_id']}']").get_by_role(
        "button", name="Deny"
    ).click()
    page.wait_for_selector(f".notice:has-text('Denied the edit of {skill}.')")
    with console.http() as client:
        wait_until(
            lambda: client.get(f"/api/calls/{asked['call_id']}").json()["status"] == "denied",
            10,
            "the denied edit",
        )
        assert "print('no')" not in client.get(f"/api/skills/{skill}/files/scripts/tick.py").text


def test_an_agent_token_made_on_the_tokens_page_calls_tools_and_is_refused_once_revoked(
    page: Any, console: Fleet
) -> None:
    label = f"laptop agent {uuid.uuid4().hex[:4]}"
    open_page(page, console, "tokens")
    page.fill("#token-label", label)
    page.get_by_role("button", name="Create agent token").click()
    token = page.wait_for_selector("#new-token .secret").inner_text()
    assert "shown only once" in page.inner_text("#new-token")
    row = page.locator("#tokens tbody tr", has_text=label)
    row.wait_for()
    assert "agent" in row.inner_text()

    # An agent token: it may call tools, not act as the owner.
    agent = httpx.Client(
        verify=TLS, base_url=console.url, headers={"Authorization": f"Bearer {token}"}
    )
    with agent:
        assert agent.get("/api/tools").status_code == 200
        refused = agent.get("/api/tokens")
        assert refused.status_code == 403 and refused.json()["code"] == "owner_only"
        with console.http() as client:
            listed = [t for t in client.get("/api/tokens").json() if t["label"] == label]
        assert [t["role"] for t in listed] == ["agent"]
        assert token not in json.dumps(listed)

        # Shown once: the page loaded again lists the token but not its secret.
        page.reload()
        page.wait_for_selector("main[data-ready=tokens]")
        row.wait_for()
        assert token not in page.content()

        page.once("dialog", lambda dialog: dialog.accept())  # Revoke asks first
        row.get_by_role("button", name="Revoke").click()
        row.wait_for(state="detached")
        gone = agent.get("/api/tools")  # the very next request
        assert gone.status_code == 401 and gone.json()["code"] == "unauthorized"
    with console.http() as client:
        assert label not in [t["label"] for t in client.get("/api/tokens").json()]


def test_the_jobs_and_review_forms_fit_a_phones_width(browser: Any, console: Fleet) -> None:
    context = browser.new_context(viewport=PHONE, is_mobile=True)
    phone = context.new_page()
    try:
        open_page(phone, console, "jobs")
        phone.get_by_role("button", name="New job").click()
        phone.wait_for_selector("#cron-preview li")
        for route in ("jobs", "review", "tokens", "settings"):
            if route != "jobs":
                phone.goto(f"{console.url}/#/{route}")
                phone.wait_for_selector(f"main[data-ready={route}]")
            width = phone.evaluate("document.documentElement.scrollWidth")
            assert width <= PHONE["width"], f"{route} is {width} px wide"
    finally:
        context.close()


def test_a_key_trusted_on_the_keys_page_names_the_skills_it_signed_and_can_be_removed(
    page: Any, console: Fleet, tmp_path: Path
) -> None:
    key = make_key(tmp_path, "author")
    name = f"signed-{uuid.uuid4().hex[:6]}"
    files = skill_files(name)
    files[SIGNATURE_FILE] = ssh_sign(key, hash_entries(files.items()).encode())
    open_page(page, console, "keys")
    page.fill("#key-name", "author@example.org")
    page.fill("#key-text", public_line(key))
    page.get_by_role("button", name="Trust key").click()
    row = page.locator("#trusted-keys tbody tr", has_text="author@example.org")
    row.wait_for()
    assert fingerprint(key) in row.inner_text()

    with console.http() as client:
        data = zip_bytes(files, top=name)
        imported = client.post("/api/skills", files={"file": ("s.zip", io.BytesIO(data))})
    assert imported.status_code == 201, imported.text
    page.goto(f"{console.url}/#/skills/{name}")
    assert page.wait_for_selector("#skill-signed-by").inner_text() == "author@example.org"

    page.goto(f"{console.url}/#/keys")
    page.wait_for_selector("main[data-ready=keys]")
    page.locator("#trusted-keys tbody tr", has_text="author@example.org").get_by_role(
        "button", name="Remove"
    ).click()
    page.wait_for_selector("#trusted-keys p.muted")
    page.goto(f"{console.url}/#/skills/{name}")
    assert "a key you don't trust" in page.wait_for_selector("#skill-signed-by").inner_text()

"""The Jobs page shows every time in one zone, the browser's, and names it: the next runs, the
history and the editor's preview (with the job's own clock beside it when that differs)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from browsing import DESKTOP, READ_NODE, TICKER, browser, console, signed_in, ticker_job
from fleet import Fleet

__all__ = ["browser", "console"]

pytestmark = pytest.mark.timeout(240)

BROWSER_ZONE = "Europe/Berlin"
JOB_ZONE = "America/New_York"


@pytest.fixture
def berlin(browser: Any) -> Iterator[Any]:
    """A tab whose browser runs on Berlin's clock, with a 24-hour one."""
    context = browser.new_context(viewport=DESKTOP, timezone_id=BROWSER_ZONE, locale="en-GB")
    yield context.new_page()
    context.close()


def test_next_runs_history_and_preview_are_in_the_browsers_zone_and_say_so(
    berlin: Any, console: Fleet
) -> None:
    owner = console.with_new_owner()
    owner.import_skill("ticker", READ_NODE, {"scripts/tick.py": TICKER})
    with owner.http() as client:
        job = client.post("/api/jobs", json=ticker_job("berlin view", "30 8 * * *", JOB_ZONE))
        assert job.status_code == 201, job.text
        job_id = job.json()["id"]
        started = client.post(f"/api/jobs/{job_id}/run")  # queued: no control worker here
        assert started.status_code in (200, 201, 202), started.text
    page = berlin
    signed_in(page, owner)
    page.goto(f"{owner.url}/#/jobs")
    page.wait_for_selector("main[data-ready=jobs]")
    assert BROWSER_ZONE in page.inner_text("#time-zone-note")
    row = page.locator(f"tr[data-job-id='{job_id}']")
    next_run = row.locator("td").nth(2).inner_text()
    assert next_run.endswith(BROWSER_ZONE), next_run
    assert (
        "14:30" in next_run
    )  # 08:30 in New York is 14:30 in Berlin (both on summer or winter time)

    row.get_by_role("button", name="History").click()
    started_at = page.locator("#job-history tbody tr td").first
    started_at.wait_for()
    assert started_at.inner_text().endswith(BROWSER_ZONE)

    row.get_by_role("button", name="Edit").click()
    page.wait_for_selector("#cron-preview li:nth-child(5)")
    assert BROWSER_ZONE in page.inner_text("#job-editor h3")
    for shown in page.locator("#cron-preview li").all_inner_texts():
        assert "14:30" in shown and BROWSER_ZONE in shown, shown
        assert f"08:30 {JOB_ZONE}" in shown, shown  # the job's own clock beside it

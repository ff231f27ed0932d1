"""The Runs page pages by cursor: Older follows the Link header, Newer goes back, and the count
is the first page's capped X-Total-Count."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from browsing import (  # fixtures and helpers
    browser,
    console,
    page,
    signed_in,
)
from fleet import Fleet
from sqlalchemy import select

from store.db import make_engine
from store.models import Owner, Run, utcnow

__all__ = ["browser", "console", "page"]


def thirty_runs(console: Fleet) -> str:
    """Thirty ended runs of a skill name no other run of the fleet has; that name."""
    engine = make_engine(console.settings.database_url)
    marker = f"paged-{uuid.uuid4().hex[:6]}"
    with engine.begin() as connection:
        owner = connection.scalar(select(Owner.id).where(Owner.name == console.owner_name))
        now = utcnow()
        connection.execute(Run.__table__.insert(), [
            {"id": f"{marker}-{n:02d}", "owner_id": owner, "skill_name": marker,
             "skill_hash": "a" * 64, "script": "scripts/tick.py", "arguments": {},
             "execution": "node", "queue": "node.web01", "node": "web01", "network": "none",
             "status": "succeeded", "stdout": "", "stderr": "", "timeout_seconds": 60,
             "created_at": now - timedelta(seconds=n)}
            for n in range(30)
        ])  # fmt: skip
    engine.dispose()
    return marker


def filtered(page: Any, console: Fleet, marker: str) -> None:
    signed_in(page, console)
    page.goto(f"{console.url}/#/runs")
    page.wait_for_selector("main[data-ready=runs] #runs table")
    page.fill("input[name=skill]", marker)
    page.get_by_role("button", name="Filter").click()
    page.locator(".pager", has_text="Page 1 of 30 runs").wait_for()


def test_older_follows_the_cursor_and_newer_comes_back(page: Any, console: Fleet) -> None:
    filtered(page, console, thirty_runs(console))
    assert page.locator("#runs tbody tr").count() == 25
    page.get_by_role("button", name="Older").click()
    page.locator(".pager", has_text="Page 2").wait_for()
    shown = page.locator("#runs tbody tr").count()
    assert shown == 5 and page.get_by_role("button", name="Older").is_disabled()
    page.get_by_role("button", name="Newer").click()
    page.locator(".pager", has_text="Page 1 of 30 runs").wait_for()
    assert page.locator("#runs tbody tr").count() == 25


def test_a_first_page_answered_after_a_click_on_older_does_not_replace_the_second(
    page: Any, console: Fleet
) -> None:
    filtered(page, console, thirty_runs(console))
    held: list[Any] = []
    page.route(  # first pages are held back; a cursor's page goes through
        "**/api/runs?*",
        lambda route: route.continue_() if "cursor=" in route.request.url else held.append(route),
    )
    page.get_by_role("button", name="Filter").click()  # a reload of the first page, held
    page.get_by_role("button", name="Older").click()
    page.locator(".pager", has_text="Page 2").wait_for()
    assert page.locator("#runs tbody tr").count() == 5
    assert held  # the first page's reload is still on its way
    for route in held:  # its answer now comes, after the second page's
        with page.expect_response(lambda answer, sent=route.request: answer.request == sent):
            route.continue_()
    page.wait_for_timeout(500)  # time for it to be shown, were it to be

    assert page.locator("#runs tbody tr").count() == 5
    assert page.get_by_role("button", name="Older").is_disabled()
    assert page.locator(".pager", has_text="Page 2").count() == 1

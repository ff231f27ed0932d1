"""A skill's versions in the console: the list on its page, Rollback asked first, and the Jobs
page marking a pinned version the skill moved on from."""

from __future__ import annotations

import io
from typing import Any

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
from factories import skill_files, zip_bytes
from fleet import Fleet

__all__ = ["browser", "console", "page"]

pytestmark = pytest.mark.timeout(240)


def install(fleet: Fleet, name: str, tick: str) -> dict[str, Any]:
    files = skill_files(name, metadata=CHANGE_NODE)
    files["scripts/tick.py"] = tick.encode()
    with fleet.http() as client:
        data = zip_bytes(files, top=name)
        response = client.post(
            "/api/skills?replace=true", files={"file": ("s.zip", io.BytesIO(data))}
        )
    assert response.status_code == 201, response.text
    return dict(response.json())


def test_rollback_asks_first_then_makes_the_version_current_and_the_jobs_pin_catches_up(
    page: Any, console: Fleet
) -> None:
    owner = console.with_new_owner()
    first = install(owner, "changer", TICKER)
    step = {"tool": "run_skill_script",
            "arguments": {"skill_name": f"changer@{first['hash']}", "script": "scripts/tick.py",
                          "arguments": {"node": NODE}}}  # fmt: skip
    job = {"name": "pinned tick", "cron": "0 3 * * *", "steps": [step], "skills": ["changer"]}
    with owner.http() as client:
        assert client.post("/api/jobs", json=job).status_code == 201
    second = install(owner, "changer", TICKER + "# two\n")

    signed_in(page, owner)
    page.goto(f"{owner.url}/#/jobs")
    pin = page.locator("li[data-pin=changer]")
    pin.wait_for()
    assert pin.get_attribute("data-lagging") == "true"
    assert f"lags behind {second['hash'][:8]}" in pin.inner_text()

    page.goto(f"{owner.url}/#/skills/changer")
    older = page.locator(f"#skill-versions tr[data-version='{first['hash']}']")
    older.wait_for()
    assert "Versions (2)" in page.inner_text("#skill-versions h2")
    assert "current" in page.inner_text(f"#skill-versions tr[data-version='{second['hash']}']")

    asked: list[str] = []

    def say_no(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", say_no)
    older.get_by_role("button", name="Rollback").click()
    page.wait_for_selector("#skill-versions button.rollback:not([disabled])")
    assert asked and asked[0].startswith(f"Roll changer back to {first['hash'][:8]}?")
    with owner.http() as client:
        assert client.get("/api/skills/changer").json()["hash"] == second["hash"]

    page.once("dialog", lambda dialog: dialog.accept())
    older.get_by_role("button", name="Rollback").click()
    page.locator("code.hash", has_text=first["hash"]).wait_for()
    current = page.locator(f"#skill-versions tr[data-version='{first['hash']}']")
    assert "current" in current.inner_text()
    with owner.http() as client:
        assert client.get("/api/skills/changer").json()["hash"] == first["hash"]

    page.goto(f"{owner.url}/#/jobs")
    page.locator("li[data-pin=changer][data-lagging=false]").wait_for()

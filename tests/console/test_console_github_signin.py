"""The console's sign-in with GitHub, driven in Chromium against the local stand-in for GitHub's
device flow: the code shown, GitHub's answer awaited, the owner signed in; a user on no rule
told why; signing out deletes the sign-in's token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from browsing import browser, page  # noqa: F401 - fixtures
from fleet import Fleet, fleet, sqlite_settings, wait_until
from github_signin_standin import CLIENT_ID, CLIENT_SECRET, Options, StandIn, serve

from relay import naming
from store.settings import signin_rules

OCTOCAT, HUBOT = 583231, 4242


@pytest.fixture(scope="module")
def github() -> Iterator[StandIn]:
    with serve(Options(interval=1)) as server:
        yield server


@pytest.fixture(scope="module")
def console(
    tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path, github: StandIn
) -> Iterator[Fleet]:
    """The API alone (it serves the console), signing owners in with the stand-in GitHub."""
    settings = sqlite_settings(
        tmp_path_factory.mktemp("console-gh"),
        sqlite_template,
        github_url=github.base_url,
        github_api_url=github.base_url,
        github_client_id=CLIENT_ID,
        github_client_secret=CLIENT_SECRET,
        github_signin=signin_rules("user:583231=gh-alice"),
    )
    with fleet(settings) as started:
        started.redis.delete(naming.github_signin_starts("127.0.0.1"))
        yield started


def shown_code(page: Any) -> str:
    page.get_by_role("button", name="Sign in with GitHub").click()
    page.wait_for_selector("#github-code")
    return str(page.text_content("#github-code")).strip()


def test_an_owner_signs_in_with_the_code_shown_and_signs_out_again(page, console, github):
    page.goto(console.url + "/")
    code = shown_code(page)
    link = page.get_by_role("link", name=f"{github.base_url}/login/device")
    assert link.get_attribute("target") == "_blank"
    github.enter(code, OCTOCAT)

    page.wait_for_selector("main[data-ready=approvals]", timeout=15_000)
    token = page.evaluate("sessionStorage.getItem('skillfleet.owner-token')")
    kept = page.evaluate("JSON.parse(sessionStorage.getItem('skillfleet.github-session'))")
    assert kept["login"] == "octocat" and kept["expires_at"]
    answer = httpx.get(f"{console.url}/api/tokens", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200
    assert any(t["label"] == "GitHub sign-in: octocat" for t in answer.json())
    assert "slow_down" not in github.answers()
    page.goto(f"{console.url}/#/tokens")
    row = page.locator("#tokens tr", has_text="GitHub sign-in: octocat")
    row.wait_for()
    cells = row.locator("td").all_text_contents()
    assert cells[0] == str(kept["token_id"]) and cells[5] not in ("never", "—")

    page.get_by_role("button", name="Sign out").click()
    page.wait_for_selector("main[data-ready=sign-in]")

    def refused() -> bool:
        gone = httpx.get(f"{console.url}/api/tokens", headers={"Authorization": f"Bearer {token}"})
        return gone.status_code == 401

    wait_until(refused, 10, "the signed-out token to be refused")


def test_a_github_user_on_no_rule_is_told_why_and_stays_signed_out(page, console, github):
    page.goto(console.url + "/")
    code = shown_code(page)
    github.enter(code, HUBOT)

    page.wait_for_selector("#github-error:not(:empty)", timeout=15_000)
    message = str(page.text_content("#github-error"))
    assert "hubot (id 4242) may not sign in here" in message
    assert page.evaluate("sessionStorage.getItem('skillfleet.owner-token')") is None
    assert page.get_by_role("button", name="Start again").is_visible()
    assert page.get_by_label("Owner token").is_visible()  # pasting a token stays

"""The consent page of OAuth for MCP hosts, in Chromium: the owner signs in, sees the client,
allows, and the host's token works at /mcp; a page of another site can't frame it."""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
from browsing import browser
from fleet import Fleet, fleet, sqlite_settings
from mcpclients import new_tokens
from oauthhost import REDIRECT

__all__ = ["browser"]  # a fixture, used by name

MCP_HEADERS = {"Accept": "application/json, text/event-stream"}
INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": "browser-host", "version": "1"}},
}  # fmt: skip


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    with fleet(sqlite_settings(tmp_path_factory.mktemp("consent"), sqlite_template)) as running:
        yield running


def opened_authorization(running: Fleet, name: str) -> tuple[str, str, str]:
    """A registered client's authorization URL, with its client id and PKCE verifier."""
    registration = {
        "client_name": name, "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
    }  # fmt: skip
    client_id = httpx.post(f"{running.url}/oauth/register", json=registration).json()["client_id"]
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    params = {
        "response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT,
        "code_challenge": challenge.decode().rstrip("="), "code_challenge_method": "S256",
        "state": "browser", "resource": f"{running.url}/mcp",
    }  # fmt: skip
    return f"{running.url}/oauth/authorize?{urlencode(params)}", client_id, verifier


def test_the_owner_allows_a_host_in_chromium_and_its_token_works(served, browser):
    owner, _agent = new_tokens(served)
    url, client_id, verifier = opened_authorization(served, "Browser Host")
    returned: list[str] = []
    page = browser.new_page()

    def host_callback(route: Any) -> None:
        returned.append(route.request.url)
        route.fulfill(status=200, body="signed in", content_type="text/plain")

    page.route("http://127.0.0.1:9/**", host_callback)
    page.goto(url)
    assert page.locator("#client-name").inner_text() == "Browser Host"
    assert "registered itself" in page.locator("#origin").inner_text()
    page.fill("#token", owner)
    page.click("#sign-in")
    page.wait_for_load_state()
    assert page.query_selector("#allow") is not None, page.content()
    assert page.locator("#role").inner_text() == "agent"
    page.click("#allow")
    page.wait_for_url("http://127.0.0.1:9/**")
    page.close()
    answer = {k: v[0] for k, v in parse_qs(urlsplit(returned[0]).query).items()}
    assert answer["state"] == "browser" and answer["iss"] == served.url
    form = {
        "grant_type": "authorization_code", "code": answer["code"], "redirect_uri": REDIRECT,
        "client_id": client_id, "code_verifier": verifier,
    }  # fmt: skip
    tokens = httpx.post(f"{served.url}/oauth/token", data=form)
    assert tokens.status_code == 200, tokens.text
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {tokens.json()['access_token']}"}
    assert httpx.post(f"{served.url}/mcp", json=INITIALIZE, headers=headers).status_code == 200
    # The console's token list shows the host's token under its name.
    console = browser.new_page()
    console.goto(served.url + "/")
    console.get_by_label("Owner token").fill(owner)
    console.get_by_role("button", name="Sign in").click()
    console.wait_for_selector("main[data-ready=approvals]")
    console.goto(f"{served.url}/#/tokens")
    console.wait_for_selector("main[data-ready=tokens]")
    row = console.locator("#tokens tbody tr", has_text="Browser Host")
    assert "agent · MCP host (OAuth)" in row.inner_text()
    console.close()


def test_another_sites_page_cant_frame_the_consent_page(served, browser):
    url, _client_id, _verifier = opened_authorization(served, "Framed Host")
    consent_url = httpx.get(url).headers["location"]
    page = browser.new_page()
    page.set_content(f'<iframe id="framed" src="{consent_url}" width="600" height="400"></iframe>')
    page.wait_for_timeout(1000)
    framed = [frame for frame in page.frames if frame != page.main_frame]
    assert framed, "the iframe was not made"
    assert all(frame.query_selector("#token") is None for frame in framed)
    page.close()
    # The same page opened on its own has the form the frame did not show.
    alone = browser.new_page()
    alone.goto(consent_url)
    assert alone.query_selector("#token") is not None
    alone.close()

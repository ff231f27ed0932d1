"""OAuth for MCP hosts behind a proxy: SKILLFLEET_PUBLIC_URL names the issuer, the metadata and
the resource tokens are bound to, whatever Host a request came with."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from conftest import TLS
from fleet import Fleet, fleet, sqlite_settings
from mcpclients import new_tokens
from oauthhost import REDIRECT, query, sign_in
from test_mcp_oauth import INITIALIZE, MCP_HEADERS, challenge, fields

from store.settings import Settings

pytestmark = pytest.mark.fleet

PUBLIC = "https://skills.example.com"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    folder = tmp_path_factory.mktemp("public")
    with fleet(sqlite_settings(folder, sqlite_template, public_url=PUBLIC)) as running:
        yield running


def test_the_public_url_is_read_without_its_trailing_slash():
    assert Settings.from_env({"SKILLFLEET_PUBLIC_URL": PUBLIC + "/"}).public_url == PUBLIC
    assert Settings.from_env({}).public_url is None


def test_metadata_and_the_challenge_name_the_public_url(served):
    answer = httpx.post(f"{served.url}/mcp", json=INITIALIZE, headers=MCP_HEADERS, timeout=30)
    assert answer.headers["WWW-Authenticate"] == (
        f'Bearer resource_metadata="{PUBLIC}/.well-known/oauth-protected-resource/mcp"'
    )
    resource = httpx.get(f"{served.url}/.well-known/oauth-protected-resource/mcp").json()
    assert resource["resource"] == f"{PUBLIC}/mcp"
    assert resource["authorization_servers"] == [PUBLIC]
    server = httpx.get(f"{served.url}/.well-known/oauth-authorization-server").json()
    assert server["issuer"] == PUBLIC
    assert server["token_endpoint"] == f"{PUBLIC}/oauth/token"


def test_a_token_for_the_public_resource_works_at_mcp(served):
    owner, _agent = new_tokens(served)
    registration = {
        "client_name": "Proxied Host", "redirect_uris": [REDIRECT],
        "token_endpoint_auth_method": "none",
    }  # fmt: skip
    client_id = httpx.post(f"{served.url}/oauth/register", json=registration).json()["client_id"]
    verifier, code_challenge = challenge()
    params = {
        "response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT,
        "code_challenge": code_challenge, "state": "p", "resource": f"{PUBLIC}/mcp",
    }  # fmt: skip
    with httpx.Client(verify=TLS, timeout=30) as browser:
        opened = browser.get(f"{served.url}/oauth/authorize", params=params)
        assert opened.status_code == 302, opened.text
        location = urlsplit(opened.headers["location"])
        assert f"{location.scheme}://{location.netloc}" == PUBLIC
        consent_url = f"{served.url}{location.path}?{location.query}"  # as the proxy passes it
        signed = sign_in(browser, consent_url, owner)
        answer = browser.post(
            f"{served.url}{location.path}", data={**fields(signed.text), "decision": "allow"}
        )
    assert query(answer)["iss"] == PUBLIC
    form = {
        "grant_type": "authorization_code", "code": query(answer)["code"],
        "redirect_uri": REDIRECT, "client_id": client_id, "code_verifier": verifier,
    }  # fmt: skip
    tokens = httpx.post(f"{served.url}/oauth/token", data=form)
    assert tokens.status_code == 200, tokens.text
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {tokens.json()['access_token']}"}
    used = httpx.post(f"{served.url}/mcp", json=INITIALIZE, headers=headers, timeout=30)
    assert used.status_code == 200, used.text

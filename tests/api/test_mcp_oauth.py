"""OAuth 2.1 for MCP hosts against a served API: the MCP SDK's OAuthClientProvider completing
the whole flow (discovery, registration, consent, code, token, refresh), the token it gets
being an agent token of the owner, and every bad input refused with nothing granted."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import secrets
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import httpx2
import pytest
from conftest import TLS
from fleet import Fleet, fleet, sqlite_settings
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation
from mcpclients import new_tokens
from oauthhost import REDIRECT, Host, consent, fields, query, sign_in
from sqlalchemy import func, select

from api.mcp.http import WHAT_TO_SEND
from store.db import transaction
from store.models import ApiToken, OAuthGrant, utcnow
from store.tokens import issue_token, token_digest

pytestmark = pytest.mark.fleet

MCP_HEADERS = {"Accept": "application/json, text/event-stream"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "curl", "version": "1"},
    },
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    folder = tmp_path_factory.mktemp("oauth")
    settings = sqlite_settings(folder, sqlite_template, egress_allow=("127.0.0.1",))
    with fleet(settings) as running:
        yield running


def oauth_client(running: Fleet, host: Host, url: str | None = None) -> Client:
    """The SDK's MCP client of the fleet's /mcp, signing in through OAuth as `host`."""
    client = httpx2.AsyncClient(auth=host.provider(), timeout=httpx2.Timeout(60.0))
    transport = streamable_http_client(f"{url or running.url}/mcp", http_client=client)
    return Client(transport, client_info=Implementation(name=host.name, version="1"))


def tool_names(running: Fleet, host: Host) -> list[str]:
    async def scenario() -> list[str]:
        async with oauth_client(running, host) as client:
            listed = await client.list_tools()
            return [tool.name for tool in listed.tools]

    return asyncio.run(scenario())


def post_mcp(url: str, token: str | None) -> httpx.Response:
    headers = {**MCP_HEADERS, **({"Authorization": f"Bearer {token}"} if token else {})}
    return httpx.post(f"{url}/mcp", json=INITIALIZE, headers=headers, timeout=30)


def owner_tokens(running: Fleet, owner: str) -> list[dict[str, Any]]:
    answer = httpx.get(
        f"{running.url}/api/tokens", headers={"Authorization": f"Bearer {owner}"}, timeout=30
    )
    assert answer.status_code == 200, answer.text
    found: list[dict[str, Any]] = answer.json()
    return found


def challenge() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).decode().rstrip("=")


def register(running: Fleet, name: str = "Hand Host", uris: list[str] | None = None) -> str:
    body = {
        "client_name": name,
        "redirect_uris": uris or [REDIRECT],
        "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
    }
    answer = httpx.post(f"{running.url}/oauth/register", json=body, timeout=30)
    assert answer.status_code == 201, answer.text
    client_id: str = answer.json()["client_id"]
    return client_id


def authorization_url(running: Fleet, client_id: str, code_challenge: str, **changes: str) -> str:
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT,
        "code_challenge": code_challenge,
        "code_challenge_method": "S256",
        "state": "s-1",
        "resource": f"{running.url}/mcp",
        **changes,
    }
    return f"{running.url}/oauth/authorize?{urlencode(params)}"


def exchange(running: Fleet, client_id: str, code: str, verifier: str) -> httpx.Response:
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": REDIRECT,
        "client_id": client_id,
        "code_verifier": verifier,
        "resource": f"{running.url}/mcp",
    }
    return httpx.post(f"{running.url}/oauth/token", data=form, timeout=30)


def refresh(running: Fleet, client_id: str, token: str) -> httpx.Response:
    form = {"grant_type": "refresh_token", "refresh_token": token, "client_id": client_id}
    return httpx.post(f"{running.url}/oauth/token", data=form, timeout=30)


def by_hand(running: Fleet, owner: str, name: str = "Hand Host") -> tuple[str, dict[str, Any]]:
    """A registered client's whole flow by hand; its client id and token answer."""
    client_id = register(running, name)
    verifier, code_challenge = challenge()
    with httpx.Client(verify=TLS, timeout=30) as browser:
        answer = consent(browser, authorization_url(running, client_id, code_challenge), owner)
    assert answer.status_code == 303, answer.text
    tokens = exchange(running, client_id, query(answer)["code"], verifier)
    assert tokens.status_code == 200, tokens.text
    return client_id, tokens.json()


# -- discovery ----------------------------------------------------------------------------


def test_mcp_without_a_token_advertises_its_protected_resource_metadata(served):
    answer = post_mcp(served.url, None)
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"] == (
        f'Bearer resource_metadata="{served.url}/.well-known/oauth-protected-resource/mcp"'
    )
    assert answer.json()["code"] == "unauthorized"


def test_a_static_token_never_sees_oauth_and_a_bad_one_keeps_its_error(served):
    _owner, agent = new_tokens(served)
    good = post_mcp(served.url, agent)
    assert good.status_code == 200, good.text
    assert "resource_metadata" not in good.headers.get("WWW-Authenticate", "")
    bad = post_mcp(served.url, "sf_not-a-token")
    assert bad.status_code == 401
    assert bad.headers["WWW-Authenticate"] == "Bearer"
    assert bad.json()["message"] == f"The bearer token is not valid. {WHAT_TO_SEND}"


def test_the_protected_resource_names_mcp_and_skillfleet_as_its_server(served):
    answer = httpx.get(f"{served.url}/.well-known/oauth-protected-resource/mcp", timeout=30)
    assert answer.status_code == 200
    metadata = answer.json()
    assert metadata["resource"] == f"{served.url}/mcp"
    assert metadata["authorization_servers"] == [served.url]


def test_the_authorization_server_offers_s256_cimd_and_registration(served):
    answer = httpx.get(f"{served.url}/.well-known/oauth-authorization-server", timeout=30)
    assert answer.status_code == 200
    metadata = answer.json()
    assert metadata["issuer"] == served.url
    assert metadata["code_challenge_methods_supported"] == ["S256"]
    assert metadata["client_id_metadata_document_supported"] is True
    assert metadata["registration_endpoint"] == f"{served.url}/oauth/register"
    assert metadata["authorization_endpoint"] == f"{served.url}/oauth/authorize"
    assert "none" in metadata["token_endpoint_auth_methods_supported"]


# -- the whole flow -------------------------------------------------------------------------


def test_the_sdk_host_signs_in_and_gets_an_agent_token_the_owner_sees(served):
    owner, _agent = new_tokens(served)
    host = Host(served.url, owner, name="Claude (test)")
    names = tool_names(served, host)
    assert "list_skills" in names
    assert len(host.authorizations) == 1
    assert host.storage.tokens is not None and host.storage.tokens.refresh_token
    listed = [token for token in owner_tokens(served, owner) if token["label"] == host.name]
    assert len(listed) == 1
    assert listed[0]["role"] == "agent"
    assert listed[0]["resource"] == f"{served.url}/mcp"
    # Its token works again without another consent.
    assert "list_skills" in tool_names(served, host)
    assert len(host.authorizations) == 1


def test_deleting_the_hosts_token_ends_its_access_and_its_refresh(served):
    owner, _agent = new_tokens(served)
    client_id, tokens = by_hand(served, owner, "Revoked Host")
    assert post_mcp(served.url, tokens["access_token"]).status_code == 200
    listed = [token for token in owner_tokens(served, owner) if token["label"] == "Revoked Host"]
    deleted = httpx.delete(
        f"{served.url}/api/tokens/{listed[0]['id']}",
        headers={"Authorization": f"Bearer {owner}"},
        timeout=30,
    )
    assert deleted.status_code == 204
    refused = post_mcp(served.url, tokens["access_token"])
    assert refused.status_code == 401
    again = refresh(served, client_id, tokens["refresh_token"])
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant"


def test_deleting_the_hosts_token_ends_its_open_stream(served):
    owner, _agent = new_tokens(served)
    _client_id, tokens = by_hand(served, owner, "Streaming Host")
    access = tokens["access_token"]
    opened = post_mcp(served.url, access)
    session = opened.headers["mcp-session-id"]
    headers = {
        "Authorization": f"Bearer {access}",
        "Accept": "text/event-stream",
        "Mcp-Session-Id": session,
    }
    ended = threading.Event()

    def listen() -> None:
        with (
            httpx.Client(verify=TLS, timeout=60) as client,
            client.stream("GET", f"{served.url}/mcp", headers=headers) as stream,
        ):
            assert stream.status_code == 200
            for _ in stream.iter_bytes():
                pass
        ended.set()

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    assert not ended.wait(1.0)  # the stream stays open while the token lives
    token_id = next(t["id"] for t in owner_tokens(served, owner) if t["label"] == "Streaming Host")
    httpx.delete(
        f"{served.url}/api/tokens/{token_id}",
        headers={"Authorization": f"Bearer {owner}"},
        timeout=30,
    )
    assert ended.wait(20), "the stream of a deleted token stayed open"


def test_a_refresh_token_rotates_and_used_twice_revokes_the_host(served):
    owner, _agent = new_tokens(served)
    client_id, first = by_hand(served, owner, "Rotating Host")
    second = refresh(served, client_id, first["refresh_token"])
    assert second.status_code == 200, second.text
    rotated = second.json()
    assert rotated["refresh_token"] != first["refresh_token"]
    assert post_mcp(served.url, first["access_token"]).status_code == 401  # the old secret
    assert post_mcp(served.url, rotated["access_token"]).status_code == 200
    labels = [t["label"] for t in owner_tokens(served, owner)]
    assert labels.count("Rotating Host") == 1  # one token, its secret rotated
    reused = refresh(served, client_id, first["refresh_token"])
    assert reused.status_code == 400 and reused.json()["error"] == "invalid_grant"
    assert post_mcp(served.url, rotated["access_token"]).status_code == 401
    assert refresh(served, client_id, rotated["refresh_token"]).status_code == 400
    assert "Rotating Host" not in [t["label"] for t in owner_tokens(served, owner)]


def test_a_code_presented_again_is_refused_and_revokes_its_token(served):
    owner, _agent = new_tokens(served)
    client_id = register(served, "Replaying Host")
    verifier, code_challenge = challenge()
    with httpx.Client(verify=TLS, timeout=30) as browser:
        answer = consent(browser, authorization_url(served, client_id, code_challenge), owner)
    code = query(answer)["code"]
    first = exchange(served, client_id, code, verifier)
    assert first.status_code == 200, first.text
    replayed = exchange(served, client_id, code, verifier)
    assert replayed.status_code == 400 and replayed.json()["error"] == "invalid_grant"
    assert post_mcp(served.url, first.json()["access_token"]).status_code == 401


def test_two_exchanges_of_one_code_at_once_give_one_token_at_most(served):
    owner, _agent = new_tokens(served)
    client_id = register(served, "Racing Host")
    verifier, code_challenge = challenge()
    with httpx.Client(verify=TLS, timeout=30) as browser:
        answer = consent(browser, authorization_url(served, client_id, code_challenge), owner)
    code = query(answer)["code"]
    results: list[httpx.Response] = []
    threads = [
        threading.Thread(target=lambda: results.append(exchange(served, client_id, code, verifier)))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(result.status_code == 200 for result in results) <= 1
    assert all(r.status_code in (200, 400) for r in results), [r.text for r in results]


def test_a_wrong_verifier_or_a_forged_code_gets_nothing(served):
    owner, _agent = new_tokens(served)
    before = len(owner_tokens(served, owner))
    client_id = register(served, "Guessing Host")
    _verifier, code_challenge = challenge()
    with httpx.Client(verify=TLS, timeout=30) as browser:
        answer = consent(browser, authorization_url(served, client_id, code_challenge), owner)
    code = query(answer)["code"]
    wrong = exchange(served, client_id, code, secrets.token_urlsafe(48))
    assert wrong.status_code == 400
    assert wrong.json() == {
        "error": "invalid_grant",
        "error_description": "incorrect code_verifier",
    }
    forged = exchange(served, client_id, secrets.token_urlsafe(32), secrets.token_urlsafe(48))
    assert forged.status_code == 400 and forged.json()["error"] == "invalid_grant"
    other_client = register(served, "Thief Host")
    stolen = exchange(served, other_client, code, _verifier)
    assert stolen.status_code == 400 and stolen.json()["error"] == "invalid_grant"
    assert len(owner_tokens(served, owner)) == before


def test_an_unregistered_redirect_uri_is_refused_without_a_redirect(served):
    client_id = register(served)
    _verifier, code_challenge = challenge()
    url = authorization_url(
        served, client_id, code_challenge, redirect_uri="https://evil.example/callback"
    )
    answer = httpx.get(url, timeout=30)
    assert answer.status_code == 400
    assert answer.json()["error"] == "invalid_request"
    assert "location" not in answer.headers


def test_registration_refuses_script_redirects_and_wrong_shapes(served):
    for uris in (["javascript:alert(1)"], ["http://evil.example/callback"]):
        body = {"client_name": "x", "redirect_uris": uris, "token_endpoint_auth_method": "none"}
        answer = httpx.post(f"{served.url}/oauth/register", json=body, timeout=30)
        assert answer.status_code == 400, uris
        assert answer.json()["error"] == "invalid_client_metadata"
    for body in ([], {"redirect_uris": "nope"}, {"client_name": "x" * 300}):
        answer = httpx.post(f"{served.url}/oauth/register", json=body, timeout=30)
        assert answer.status_code == 400, body
    huge = httpx.post(
        f"{served.url}/oauth/register",
        content=b'{"client_name": "' + b"x" * (5 * 1024 * 1024) + b'"}',
        headers={"Content-Type": "application/json"},
        timeout=30,
    )
    assert huge.status_code == 413


def test_a_resource_is_required_and_only_mcp_is_granted(served):
    client_id = register(served)
    _verifier, code_challenge = challenge()
    for resource in ("", "https://elsewhere.example/mcp", f"{served.url}/api"):
        url = authorization_url(served, client_id, code_challenge, resource=resource)
        answer = httpx.get(url, timeout=30)
        assert answer.status_code == 302, resource
        found = query(answer)
        assert found["error"] == "invalid_target", resource
        assert found["state"] == "s-1"
        assert "code" not in found


def test_a_token_for_another_resource_is_refused_at_mcp_and_at_the_api(served):
    owner, _agent = new_tokens(served)
    _client_id, tokens = by_hand(served, owner, "Bound Host")
    access = tokens["access_token"]
    direct = httpx.get(
        f"{served.url}/api/tools", headers={"Authorization": f"Bearer {access}"}, timeout=30
    )
    assert direct.status_code == 401 and direct.json()["code"] == "wrong_resource"
    with transaction(served.services.sessions) as session:
        owner_id = session.scalar(select(ApiToken.owner_id).where(ApiToken.label == "Bound Host"))
        row, elsewhere = issue_token(session, owner_id, "agent", "Elsewhere Host")
        row.resource = "https://elsewhere.example/mcp"
    refused = post_mcp(served.url, elsewhere)
    assert refused.status_code == 401
    assert refused.json()["code"] == "wrong_resource"
    assert "elsewhere.example" in refused.json()["message"]


def test_an_expired_access_token_is_refused(served):
    owner, _agent = new_tokens(served)
    _client_id, tokens = by_hand(served, owner, "Expired Host")
    with transaction(served.services.sessions) as session:
        row = session.scalar(
            select(ApiToken).where(ApiToken.token_hash == token_digest(tokens["access_token"]))
        )
        row.expires_at = utcnow() - timedelta(seconds=1)
    refused = post_mcp(served.url, tokens["access_token"])  # its first use: nothing cached
    assert refused.status_code == 401
    renewed = refresh(served, _client_id, tokens["refresh_token"])
    assert renewed.status_code == 200, renewed.text
    assert post_mcp(served.url, renewed.json()["access_token"]).status_code == 200


# -- client ID metadata documents (CIMD) ------------------------------------------------------


@pytest.fixture(scope="module")
def documents() -> Iterator[str]:
    """A host's web server for its metadata documents (its base URL): /host.json describes
    its client, /huge.json is over the limit, /liar.json names another client_id."""

    class Documents(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the handler's name
            base = f"http://127.0.0.1:{self.server.server_address[1]}"
            url = base + self.path
            bodies = {
                "/host.json": {"client_id": url, "client_name": "Doc Host",
                               "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"},
                "/huge.json": {"client_id": url, "client_name": "x" * 20_000,
                               "redirect_uris": [REDIRECT]},
                "/liar.json": {"client_id": base + "/host.json", "redirect_uris": [REDIRECT]},
            }  # fmt: skip
            body = json.dumps(bodies.get(self.path, {})).encode()
            self.send_response(200 if self.path in bodies else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Documents)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_client_named_by_its_document_signs_in_and_the_page_says_where_from(served, documents):
    owner, _agent = new_tokens(served)
    client_id = f"{documents}/host.json"
    verifier, code_challenge = challenge()
    with httpx.Client(verify=TLS, timeout=30) as browser:
        opened = browser.get(authorization_url(served, client_id, code_challenge))
        assert opened.status_code == 302, opened.text
        page = browser.get(opened.headers["location"])
        assert "Doc Host" in page.text
        assert f"its metadata document at {client_id}" in page.text
        answer = consent(browser, authorization_url(served, client_id, code_challenge), owner)
    tokens = exchange(served, client_id, query(answer)["code"], verifier)
    assert tokens.status_code == 200, tokens.text
    assert post_mcp(served.url, tokens.json()["access_token"]).status_code == 200
    assert "Doc Host" in [t["label"] for t in owner_tokens(served, owner)]


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("https://10.1.2.3/host.json", "a private address"),
        ("https://169.254.169.254/latest/meta-data", "link-local"),
        ("http://localhost:9/host.json", "must be https"),
        ("https://example.com/", "a path"),
        ("{documents}/huge.json", "over 16384 bytes"),
        ("{documents}/liar.json", "names another client_id"),
        ("{documents}/missing.json", "answered 404"),
    ],
)
def test_a_document_that_cant_be_used_is_refused_with_its_reason(served, documents, path, said):
    owner, _agent = new_tokens(served)
    before = len(owner_tokens(served, owner))
    client_id = path.format(documents=documents)
    _verifier, code_challenge = challenge()
    answer = httpx.get(authorization_url(served, client_id, code_challenge), timeout=30)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == "invalid_client"
    assert said in answer.json()["error_description"]
    assert "location" not in answer.headers
    assert len(owner_tokens(served, owner)) == before


# -- the consent page ---------------------------------------------------------------------------


def opened_consent(served: Fleet, browser: httpx.Client) -> str:
    client_id = register(served, "Page Host")
    _verifier, code_challenge = challenge()
    opened = browser.get(authorization_url(served, client_id, code_challenge))
    assert opened.status_code == 302
    location: str = opened.headers["location"]
    return location


def test_the_consent_page_refuses_framing_and_shows_client_origin_and_role(served):
    with httpx.Client(verify=TLS, timeout=30) as browser:
        page = browser.get(opened_consent(served, browser))
    assert page.status_code == 200
    assert page.headers["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]
    assert page.headers["Cache-Control"] == "no-store"
    assert "Page Host" in page.text and "a name of its own choosing" in page.text
    assert '<strong id="role">agent</strong>' in page.text
    assert "127.0.0.1:9" in page.text  # where the answer goes


def test_deny_returns_access_denied_and_grants_nothing(served):
    owner, _agent = new_tokens(served)
    before = len(owner_tokens(served, owner))
    client_id = register(served, "Denied Host")
    _verifier, code_challenge = challenge()
    with httpx.Client(verify=TLS, timeout=30) as browser:
        url = authorization_url(served, client_id, code_challenge)
        answer = consent(browser, url, owner, decision="deny")
    assert answer.status_code == 303
    found = query(answer)
    assert found["error"] == "access_denied" and found["state"] == "s-1"
    assert "code" not in found
    assert len(owner_tokens(served, owner)) == before


def test_another_owner_cant_answer_a_request_one_owner_signed_in_to(served):
    first, _ = new_tokens(served)
    second, _ = new_tokens(served)
    with (
        httpx.Client(verify=TLS, timeout=30) as browser,
        httpx.Client(verify=TLS, timeout=30) as intruder,
    ):
        consent_url = opened_consent(served, browser)
        signed = sign_in(browser, consent_url, first)
        assert signed.status_code == 200
        taken = sign_in(intruder, consent_url, second)
        assert taken.status_code == 403
        assert 'data-code="another_owners_authorization"' in taken.text
        # The intruder's own sign-in (another request) does not answer this one.
        own = sign_in(intruder, opened_consent(served, intruder), second)
        assert own.status_code == 200
        stolen = intruder.post(
            consent_url.split("?")[0],
            data={**fields(signed.text), "decision": "allow"},
        )
        assert stolen.status_code == 403 and 'data-code="not_signed_in"' in stolen.text
        # The owner's own answer still works.
        allowed = browser.post(
            consent_url.split("?")[0], data={**fields(signed.text), "decision": "allow"}
        )
        assert allowed.status_code == 303 and "code" in query(allowed)


def test_the_answer_needs_its_csrf_token_and_this_sites_origin(served):
    owner, _agent = new_tokens(served)
    with httpx.Client(verify=TLS, timeout=30) as browser:
        consent_url = opened_consent(served, browser)
        signed = sign_in(browser, consent_url, owner)
        target = consent_url.split("?")[0]
        form = fields(signed.text)
        forged = browser.post(target, data={**form, "csrf": "0" * 64, "decision": "allow"})
        assert forged.status_code == 403 and 'data-code="not_signed_in"' in forged.text
        elsewhere = browser.post(
            target,
            data={**form, "decision": "allow"},
            headers={"Origin": "https://evil.example"},
        )
        assert elsewhere.status_code == 403
        with transaction(served.services.sessions) as session:
            assert session.scalar(
                select(func.count()).select_from(OAuthGrant).where(
                    OAuthGrant.code_hash.is_not(None), OAuthGrant.decided_at.is_not(None),
                    OAuthGrant.request_hash == digest_of(form["request"]),
                )
            ) == 0  # fmt: skip


def test_signing_in_takes_the_owners_own_token_only(served):
    _owner, agent = new_tokens(served)
    with httpx.Client(verify=TLS, timeout=30) as browser:
        consent_url = opened_consent(served, browser)
        with_agent = sign_in(browser, consent_url, agent)
        assert with_agent.status_code == 403 and 'data-code="owner_only"' in with_agent.text
        wrong = sign_in(browser, consent_url, "sf_wrong")
        assert wrong.status_code == 401 and 'data-code="unauthorized"' in wrong.text


@pytest.mark.parametrize("request_id", ["", "../../etc", "a\x00b", "x" * 300, "unknown"])
def test_an_unknown_request_gets_a_clear_page(served, request_id):
    page = httpx.get(f"{served.url}/oauth/consent", params={"request": request_id}, timeout=30)
    assert page.status_code == 404
    assert 'data-code="authorization_not_found"' in page.text


def test_the_consent_form_takes_a_small_url_encoded_form_only(served):
    as_json = httpx.post(f"{served.url}/oauth/consent", json={"decision": "allow"}, timeout=30)
    assert as_json.status_code == 415
    huge = httpx.post(
        f"{served.url}/oauth/consent", data={"request": "x" * 20_000, "decision": "allow"},
        timeout=30,
    )  # fmt: skip
    assert huge.status_code == 413
    nothing = httpx.post(f"{served.url}/oauth/consent", data={"decision": "maybe"}, timeout=30)
    assert nothing.status_code == 400


def digest_of(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def test_a_host_revoking_its_token_ends_its_access(served):
    owner, _agent = new_tokens(served)
    client_id, tokens = by_hand(served, owner, "Leaving Host")
    other_id = register(served, "Other Host")
    # The SDK's revocation handler wants client_secret present, empty for a public client.
    form = {"token": tokens["access_token"], "client_id": other_id, "client_secret": ""}
    not_its_own = httpx.post(f"{served.url}/oauth/revoke", data=form, timeout=30)
    assert not_its_own.status_code == 200  # RFC 7009: answered alike, nothing revoked
    assert post_mcp(served.url, tokens["access_token"]).status_code == 200
    form = {"token": tokens["access_token"], "client_id": client_id, "client_secret": ""}
    revoked = httpx.post(f"{served.url}/oauth/revoke", data=form, timeout=30)
    assert revoked.status_code == 200
    assert post_mcp(served.url, tokens["access_token"]).status_code == 401
    assert refresh(served, client_id, tokens["refresh_token"]).status_code == 400
    assert "Leaving Host" not in [t["label"] for t in owner_tokens(served, owner)]


def test_two_refreshes_with_one_token_at_once_leave_at_most_one_host_token(served):
    owner, _agent = new_tokens(served)
    client_id, tokens = by_hand(served, owner, "Hurried Host")
    results: list[httpx.Response] = []

    def once() -> None:
        results.append(refresh(served, client_id, tokens["refresh_token"]))

    threads = [threading.Thread(target=once) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(r.status_code in (200, 400) for r in results), [r.text for r in results]
    assert sum(r.status_code == 200 for r in results) <= 1
    # Whatever won, a refresh token used twice revoked the host: nothing it holds works.
    held = [r.json()["access_token"] for r in results if r.status_code == 200]
    assert all(post_mcp(served.url, access).status_code == 401 for access in held)


def test_the_token_endpoint_refuses_unknown_clients_and_wrong_shapes(served):
    unknown = httpx.post(
        f"{served.url}/oauth/token",
        data={"grant_type": "authorization_code", "client_id": "nobody", "code": "x"},
        timeout=30,
    )
    assert unknown.status_code == 401 and unknown.json()["error"] == "invalid_client"
    client_id = register(served)
    for form in (
        {"grant_type": "password", "client_id": client_id, "username": "u", "password": "p"},
        {"grant_type": "authorization_code", "client_id": client_id},
        {"grant_type": "refresh_token", "client_id": client_id},
    ):
        answer = httpx.post(f"{served.url}/oauth/token", data=form, timeout=30)
        assert answer.status_code == 400, form
        assert answer.json()["error"] in ("invalid_request", "unsupported_grant_type"), form
    as_json = httpx.post(
        f"{served.url}/oauth/token", json={"grant_type": "refresh_token"}, timeout=30
    )
    assert as_json.status_code in (400, 401)
    assert "access_token" not in as_json.text

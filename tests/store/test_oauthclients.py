"""OAuth clients' metadata, judged before anything is fetched or stored: client_id URLs of
metadata documents, redirect URIs, the name an owner sees."""

from __future__ import annotations

import pytest

from store.egress import Egress, EgressRefused
from store.oauthclients import (
    ClientRefused,
    check_document_url,
    check_redirect_uri,
    display_name,
    is_document_url,
)


@pytest.mark.parametrize(
    ("url", "refusal"),
    [
        ("http://client.example.com/meta.json", ClientRefused),  # not https
        ("https://client.example.com", ClientRefused),  # no path
        ("https://client.example.com/", ClientRefused),
        ("https://client.example.com/meta.json#frag", ClientRefused),
        ("https://user:pw@client.example.com/meta.json", ClientRefused),
        ("https://client.example.com/" + "a" * 300, ClientRefused),
        ("https://127.0.0.1/meta.json", EgressRefused),
        ("https://10.0.0.8/meta.json", EgressRefused),
        ("https://[::1]/meta.json", EgressRefused),
        ("https://2130706433/meta.json", EgressRefused),  # 127.0.0.1 written as a number
        ("https://metadata.internal/meta.json", EgressRefused),
        ("https://localhost/meta.json", EgressRefused),
    ],
)
def test_a_document_url_that_may_not_be_fetched_is_refused(url, refusal):
    with pytest.raises(refusal):
        check_document_url(url, Egress())


def test_an_allowed_host_may_serve_its_document_over_plain_http():
    check_document_url("http://127.0.0.1:8080/meta.json", Egress(["127.0.0.1"]))
    with pytest.raises(ClientRefused):
        check_document_url("http://127.0.0.1:8080/meta.json", Egress())


@pytest.mark.parametrize(
    "uri",
    [
        "javascript:alert(1)",
        "data:text/html,hi",
        "file:///etc/passwd",
        "http://evil.example/callback",
        "https://app.example/cb#fragment",
        "no-scheme",
    ],
)
def test_redirect_uris_a_browser_would_not_return_through_are_refused(uri):
    with pytest.raises(ClientRefused):
        check_redirect_uri(uri)


@pytest.mark.parametrize(
    "uri",
    ["https://app.example/cb", "http://127.0.0.1:33418/cb", "http://localhost/cb", "cursor://x/cb"],
)
def test_https_loopback_and_app_redirects_are_kept(uri):
    check_redirect_uri(uri)


def test_the_name_an_owner_sees_is_one_bounded_line():
    assert display_name({"client_name": "Claude\nCode\x00"}) == "Claude Code"
    assert len(display_name({"client_name": "x" * 1000})) == 200
    assert display_name({"client_name": "  ", "client_id": "abc"}) == "abc"
    assert display_name({"client_name": 5, "client_id": "id-1"}) == "id-1"


def test_a_client_id_url_names_a_document():
    assert is_document_url("https://claude.ai/oauth/mcp-oauth-client-metadata")
    assert not is_document_url("1f0c2f1e-uuid")

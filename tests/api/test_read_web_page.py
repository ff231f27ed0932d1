"""read_web_page over POST /api/tools: host grants, allowed domains, refused addresses, limits.

The pages come from a real HTTP server on 127.0.0.1 that the settings allow, as an operator
lists a test host in SKILLFLEET_EGRESS_ALLOW. Only loopback is ever connected to
(tests/netguard.py stops anything else before it connects).
"""

from __future__ import annotations

import contextlib
import io
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import REDIS_URL
from factories import skill_files, zip_bytes
from netguard import watched_connections
from sqlalchemy import select
from trickle import trickling

from broker import webtools
from broker.webpages import AddressRefused, PageLimits, PageTimeout, ReadersBusy, WebPageError
from broker.webtools import PageReader
from store.db import transaction
from store.egress import Egress
from store.lifecycle import jobruns
from store.limits import MAX_WEB_PAGE_BYTES, RESULT_CAP, WEB_PAGES_AT_ONCE
from store.models import Grant
from store.settings import Settings

PAGE = (
    b"<!doctype html><html><head><title> Release  notes </title><style>p{}</style></head>"
    b"<body><h1>Version 2</h1><p>Read the <a href='/x'>guide</a> first.</p>"
    b"<ul><li>faster</li><li>smaller</li></ul><script>alert('no')</script></body></html>"
)
LONG_TEXT = ("A line of plain text that repeats.\n" * 3000).encode()


class Pages(BaseHTTPRequestHandler):
    """The test host's pages; `/to/<where>` redirects."""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        port = self.server.server_address[1]
        redirects = {
            "/to/page": "/page",
            "/to/loopback": f"http://127.0.0.2:{port}/page",
            "/to/private": "http://10.0.0.1/page",
            "/to/metadata": "http://169.254.169.254/latest/meta-data/",
            "/to/ftp": "ftp://127.0.0.1/file",
            "/to/userinfo": "https://user@example.com/",
            "/loop": "/loop",
        }
        if self.path in redirects:
            self._send(302, b"", "text/plain", Location=redirects[self.path])
        elif self.path == "/page":
            self._send(200, PAGE, "text/html; charset=utf-8")
        elif self.path == "/notes.md":
            self._send(200, b"# Notes\n\n* one\n", "text/markdown")
        elif self.path == "/odd-charset":
            self._send(200, "caf\u00e9".encode(), "text/plain; charset=no-such-codec")
        elif self.path == "/data":
            self._send(200, b'{"version": 2}', "application/json")
        elif self.path == "/long":
            self._send(200, LONG_TEXT, "text/plain")
        elif self.path == "/big":  # no Content-Length: refused while it is read
            self._send(200, b"x" * (MAX_WEB_PAGE_BYTES + 1), "text/plain", length=False)
        elif self.path == "/file.pdf":
            self._send(200, b"%PDF-1.7", "application/pdf")
        else:
            self._send(404, b"not here", "text/plain")

    def _send(self, status: int, body: bytes, kind: str, length: bool = True, **headers: str):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        if length:
            self.send_header("Content-Length", str(len(body)))
        else:
            self.send_header("Connection", "close")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    """The test host's base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    """The operator allows the test host 127.0.0.1; every other address must be public."""
    return Settings(
        data_dir=tmp_path / "var", database_url=database_url, redis_url=REDIS_URL, dry_run=True,
        egress_allow=("127.0.0.1",),
    )  # fmt: skip


def read(client, auth, url: object, chat: str = "chat-1", **envelope: str) -> dict:
    body = {"arguments": {"url": url}, "chat_id": chat, **envelope}
    response = client.post("/api/tools/read_web_page", headers=auth, json=body)
    assert response.status_code == 200, response.json
    return response.json


def pending(client, auth) -> list[dict]:
    return client.get("/api/approvals?status=pending", headers=auth).json


def grant_for_chat(client, auth, agent_auth, site: str, chat: str = "chat-1") -> dict:
    """The owner answers the chat's first read "approve for this chat"; the call's envelope."""
    asked = read(client, agent_auth, f"{site}/page", chat)
    assert asked["status"] == "pending_approval", asked
    response = client.post(
        f"/api/approvals/{asked['approval_id']}", headers=auth,
        json={"decision": "approve_for_chat"},
    )  # fmt: skip
    assert response.status_code == 200, response.json
    return client.get(f"/api/calls/{asked['call_id']}", headers=auth).json


def test_a_host_asks_first_and_after_approve_for_chat_its_pages_are_read_without_asking(
    client, auth, agent_auth, site
):
    asked = read(client, agent_auth, f"{site}/page#part")
    approval = client.get(f"/api/approvals/{asked['approval_id']}", headers=auth).json
    assert approval["tool"] == "read_web_page" and approval["rule"] == "web-asks"
    assert approval["grant_key"] == "host:127.0.0.1" and approval["offers_chat_grant"] is True
    assert approval["arguments"] == {"url": f"{site}/page"}  # the fragment is never sent
    assert f"This reads {site}/page from 127.0.0.1" in approval["warning"]
    answered = client.post(
        f"/api/approvals/{asked['approval_id']}", headers=auth,
        json={"decision": "approve_for_chat"},
    )  # fmt: skip
    assert answered.status_code == 200, answered.json

    first = client.get(f"/api/calls/{asked['call_id']}", headers=auth).json
    second = read(client, agent_auth, f"{site}/to/page")

    assert first["status"] == "done"
    assert second["status"] == "done" and "approval_id" not in second
    assert second["result"] == {
        "url": f"{site}/page",
        "status": 200,
        "title": "Release notes",
        "content": "# Version 2\n\nRead the guide first.\n\n- faster\n- smaller",
    }
    assert read(client, agent_auth, f"{site}/notes.md")["result"]["content"] == "# Notes\n\n* one\n"
    assert read(client, agent_auth, f"{site}/data")["result"]["content"] == '{"version": 2}'
    assert read(client, agent_auth, f"{site}/odd-charset")["result"]["content"] == "caf\u00e9"
    # The grant is the chat's: another chat is asked again.
    assert read(client, agent_auth, f"{site}/page", chat="chat-2")["status"] == "pending_approval"


def test_a_long_page_is_cut_to_fit_the_result_cap_and_says_so(client, auth, agent_auth, site):
    grant_for_chat(client, auth, agent_auth, site)

    result = read(client, agent_auth, f"{site}/long")["result"]

    assert result["truncated"] is True
    assert LONG_TEXT.decode().startswith(result["content"])
    assert RESULT_CAP - 8 * 1024 < len(result["content"]) < RESULT_CAP


MALFORMED = [
    "example.com/page",
    "ftp://example.com/file",
    "http://user:secret@example.com/",
    "http://user@127.0.0.1/",
    "http://exa\x00mple.com/",
    "http://example.com/a b",
    "http://example.com/\u202e",
    "https:///no-host",
    "http://example.com:99999/",
    "https://example.com/" + "a" * 3000,
    "",
    5,
    None,
]


def test_malformed_urls_fail_at_once_and_ask_nobody(client, auth, agent_auth):
    with watched_connections() as connections:
        envelopes = [read(client, agent_auth, url) for url in MALFORMED]

    assert [e["status"] for e in envelopes] == ["failed"] * len(MALFORMED)
    assert {e["error"]["code"] for e in envelopes} == {"invalid_url"}
    assert "3020 characters; the most is 2048" in envelopes[-4]["error"]["message"]
    assert "not an http or https URL" in envelopes[1]["error"]["message"]
    assert pending(client, auth) == []
    assert {port for _host, port in connections} <= {5432, 6379}
    wrong_shape = client.post(
        "/api/tools/read_web_page", headers=agent_auth, json={"arguments": ["http://a.com/"]}
    )
    assert wrong_shape.status_code == 400 and wrong_shape.json["code"] == "invalid_call"


REFUSED = [
    ("http://10.0.0.1/", "a private address"),
    ("http://169.254.169.254/latest/meta-data/", "a link-local address"),
    ("http://metadata.google.internal/computeMetadata/v1/", "a name of a local network"),
    ("http://127.0.0.2/", "a loopback address"),
    ("http://2130706434/", "is 127.0.0.2, a loopback address"),
    ("http://localhost/", "a name of a local network"),
    ("http://[::1]/", "a loopback address"),
    ("http://[::ffff:a9fe:a9fe]/", "which holds 169.254.169.254, a link-local address"),
]


def test_addresses_that_are_not_public_fail_before_any_connection_and_ask_nobody(
    client, auth, agent_auth
):
    with watched_connections() as connections:
        envelopes = [read(client, agent_auth, url) for url, _reason in REFUSED]

    for envelope, (url, reason) in zip(envelopes, REFUSED, strict=True):
        assert envelope["status"] == "failed", url
        assert envelope["error"]["code"] == "web_address_refused", url
        assert reason in envelope["error"]["message"], url
    assert pending(client, auth) == []
    assert {port for _host, port in connections} <= {5432, 6379}


# What a resolver answers for these names: DNS is an edge the tests can't reach.
RESOLVED = {
    "intranet.example.com": ["93.184.215.14", "10.1.2.3"],
    "public.example.com": ["93.184.215.14"],
}


def stand_in_resolver(host: str, port: int) -> list[str]:
    if host not in RESOLVED:
        raise OSError(f"no address for {host}")
    return RESOLVED[host]


def test_a_name_that_resolves_to_no_public_address_fails_instead_of_asking_the_owner(
    services, client, auth, agent_auth
):
    services.broker.registry.add(webtools.tools(Egress(resolver=stand_in_resolver))[0])

    with watched_connections() as connections:
        inside = read(client, agent_auth, "http://intranet.example.com/wiki")
        nowhere = read(client, agent_auth, "https://nowhere.example.com/")
        public = read(client, agent_auth, "https://public.example.com/page")

    assert inside["status"] == "failed" and inside["error"]["code"] == "web_address_refused"
    refused = inside["error"]["message"]
    assert "'intranet.example.com' resolves to 10.1.2.3, a private address" in refused
    assert nowhere["status"] == "failed" and nowhere["error"]["code"] == "web_address_refused"
    assert "does not resolve to an address" in nowhere["error"]["message"]
    # Only the public name is put to the owner, and nothing was connected to.
    assert [a["call_id"] for a in pending(client, auth)] == [public["call_id"]]
    assert public["status"] == "pending_approval"
    assert {port for _host, port in connections} <= {5432, 6379}


def test_redirects_are_checked_hop_by_hop_and_errors_have_their_codes(
    client, auth, agent_auth, site
):
    grant_for_chat(client, auth, agent_auth, site)
    port = int(site.rsplit(":", 1)[1])
    cases = {
        "/to/loopback": ("web_address_refused", "the redirect target is refused: '127.0.0.2'"),
        "/to/private": ("web_address_refused", "10.0.0.1, a private address"),
        "/to/metadata": ("web_address_refused", "169.254.169.254, a link-local address"),
        "/to/ftp": ("invalid_url", "the redirect target 'ftp://127.0.0.1/file' is not an http"),
        "/to/userinfo": ("invalid_url", "the redirect target 'https://user@example.com/' holds"),
        "/loop": ("web_too_many_redirects", "redirected more than 5 times"),
        "/big": ("web_page_too_large", "larger than 2048 KiB"),
        "/file.pdf": ("web_content_type", "is application/pdf; read_web_page reads HTML"),
        "/missing": ("web_http_error", "answered 404 Not Found"),
    }

    with watched_connections() as connections:
        envelopes = {path: read(client, agent_auth, f"{site}{path}") for path in cases}

    for path, (code, message) in cases.items():
        assert envelopes[path]["status"] == "failed", path
        assert envelopes[path]["error"]["code"] == code, path
        assert message in envelopes[path]["error"]["message"], path
    reached = {address for address, p in connections if p not in (5432, 6379)}
    assert reached == {"127.0.0.1"}  # the test host only, never a redirect's target
    assert (("127.0.0.1", port) in connections) and pending(client, auth) == []


def test_a_loaded_skills_allowed_domains_are_granted_in_its_chat_until_it_changes(
    client, auth, agent_auth, site
):
    def install(body: str) -> None:
        files = skill_files("docs-reader", metadata={"skillfleet.allowed-domains": "127.0.0.1"})
        files["references/extra.md"] = body.encode()
        response = client.post(
            "/api/skills?replace=true", headers=auth,
            data={"file": (io.BytesIO(zip_bytes(files, top="docs-reader")), "s.zip")},
            content_type="multipart/form-data",
        )  # fmt: skip
        assert response.status_code == 201, response.json

    install("First version.")
    assert read(client, agent_auth, f"{site}/page")["status"] == "pending_approval"
    loaded = client.post(
        "/api/tools/load_skill", headers=agent_auth,
        json={"arguments": {"skill_name": "docs-reader"}, "chat_id": "chat-1"},
    )  # fmt: skip
    assert loaded.json["status"] == "done", loaded.json

    in_chat = read(client, agent_auth, f"{site}/page")
    elsewhere = read(client, agent_auth, f"{site}/page", chat="chat-2")
    install("Second version.")  # the chat loaded the first: the new one grants nothing yet
    after_change = read(client, agent_auth, f"{site}/page")

    assert in_chat["status"] == "done" and in_chat["result"]["title"] == "Release notes"
    assert elsewhere["status"] == "pending_approval"
    assert after_change["status"] == "pending_approval"


def test_fifty_reads_at_once_each_ask_and_fifty_answers_for_the_chat_make_one_grant(
    app, client, auth, agent_auth, services, site
):
    def ask(_: int) -> dict:
        return read(app.test_client(), agent_auth, f"{site}/page", chat="race")

    def approve(approval_id: str) -> int:
        answer = {"decision": "approve_for_chat"}
        url = f"/api/approvals/{approval_id}"
        return app.test_client().post(url, headers=auth, json=answer).status_code

    with ThreadPoolExecutor(max_workers=16) as pool:
        asked = list(pool.map(ask, range(50)))
        answered = list(pool.map(approve, [envelope["approval_id"] for envelope in asked]))

    assert {envelope["status"] for envelope in asked} == {"pending_approval"}
    assert answered == [200] * 50
    with services.sessions() as session:
        keys = session.scalars(select(Grant.key).where(Grant.scope == "chat")).all()
    assert keys == ["host:127.0.0.1"]
    calls = [client.get(f"/api/calls/{e['call_id']}", headers=auth).json for e in asked]
    # Fifty approved reads run at once: those past the process's limit fail at once, saying so.
    ran = [call for call in calls if call["status"] == "done"]
    busy = [call for call in calls if call["status"] != "done"]
    assert len(ran) >= WEB_PAGES_AT_ONCE
    assert {(call["status"], call["error_code"]) for call in busy} <= {("failed", "web_busy")}
    # The chat's turn made its 50 calls; a new turn reads the host without asking.
    assert read(client, agent_auth, f"{site}/data", "race", turn_id="t2")["status"] == "done"


def test_hosts_in_the_owners_settings_are_read_in_every_chat_without_asking(
    client, auth, agent_auth, site
):
    refused = client.put("/api/settings", headers=auth, json={"auto_tools": ["host:a.com/x"]})
    saved = client.put(
        "/api/settings", headers=auth, json={"auto_tools": ["host:127.0.0.1", "host:Docs.Example."]}
    )

    assert refused.status_code == 422 and refused.json["code"] == "invalid_setting"
    assert saved.status_code == 200, saved.json
    assert saved.json["auto_tools"] == ["host:127.0.0.1", "host:docs.example"]
    for chat in ("chat-1", "chat-2"):
        assert read(client, agent_auth, f"{site}/page", chat)["status"] == "done"


def test_approve_for_job_saves_the_host_to_the_job_whose_next_runs_read_it_without_asking(
    client, auth, services, site
):
    job = {"name": "digest", "cron": "0 6 * * *", "steps": [{"tool": "list_skills"}]}
    job_id = client.post("/api/jobs", headers=auth, json=job).json["id"]

    def read_in_a_new_run() -> dict:
        run_id = client.post(f"/api/jobs/{job_id}/run", headers=auth).json["job_run_id"]
        body = {"arguments": {"url": f"{site}/page"}, "job_run_id": run_id}
        envelope = client.post("/api/tools/read_web_page", headers=auth, json=body).json
        with transaction(services.sessions) as session:
            jobruns.succeed(session, jobruns.claim(session, run_id, "test"), "test")
        return envelope

    first = read_in_a_new_run()
    approved = client.post(
        f"/api/approvals/{first['approval_id']}", headers=auth,
        json={"decision": "approve_for_job"},
    )  # fmt: skip
    shown = client.get(f"/api/jobs/{job_id}", headers=auth).json
    again = read_in_a_new_run()
    bad = {**shown, "grants": {**shown["grants"], "hosts": ["127.0.0.1:80"]}}
    refused = client.put(f"/api/jobs/{job_id}", headers=auth, json=_job_body(bad))
    kept = client.put(f"/api/jobs/{job_id}", headers=auth, json=_job_body(shown))

    assert first["status"] == "pending_approval" and approved.status_code == 200
    assert shown["grants"] == {"tools": [], "skills": [], "hosts": ["127.0.0.1"]}
    assert again["status"] == "done" and again["result"]["title"] == "Release notes"
    assert refused.status_code == 422 and refused.json["code"] == "grant_invalid"
    assert kept.status_code == 200 and kept.json["grants"]["hosts"] == ["127.0.0.1"]


def _job_body(job: dict) -> dict:
    fields = ("name", "cron", "time_zone", "steps", "skills", "enabled", "grants")
    return {name: job[name] for name in fields}


def test_reading_is_not_a_change_so_plan_mode_reads_granted_hosts(client, auth, agent_auth, site):
    grant_for_chat(client, auth, agent_auth, site)
    body = {"arguments": {"url": f"{site}/page"}, "chat_id": "chat-1", "mode": "plan"}

    envelope = client.post("/api/tools/read_web_page", headers=agent_auth, json=body).json

    assert envelope["status"] == "done"


def test_calls_need_a_token_and_another_owner_has_no_grant(
    client, auth, other_auth, agent_auth, site
):
    grant_for_chat(client, auth, agent_auth, site)
    body = {"arguments": {"url": f"{site}/page"}, "chat_id": "chat-1"}

    anonymous = client.post("/api/tools/read_web_page", json=body)
    others = read(client, other_auth, f"{site}/page")

    assert anonymous.status_code == 401
    assert others["status"] == "pending_approval"  # bob's chat-1 is not alice's


def test_the_tool_is_listed_with_its_url_parameter(client, agent_auth):
    definitions = client.get("/api/tools", headers=agent_auth).json
    [tool] = [d["function"] for d in definitions if d["function"]["name"] == "read_web_page"]
    assert tool["parameters"]["required"] == ["url"]


def test_a_reader_without_allowed_hosts_refuses_loopback_before_connecting(site):
    reader = PageReader(Egress())

    with watched_connections() as connections, pytest.raises(AddressRefused, match="loopback"):
        reader(None, {"url": f"{site}/page"})  # type: ignore[arg-type]

    assert connections == []


def test_a_page_slower_than_the_time_limit_fails_with_a_timeout():
    handler = silent()
    with ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        reader = PageReader(Egress(["127.0.0.1"]), PageLimits(seconds=0.3))
        try:
            with pytest.raises(PageTimeout, match="was not read within 0.3 seconds"):
                reader(None, {"url": f"http://127.0.0.1:{server.server_port}/"})  # type: ignore[arg-type]
        finally:
            handler.release.set()
            server.shutdown()


def test_sites_trickling_their_headers_are_cut_off_at_the_deadline_and_free_their_readers(site):
    reader = PageReader(Egress(["127.0.0.1"]), PageLimits(seconds=1.5, at_once=2))
    failures: list[WebPageError] = []

    def read_slowly(url: str) -> None:
        try:
            reader(None, {"url": url})  # type: ignore[arg-type]
        except WebPageError as e:
            failures.append(e)

    with trickling("head", every=0.5) as slow:
        readers = [threading.Thread(target=read_slowly, args=(f"{slow.url}/p",)) for _ in "ab"]
        started = time.monotonic()
        for thread in readers:
            thread.start()
        for thread in readers:
            thread.join(15)
        took = time.monotonic() - started

    assert slow.requests == 2 and slow.sent >= 2  # both were answered, a byte at a time
    assert [(type(e), e.code) for e in failures] == [(PageTimeout, "web_timeout")] * 2
    assert all("/p was not read within 1.5 seconds" in e.message for e in failures)
    assert 1.5 <= took < 4.5
    assert reader(None, {"url": f"{site}/page"})["status"] == 200  # type: ignore[arg-type]


class _Silent(BaseHTTPRequestHandler):
    """Sends headers, then nothing until released. Each test takes a class of its own
    (`silent()`): a request left from another test must not count as one of its own."""

    release: threading.Event
    arrived: threading.Semaphore

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        self.arrived.release()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", "10")
        self.end_headers()
        self.wfile.flush()
        self.release.wait(10)


def silent() -> type[_Silent]:
    """A handler class of `_Silent` with an event and a count of its own."""
    return type(
        "Silent", (_Silent,), {"release": threading.Event(), "arrived": threading.Semaphore(0)}
    )


def test_pages_past_the_processs_limit_fail_at_once_instead_of_taking_every_thread(site):
    handler = silent()
    with ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        reader = PageReader(Egress(["127.0.0.1"]), PageLimits(seconds=30, at_once=2))
        held = {"url": f"http://127.0.0.1:{server.server_port}/"}
        slow = [threading.Thread(target=_quietly, args=(reader, held)) for _ in range(2)]
        try:
            for thread in slow:
                thread.start()
            for _ in slow:
                assert handler.arrived.acquire(timeout=10), "a slow read never reached the site"
            with pytest.raises(ReadersBusy, match="2 pages are being read already"):
                reader(None, {"url": f"{site}/page"})  # type: ignore[arg-type]
        finally:
            handler.release.set()
            for thread in slow:
                thread.join(15)
            server.shutdown()
    assert reader(None, {"url": f"{site}/page"})["status"] == 200  # type: ignore[arg-type]


def _quietly(reader: PageReader, arguments: dict) -> None:
    with contextlib.suppress(Exception):
        reader(None, arguments)  # type: ignore[arg-type]

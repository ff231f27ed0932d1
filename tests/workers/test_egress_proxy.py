"""The egress proxy's rules, and the proxy itself on a Unix socket in front of a loopback server.

The container tests (test_container_egress.py) prove the same program inside real containers;
these run it in the test process, in a fraction of a second.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from workers.runners.egress import SPECIAL_NETWORKS, Egress
from workers.runners.egress_proxy import Policy, Refused, run_proxy, split_target


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the standard library's name
        body = f"hello {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture(scope="module")
def origin() -> Iterator[int]:
    """A loopback HTTP server's port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()


def ask(socket_path: Path, policy: Policy, request: bytes) -> bytes:
    """Start the proxy on `socket_path`, send one request through it, return what came back."""

    async def exchange() -> bytes:
        proxy = asyncio.create_task(run_proxy(str(socket_path), policy))
        for _ in range(200):
            if socket_path.exists():
                break
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_unix_connection(str(socket_path))
        writer.write(request)
        await writer.drain()
        reply = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        proxy.cancel()
        return reply

    return asyncio.run(exchange())


def test_only_a_listed_host_on_a_listed_port_passes_the_policy() -> None:
    policy = Policy(["api.example.com"], [443], private=False)

    assert policy.check("API.Example.COM.", 443) == "api.example.com"
    for host, port, reason in [
        ("sub.api.example.com", 443, "sub.api.example.com is not in the skill's allowed-domains"),
        ("example.com", 443, "example.com is not in the skill's allowed-domains"),
        ("93.184.215.14", 443, "93.184.215.14 is not in the skill's allowed-domains"),
        ("api.example.com", 22, "port 22 is not allowed (only 443)"),
    ]:
        with pytest.raises(Refused) as refused:
            policy.check(host, port)
        assert (refused.value.status, refused.value.reason) == (403, reason)


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("example.com:443", ("example.com", 443)),
        ("example.com", ("example.com", 80)),
        ("[::1]:8443", ("::1", 8443)),
        ("::1", ("::1", 80)),  # a bare IPv6 address: never a listed name
    ],
)
def test_a_target_is_split_into_host_and_port(target: str, expected: tuple[str, int]) -> None:
    assert split_target(target, 80) == expected


@pytest.mark.parametrize("target", ["example.com:x", "example.com:0", "example.com:70000", ":80"])
def test_a_malformed_target_is_a_bad_request(target: str) -> None:
    with pytest.raises(Refused) as refused:
        split_target(target, 80)
    assert refused.value.status == 400


def test_a_request_to_a_listed_host_is_forwarded_in_origin_form(tmp_path, origin) -> None:
    policy = Policy(["localhost"], [origin], private=True)
    request = f"GET http://localhost:{origin}/x?y=1 HTTP/1.1\r\nHost: localhost\r\n\r\n"

    reply = ask(tmp_path / "p.sock", policy, request.encode())

    assert reply.startswith(b"HTTP/1.0 200") and reply.endswith(b"hello /x?y=1")


def test_a_tunnel_to_a_listed_host_is_opened(tmp_path, origin) -> None:
    policy = Policy(["localhost"], [origin], private=True)
    request = f"CONNECT localhost:{origin} HTTP/1.1\r\n\r\nGET /t HTTP/1.0\r\n\r\n"

    reply = ask(tmp_path / "p.sock", policy, request.encode())

    assert reply.startswith(b"HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.0 200")
    assert reply.endswith(b"hello /t")


def test_a_listed_name_that_resolves_to_a_private_address_is_refused_by_default(
    tmp_path, origin
) -> None:
    policy = Policy(["localhost"], [origin], private=False)

    reply = ask(
        tmp_path / "p.sock", policy, f"CONNECT localhost:{origin} HTTP/1.1\r\n\r\n".encode()
    )

    assert reply.startswith(b"HTTP/1.1 403 Forbidden")
    assert reply.endswith(b"localhost resolves to an address that is not public.\n")


def test_what_is_not_a_proxy_request_is_a_bad_request(tmp_path, origin) -> None:
    policy = Policy(["localhost"], [origin], private=True)

    reply = ask(tmp_path / "p.sock", policy, b"GET /relative HTTP/1.1\r\n\r\n")

    assert reply.startswith(b"HTTP/1.1 400 Bad Request")


@pytest.mark.parametrize(
    "address", ["3fff::1", "3fff:fff::1", "192.0.0.8", "5f00::1", "2001:db8::1"]
)
def test_the_proxy_refuses_every_iana_special_purpose_block_the_worker_names(address: str) -> None:
    policy = Policy(["api.example.com"], [443], private=False, special=SPECIAL_NETWORKS)
    assert not policy.public(address)
    assert policy.public("93.184.215.14") and policy.public(
        "2606:2800:21f:cb07:6820:80da:af6b:8b2c"
    )


def test_the_proxy_is_started_with_the_special_purpose_blocks() -> None:
    gates = Egress(lambda: None, "skillfleet/runner:latest", "skillfleet.run")  # type: ignore[arg-type, return-value]
    command = gates.command(("api.example.com",))
    assert json.loads(command[-1]) == SPECIAL_NETWORKS
    assert "3fff::/20" in SPECIAL_NETWORKS and "192.0.0.8/32" in SPECIAL_NETWORKS

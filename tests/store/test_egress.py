"""The egress check: hosts resolved once, every address judged, connections only to the
address that was checked, with the URL's name kept for Host, SNI and the certificate.

DNS is the one edge stood in for (`Answers`, a resolver whose answers the test sets); every
connection goes to a real HTTP(S) server on loopback, and tests/netguard.py stops any other
before it is made.
"""

from __future__ import annotations

import datetime
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from netguard import watched_connections

from store.egress import Egress, EgressRefused
from store.settings import Settings, SettingsError

NAME = "hooks.example.org"


@dataclass
class Answers:
    """A resolver standing in for DNS: each call takes the next answer (the last one stays)."""

    answers: list[list[str]]
    asked: list[str] = field(default_factory=list)

    def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        if len(self.answers) > 1:
            return self.answers.pop(0)
        if not self.answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return self.answers[0]


@dataclass
class Server:
    port: int
    got: list[tuple[str, dict[str, str]]]
    names: list[str | None]  # the SNI of each TLS handshake


@contextmanager
def server(tls: ssl.SSLContext | None = None) -> Iterator[Server]:
    """A loopback HTTP(S) server: /redirect?to=URL answers 302 to URL, anything else 200."""
    state = Server(0, [], [])

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - the http.server name
            state.got.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            if self.path.startswith("/redirect?to="):
                self.send_response(302)
                self.send_header("Location", self.path.removeprefix("/redirect?to="))
            else:
                self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if tls is not None:
        tls.sni_callback = lambda _socket, name, _context: state.names.append(name)
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    state.port = httpd.server_port
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()


def certificate(folder: Path, name: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A self-signed certificate for `name`: the server's context and a client's that trusts it."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    (folder / "cert.pem").write_bytes(pem)
    (folder / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    served = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    served.load_cert_chain(folder / "cert.pem", folder / "key.pem")
    return served, ssl.create_default_context(cadata=pem.decode())


def test_a_request_goes_to_the_address_checked_though_the_name_then_answers_elsewhere():
    # The name answers loopback (allowed here) once, then a private address: DNS rebinding.
    resolver = Answers([["127.0.0.1"], ["10.0.0.1"]])
    egress = Egress(("127.0.0.1",), resolver)
    with server() as hooks, watched_connections() as connections:
        with egress.client() as client:
            first = client.get(f"http://{NAME}:{hooks.port}/hook")
            with pytest.raises(EgressRefused) as refused:
                client.get(f"http://{NAME}:{hooks.port}/hook")

    assert first.status_code == 200
    assert resolver.asked == [NAME, NAME]  # once per request, never again to connect
    assert hooks.got == [("/hook", hooks.got[0][1])]
    assert hooks.got[0][1]["host"] == f"{NAME}:{hooks.port}"
    assert connections == [("127.0.0.1", hooks.port)]
    assert refused.value.code == "egress_refused"
    assert f"'{NAME}' resolves to 10.0.0.1, a private address" in refused.value.message


def test_tls_sends_the_url_s_name_and_checks_the_certificate_against_it(tmp_path):
    served, trusting = certificate(tmp_path, NAME)
    egress = Egress(("127.0.0.1",), Answers([["127.0.0.1"]]))
    with server(served) as hooks, watched_connections() as connections:
        with egress.client(verify=trusting) as client:
            answer = client.get(f"https://{NAME}:{hooks.port}/hook")

    assert answer.status_code == 200
    assert hooks.names == [NAME]
    assert hooks.got[0][1]["host"] == f"{NAME}:{hooks.port}"
    assert connections == [("127.0.0.1", hooks.port)]


def test_a_certificate_for_another_name_is_refused(tmp_path):
    served, trusting = certificate(tmp_path, "other.example.org")
    egress = Egress(("127.0.0.1",), Answers([["127.0.0.1"]]))
    with server(served) as hooks, egress.client(verify=trusting) as client:
        with pytest.raises(httpx.ConnectError, match="certificate verify failed"):
            client.get(f"https://{NAME}:{hooks.port}/hook")
    assert hooks.got == []


def test_each_redirect_is_checked_like_the_first_request():
    egress = Egress(("127.0.0.1",), Answers([["127.0.0.1"]]))
    with server() as hooks, watched_connections() as connections:
        with egress.client(follow_redirects=True) as client:
            inside = client.get(
                f"http://{NAME}:{hooks.port}/redirect?to=http://{NAME}:{hooks.port}/done"
            )
            with pytest.raises(EgressRefused) as refused:
                client.get(f"http://{NAME}:{hooks.port}/redirect?to=http://169.254.169.254/latest/")

    assert inside.status_code == 200 and [path for path, _ in hooks.got][:2] == [
        f"/redirect?to=http://{NAME}:{hooks.port}/done",
        "/done",
    ]
    assert "169.254.169.254, a link-local address" in refused.value.message
    assert {host for host, _port in connections} == {"127.0.0.1"}


def test_a_name_with_any_address_that_is_not_public_is_refused():
    egress = Egress((), Answers([["8.8.8.8", "10.0.0.1"]]))

    with pytest.raises(EgressRefused, match="resolves to 10.0.0.1, a private address"):
        egress.addresses(NAME, 443)


def test_a_public_name_resolves_to_its_addresses_without_connecting():
    egress = Egress((), Answers([["8.8.8.8", "2606:4700::1111"]]))

    assert [str(a) for a in egress.addresses(NAME, 443)] == ["8.8.8.8", "2606:4700::1111"]


def test_names_of_a_local_network_are_refused_without_asking_the_resolver():
    resolver = Answers([["8.8.8.8"]])
    egress = Egress((), resolver)
    for name in ("metadata.google.internal", "redis", "printer.local", "localhost", "x.test"):
        with pytest.raises(EgressRefused, match="is a name of a local network"):
            egress.addresses(name, 80)
    assert resolver.asked == []


def test_a_name_that_does_not_resolve_is_refused():
    egress = Egress((), Answers([]))

    with pytest.raises(EgressRefused, match="does not resolve"):
        egress.check_url(f"https://{NAME}/hook")


def test_an_allowed_network_admits_the_names_resolving_into_it_and_no_others():
    egress = Egress(("10.1.0.0/16", "hooks.internal"), Answers([["10.1.2.3"]]))

    assert [str(a) for a in egress.addresses(NAME, 80)] == ["10.1.2.3"]
    assert [str(a) for a in egress.addresses("hooks.internal", 80)] == ["10.1.2.3"]
    assert egress.allows_host("10.1.9.9") and egress.allows_host("Hooks.Internal.")
    assert not egress.allows_host("10.2.0.1") and not egress.allows_host(NAME)
    with pytest.raises(EgressRefused, match="10.2.0.1, a private address"):
        egress.addresses("10.2.0.1", 80)


def test_the_allow_list_setting_takes_names_addresses_and_networks():
    env = {"SKILLFLEET_EGRESS_ALLOW": "localhost, 127.0.0.1 10.1.0.0/16,hooks.internal,"}

    assert Settings.from_env(env).egress_allow == (
        "localhost", "127.0.0.1", "10.1.0.0/16", "hooks.internal",
    )  # fmt: skip
    assert Settings.from_env({}).egress_allow == ()
    with pytest.raises(SettingsError, match="SKILLFLEET_EGRESS_ALLOW holds 'http://x'"):
        Settings.from_env({"SKILLFLEET_EGRESS_ALLOW": "http://x"})

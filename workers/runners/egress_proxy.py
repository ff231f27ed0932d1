"""The egress proxy and the loopback relay: the program a run's containers start (stdlib only).

The Spark runner passes this module's source to `python3 -c` in the runner image, so it imports
nothing of skillfleet and nothing outside the standard library. Two roles:

- `proxy SOCKET HOSTS PORTS PRIVATE`, in the egress container (on the outward network): an HTTP
  proxy on a Unix socket that forwards a CONNECT or an absolute-form request only to a listed
  host (exact name, case-insensitive, no subdomains) on a listed port, resolves that name itself,
  and answers 403 for anything else. Unless PRIVATE is "1", it refuses a name that resolves to
  an address that is not public, so a listed name can't be pointed at the host or its networks.
- `relay SOCKET -- COMMAND...`, in the run's container (loopback only): listens on
  127.0.0.1:3128, hands every connection to the proxy's socket, runs COMMAND and exits with its
  code. The script's HTTP_PROXY points at the relay; nothing else leaves the container.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import socket
import sys
from collections.abc import Sequence

RELAY_HOST = "127.0.0.1"
RELAY_PORT = 3128
MAX_HEAD_BYTES = 64 * 1024
HEAD_SECONDS = 30.0
CONNECT_SECONDS = 10.0
# The relay may start before the proxy has bound its socket: how long a connection waits for it.
SOCKET_WAIT_SECONDS = 10.0
SOCKET_RETRY_SECONDS = 0.05
CHUNK = 64 * 1024
_HOP_HEADERS = (b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive")


class Refused(Exception):
    """Raised when a request may not be forwarded: its form, host, port or address."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class Policy:
    """The hosts and ports a run may reach, and whether non-public addresses are allowed."""

    def __init__(
        self,
        hosts: Sequence[str],
        ports: Sequence[int],
        private: bool,
        special: Sequence[str] = (),
    ) -> None:
        self.hosts = frozenset(_normal(host) for host in hosts)
        self.ports = frozenset(ports)
        self.private = private
        # IANA's special-purpose blocks, which Python's tables may not know yet (3fff::/20).
        self.special = [ipaddress.ip_network(network) for network in special]

    def public(self, address: str) -> bool:
        found = ipaddress.ip_address(address)
        if not found.is_global:
            return False
        return not any(found in network for network in self.special)

    def check(self, host: str, port: int) -> str:
        """The host's normal form when it may be reached on `port`; raises Refused if not."""
        name = _normal(host)
        if name not in self.hosts:
            raise Refused(403, f"{name} is not in the skill's allowed-domains")
        if port not in self.ports:
            raise Refused(403, f"port {port} is not allowed (only {_listed(self.ports)})")
        return name

    async def address(self, name: str, port: int) -> str:
        """An address of `name` that may be reached; raises Refused when none may."""
        loop = asyncio.get_running_loop()
        try:
            found = await loop.getaddrinfo(name, port, type=socket.SOCK_STREAM)
        except OSError as e:
            raise Refused(502, f"{name} does not resolve") from e
        for info in found:
            address = str(info[4][0])
            if self.private or self.public(address):
                return address
        raise Refused(403, f"{name} resolves to an address that is not public")


def _normal(host: str) -> str:
    return host.strip().rstrip(".").lower()


def _listed(ports: frozenset[int]) -> str:
    return ", ".join(str(port) for port in sorted(ports))


def split_target(target: str, default_port: int) -> tuple[str, int]:
    """`host[:port]` or `[v6]:port` as (host, port); raises Refused when it is malformed."""
    if target.startswith("["):
        host, _, rest = target[1:].partition("]")
        port = rest.removeprefix(":")
    elif target.count(":") == 1:
        host, _, port = target.partition(":")
    else:  # no port, or a bare IPv6 address: never a listed host name
        host, port = target, ""
    try:
        number = int(port) if port else default_port
    except ValueError as e:
        raise Refused(400, f"bad port in {target!r}") from e
    if not host or not 0 < number < 65536:
        raise Refused(400, f"bad target {target!r}")
    return host, number


def parse_head(head: bytes) -> tuple[str, str, str, list[bytes]]:
    """Method, target and version of a request head, and its header lines."""
    lines = head.split(b"\r\n")
    try:
        method, target, version = lines[0].decode("ascii").split(" ")
    except (UnicodeDecodeError, ValueError) as e:
        raise Refused(400, "not an HTTP request") from e
    return method, target, version, [line for line in lines[1:] if line]


def origin_request(method: str, target: str, version: str, headers: list[bytes]) -> bytes:
    """The head to send to the origin for an absolute-form request: origin-form, no hop headers."""
    rest = target.split("://", 1)[1]
    path = "/" + rest.split("/", 1)[1] if "/" in rest else "/"
    kept = [line for line in headers if line.split(b":", 1)[0].strip().lower() not in _HOP_HEADERS]
    lines = [f"{method} {path} {version}".encode("ascii"), *kept, b"Connection: close"]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def refusal_response(refused: Refused) -> bytes:
    body = f"skillfleet egress: {refused.reason}.\n".encode()
    titles = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}
    head = (
        f"HTTP/1.1 {refused.status} {titles.get(refused.status, 'Error')}\r\n"
        f"Content-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until the reader's end, then half-close the writer."""
    try:
        while chunk := await reader.read(CHUNK):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


async def splice(
    a: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    b: tuple[asyncio.StreamReader, asyncio.StreamWriter],
) -> None:
    """Copy both ways until both ends closed, then close both."""
    try:
        await asyncio.gather(pipe(a[0], b[1]), pipe(b[0], a[1]))
    finally:
        a[1].close()
        b[1].close()


async def serve_client(
    policy: Policy, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """One client connection: check its first request, then join it to the origin."""
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_SECONDS)
        if len(head) > MAX_HEAD_BYTES:
            raise Refused(400, "the request head is too large")
        method, target, version, headers = parse_head(head[:-4])
        if method == "CONNECT":
            host, port = split_target(target, 443)
        elif target.lower().startswith("http://"):
            host, port = split_target(target[7:].split("/", 1)[0], 80)
        else:
            raise Refused(400, "only CONNECT and http:// requests are proxied")
        name = policy.check(host, port)
        address = await policy.address(name, port)
        try:
            origin = await asyncio.wait_for(asyncio.open_connection(address, port), CONNECT_SECONDS)
        except (TimeoutError, OSError) as e:
            raise Refused(502, f"{name}:{port} does not answer") from e
    except Refused as refused:
        writer.write(refusal_response(refused))
        await _close(writer)
        return
    except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        await _close(writer)
        return
    print(f"egress: {method} {name}:{port}", file=sys.stderr, flush=True)
    if method == "CONNECT":
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
    else:
        origin[1].write(origin_request(method, target, version, headers))
    await splice((reader, writer), origin)


async def _close(writer: asyncio.StreamWriter) -> None:
    try:
        await writer.drain()
    except (ConnectionError, OSError):
        pass
    writer.close()


async def run_proxy(path: str, policy: Policy) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await serve_client(policy, reader, writer)

    with contextlib.suppress(FileNotFoundError):  # the socket of an earlier start
        os.unlink(path)
    server = await asyncio.start_unix_server(handle, path, limit=MAX_HEAD_BYTES)
    print("egress: ready", flush=True)
    async with server:
        await server.serve_forever()


async def open_proxy(path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the proxy's socket, waiting for the proxy to bind it."""
    loop = asyncio.get_running_loop()
    until = loop.time() + SOCKET_WAIT_SECONDS
    while True:
        try:
            return await asyncio.open_unix_connection(path)
        except (FileNotFoundError, ConnectionRefusedError):
            if loop.time() >= until:
                raise
            await asyncio.sleep(SOCKET_RETRY_SECONDS)


async def run_relay(path: str, command: Sequence[str]) -> int:
    """Relay loopback connections to the proxy while `command` runs; its exit code."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            proxy = await open_proxy(path)
        except OSError:
            writer.close()
            return
        await splice((reader, writer), proxy)

    server = await asyncio.start_server(handle, RELAY_HOST, RELAY_PORT)
    async with server:
        child = await asyncio.create_subprocess_exec(*command)
        code = await child.wait()
    return code if code >= 0 else 128 - code


def main(argv: Sequence[str]) -> int:
    role, path, *rest = argv
    if role == "proxy":
        hosts, ports, private, special = rest
        policy = Policy(json.loads(hosts), json.loads(ports), private == "1", json.loads(special))
        asyncio.run(run_proxy(path, policy))
        return 0
    if role == "relay" and rest[:1] == ["--"]:
        try:
            return asyncio.run(run_relay(path, rest[1:]))
        except FileNotFoundError as e:
            print(f"{e.filename}: not found", file=sys.stderr)
            return 127
    print(f"usage: proxy|relay SOCKET ...; got {list(argv)!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

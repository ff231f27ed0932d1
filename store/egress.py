"""Requests to URLs an owner gives (webhooks, Web Push endpoints): only to public addresses.

A URL could point skillfleet at itself or at the network it runs in: the cloud metadata service
(169.254.169.254), Redis, Flower, the API, any private host. An `Egress` resolves the URL's host
once, refuses it unless every address is a public unicast address, and then connects to exactly
an address it checked: a name that answers differently a moment later (DNS rebinding) can't move
the connection. The request keeps its Host header, and TLS its SNI and certificate check, for
the name in the URL. Every request goes through the check: redirects too, when followed.

Addresses are judged as the resolver reads them, so every way of writing one is covered
(2130706433, 0x7f000001, 0177.0.0.1 and 127.1 are 127.0.0.1), and an IPv6 address that embeds an
IPv4 one (IPv4-mapped `::ffff:0:0/96`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) is judged by the
IPv4 address. Every block of IANA's special-purpose registries is refused, from the explicit
list in store/specialaddresses.py (192.0.0.0/24, 3fff::/20, 5f00::/16...), then whatever
Python's `ipaddress` calls loopback, link-local, multicast, reserved, private or not global.
Names that only mean something on a local network (no dot, `localhost`, `.local`,
`.internal`...) are refused without asking DNS.

The operator may allow hosts (SKILLFLEET_EGRESS_ALLOW): a listed name is reached wherever it
resolves, a listed address or network is reached by any name that resolves into it.

Every client has one deadline (store/deadlines.py) over each request, redirects, the response's
head and its body included, so a server trickling its answer can't hold a read past it; a
caller gives the deadline of what it reads (a web page, a webhook delivery, a model's answer, a
client's metadata document), or gets OUTBOUND_SECONDS. Looking the name up is left to the
system resolver and its own timeouts. `read_at_most` bounds what a body may hold. A new
outbound read (an OAuth client's metadata document, say) is these three: an `Egress` from the
operator's allow-list, `client(Deadline.after(its seconds))`, and `read_at_most`.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

import httpx

from store.deadlines import Deadline, DeadlineBackend, DeadlineTransport
from store.errors import StoreError
from store.limits import OUTBOUND_SECONDS
from store.specialaddresses import IPAddress, special_block

# The host's addresses for a port, as text; raises OSError when the name does not resolve.
Resolver = Callable[[str, int], list[str]]

DEFAULT_PORTS = {"http": 80, "https": 443}
# Names that resolve (if at all) only on a local network; the name or any name under it.
LOCAL_NAMES = (
    "localhost", "local", "internal", "localdomain", "lan", "home", "home.arpa", "intranet",
    "corp", "private", "test", "invalid",
)  # fmt: skip
_PUBLIC_ONLY = "requests go to public hosts only (SKILLFLEET_EGRESS_ALLOW lists exceptions)."
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
# What else makes an address one that may not be reached, after the registries' blocks.
_REFUSED: tuple[tuple[str, Callable[[IPAddress], bool]], ...] = (
    ("the unspecified address", lambda a: a.is_unspecified),
    ("a loopback address", lambda a: a.is_loopback),
    ("a link-local address", lambda a: a.is_link_local),
    ("a multicast address", lambda a: a.is_multicast),
    ("a reserved address", lambda a: a.is_reserved),
    ("a private address", lambda a: a.is_private),
    ("a site-local address", lambda a: getattr(a, "is_site_local", False)),
    ("not a public address", lambda a: not a.is_global),
)


class EgressRefused(StoreError):
    """Raised when a URL may not be requested: its form, or the addresses its host names."""

    code = "egress_refused"
    status = 422


def resolve(host: str, port: int) -> list[str]:
    """The system resolver's addresses for `host`, each once, in its order."""
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in found))


def refusal(address: IPAddress) -> str | None:
    """Why `address` may not be reached, or None for a public unicast address."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:  # reached through its IPv4 address: judged by it
            reason = refusal(embedded)
            return None if reason is None else f"which holds {embedded}, {reason}"
    block = special_block(address)
    if block is not None:
        return block.reason
    for reason, applies in _REFUSED:
        if applies(address):
            return reason
    return None


def read_at_most(response: httpx.Response, most: int) -> bytes | None:
    """A streamed response's body, Content-Encoding undone; None as soon as it is known to be
    over `most` bytes (a declared length over it is not read at all)."""
    declared = response.headers.get("content-length", "")
    encoded = response.headers.get("content-encoding", "identity").lower() != "identity"
    if declared.isdigit() and not encoded and int(declared) > most:
        return None
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > most:
            return None
    return bytes(body)


def local_host(host: str) -> str | None:
    """Why `host` (a name, an address in any form, `*.name`, `[v6]`) can only be on a local
    network, judged without DNS: a local network's name or an address that is not public;
    None for a public name or address."""
    name = _name(host).removeprefix("*.")
    literal = _numeric(name)
    if literal is not None:
        return refusal(literal)
    return "a name of a local network" if _local(name) else None


class Egress:
    """Which hosts requests may reach, and clients that reach nothing else (module text)."""

    def __init__(self, allowed: Iterable[str] = (), resolver: Resolver = resolve) -> None:
        self.names: set[str] = set()
        self.networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for entry in allowed:
            try:
                self.networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                self.names.add(_name(entry))
        self.resolver = resolver

    def addresses(self, host: str, port: int, lookup: bool = True) -> list[IPAddress]:
        """The addresses a request to `host` may connect to; EgressRefused when there are none.
        Without `lookup`, a public-looking name is not resolved, and no address is returned."""
        name = _name(host)
        if name in self.names:
            return self._resolve(name, port) if lookup else []
        literal = _numeric(name)
        if literal is None and _local(name):
            raise EgressRefused(f"'{host}' is a name of a local network; {_PUBLIC_ONLY}")
        if literal is None and not lookup:
            return []
        found = [literal] if literal is not None else self._resolve(name, port)
        for address in found:
            reason = refusal(address)
            if reason is not None and not self._in_networks(address):
                said = "is" if literal is not None else "resolves to"
                raise EgressRefused(f"'{host}' {said} {address}, {reason}; {_PUBLIC_ONLY}")
        return found

    def check_url(self, url: str, lookup: bool = True) -> None:
        """Refuse `url` unless it is an http(s) URL whose host may be reached now; without
        `lookup`, a name is judged only when a request resolves it (no DNS query now)."""
        try:
            parts = urlsplit(url)
            port = parts.port or DEFAULT_PORTS[parts.scheme]
        except (ValueError, KeyError):  # a bad port or IPv6 address, another scheme
            raise EgressRefused(f"'{url}' is not an http(s) URL with a host.") from None
        if not parts.hostname:
            raise EgressRefused(f"'{url}' is not an http(s) URL with a host.")
        self.addresses(parts.hostname, port, lookup)
        try:
            parsed = httpx.URL(url)
        except httpx.InvalidURL as e:
            raise EgressRefused(f"'{url}' is not a URL that can be requested: {e}.") from e
        if _name(parsed.host) != _name(parts.hostname):  # read apart, it could go elsewhere
            raise EgressRefused(f"'{url}' names its host ambiguously.")

    def allows_host(self, host: str) -> bool:
        """Whether the operator listed `host`: by name, or as an address in a listed network."""
        name = _name(host)
        literal = _numeric(name)
        return name in self.names or (literal is not None and self._in_networks(literal))

    def client(
        self, deadline: Deadline | None = None, verify: Any = True, **options: Any
    ) -> httpx.Client:
        """An httpx client whose requests (redirects included) reach checked addresses only and
        are over, body included, by `deadline` (OUTBOUND_SECONDS from now when none is given);
        environment proxies are not used."""
        deadline = deadline or Deadline.after(OUTBOUND_SECONDS)
        options.setdefault("timeout", deadline.seconds)
        transport = CheckedTransport(self, deadline, verify=verify)
        return httpx.Client(transport=transport, trust_env=False, **options)

    def _resolve(self, name: str, port: int) -> list[IPAddress]:
        try:
            found = [ipaddress.ip_address(text) for text in self.resolver(name, port)]
        except (OSError, UnicodeError, ValueError) as e:
            raise EgressRefused(f"'{name}' does not resolve to an address.") from e
        if not found:
            raise EgressRefused(f"'{name}' does not resolve to an address.")
        return found

    def _in_networks(self, address: IPAddress) -> bool:
        return any(address in network for network in self.networks)


class CheckedTransport(httpx.BaseTransport):
    """Sends each request to an address its Egress checked for it, resolving the host once.

    The request goes out to the address with the URL's Host header and, over TLS, the URL's
    name as SNI and for the certificate check. Each host has its own connection pool, so a
    connection made for one name never carries another's requests; all of them are held to
    the client's deadline.
    """

    def __init__(self, egress: Egress, deadline: Deadline, verify: Any = True) -> None:
        self.egress = egress
        self.backend = DeadlineBackend(deadline)
        self.verify = verify
        self._pools: dict[tuple[str, str, int], DeadlineTransport] = {}

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        host = url.raw_host.decode("ascii")
        port = url.port or DEFAULT_PORTS[url.scheme]
        addresses = self.egress.addresses(host, port)
        pool = self._pool(url.scheme, host, port)
        for address in addresses[:-1]:
            try:
                return pool.handle_request(_to_address(request, host, address))
            except httpx.ConnectError:
                continue  # the next address, as a browser would
        return pool.handle_request(_to_address(request, host, addresses[-1]))

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()
        self.backend.close()

    def _pool(self, scheme: str, host: str, port: int) -> DeadlineTransport:
        key = (scheme, host, port)
        if key not in self._pools:
            self._pools[key] = DeadlineTransport(self.backend, self.verify)
        return self._pools[key]


def _to_address(request: httpx.Request, host: str, address: IPAddress) -> httpx.Request:
    """`request` sent to `address`, keeping its Host header and `host` as the TLS name."""
    return httpx.Request(
        request.method, request.url.copy_with(host=str(address)), headers=request.headers,
        stream=request.stream, extensions={**request.extensions, "sni_hostname": host},
    )  # fmt: skip


def _name(host: str) -> str:
    return host.strip("[]").rstrip(".").lower()


def _numeric(name: str) -> IPAddress | None:
    """The address `name` writes in any numeric form, without asking DNS; None for a name."""
    try:
        found = socket.getaddrinfo(name, None, flags=socket.AI_NUMERICHOST)
    except (OSError, UnicodeError, ValueError):
        return None
    return ipaddress.ip_address(str(found[0][4][0]))


def _local(name: str) -> bool:
    if "." not in name:
        return True
    return any(name == local or name.endswith("." + local) for local in LOCAL_NAMES)


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address.sixtofour

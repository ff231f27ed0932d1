"""IANA's special-purpose address registries, the blocks egress never reaches.

The IPv4 and IPv6 Special-Purpose Address Registries (RFC 6890, updated by RFC 8190) list every
block that is not ordinary unicast space: private, loopback, link-local, documentation,
benchmarking, translation and protocol blocks. Python's `ipaddress` knows most of them, but its
tables follow the registries by a release or more (3.11 takes 192.0.0.8 and 3fff::/20 for
global addresses), so egress (store/egress.py) keeps this list, written out with each block's
RFC, and checks it before Python's own tests.

Every block here is refused, also the few the registries call globally reachable (anycast
relays, AS112 DNS sinks, AMT, ORCHIDv2, drone tags): no owner's webhook, model or page lives
there. Three IPv6 blocks carry an IPv4 address in their low bits (IPv4-mapped, NAT64's
well-known prefix and 6to4); egress judges an address in them by the IPv4 address it carries,
so an IPv6-only network still reaches public IPv4 hosts through NAT64.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class Block:
    """One registry entry: its network, what an address in it is, the RFC that made it."""

    network: IPNetwork
    what: str
    rfc: str
    carries_ipv4: bool = False

    @property
    def reason(self) -> str:
        return f"{self.what} ({self.rfc})"


def _block(network: str, what: str, rfc: str, carries_ipv4: bool = False) -> Block:
    return Block(ipaddress.ip_network(network), what, rfc, carries_ipv4)


IPV4_BLOCKS = (
    _block("0.0.0.0/8", "an address of 'this network'", "RFC 791"),
    _block("0.0.0.0/32", "the unspecified address", "RFC 1122"),
    _block("10.0.0.0/8", "a private address", "RFC 1918"),
    _block("100.64.0.0/10", "not a public address: shared address space", "RFC 6598"),
    _block("127.0.0.0/8", "a loopback address", "RFC 1122"),
    _block("169.254.0.0/16", "a link-local address", "RFC 3927"),
    _block("172.16.0.0/12", "a private address", "RFC 1918"),
    _block("192.0.0.0/24", "an IETF protocol assignment", "RFC 6890"),
    _block("192.0.0.0/29", "an IPv4 service continuity address", "RFC 7335"),
    _block("192.0.0.8/32", "the IPv4 dummy address", "RFC 7600"),
    _block("192.0.0.9/32", "the Port Control Protocol anycast address", "RFC 7723"),
    _block("192.0.0.10/32", "the TURN anycast address", "RFC 8155"),
    _block("192.0.0.170/32", "a NAT64/DNS64 discovery address", "RFC 8880"),
    _block("192.0.0.171/32", "a NAT64/DNS64 discovery address", "RFC 8880"),
    _block("192.0.2.0/24", "a documentation address (TEST-NET-1)", "RFC 5737"),
    _block("192.31.196.0/24", "an AS112 DNS sink address", "RFC 7535"),
    _block("192.52.193.0/24", "an AMT relay address", "RFC 7450"),
    _block("192.88.99.0/24", "a deprecated 6to4 relay anycast address", "RFC 7526"),
    _block("192.88.99.2/32", "the 6a44 relay anycast address", "RFC 6751"),
    _block("192.168.0.0/16", "a private address", "RFC 1918"),
    _block("192.175.48.0/24", "an AS112 DNS sink address", "RFC 7534"),
    _block("198.18.0.0/15", "a benchmarking address", "RFC 2544"),
    _block("198.51.100.0/24", "a documentation address (TEST-NET-2)", "RFC 5737"),
    _block("203.0.113.0/24", "a documentation address (TEST-NET-3)", "RFC 5737"),
    _block("240.0.0.0/4", "a reserved address", "RFC 1112"),
    _block("255.255.255.255/32", "the limited broadcast address", "RFC 919"),
)

IPV6_BLOCKS = (
    _block("::1/128", "a loopback address", "RFC 4291"),
    _block("::/128", "the unspecified address", "RFC 4291"),
    _block("::ffff:0:0/96", "an IPv4-mapped address", "RFC 4291", carries_ipv4=True),
    _block("64:ff9b::/96", "a NAT64 address", "RFC 6052", carries_ipv4=True),
    _block("64:ff9b:1::/48", "a local-use NAT64 address", "RFC 8215"),
    _block("100::/64", "a discard-only address", "RFC 6666"),
    _block("100:0:0:1::/64", "a dummy IPv6 address", "RFC 9780"),
    _block("2001::/23", "an IETF protocol assignment", "RFC 2928"),
    _block("2001::/32", "a Teredo address", "RFC 4380"),
    _block("2001:1::1/128", "the Port Control Protocol anycast address", "RFC 7723"),
    _block("2001:1::2/128", "the TURN anycast address", "RFC 8155"),
    _block("2001:1::3/128", "the DNS-SD service registration anycast address", "RFC 9665"),
    _block("2001:2::/48", "a benchmarking address", "RFC 5180"),
    _block("2001:3::/32", "an AMT address", "RFC 7450"),
    _block("2001:4:112::/48", "an AS112 DNS sink address", "RFC 7535"),
    _block("2001:10::/28", "a deprecated ORCHID address", "RFC 4843"),
    _block("2001:20::/28", "an ORCHIDv2 address", "RFC 7343"),
    _block("2001:30::/28", "a drone remote ID tag (DET)", "RFC 9374"),
    _block("2001:db8::/32", "a documentation address", "RFC 3849"),
    _block("2002::/16", "a 6to4 address", "RFC 3056", carries_ipv4=True),
    _block("2620:4f:8000::/48", "an AS112 DNS sink address", "RFC 7534"),
    _block("3fff::/20", "a documentation address", "RFC 9637"),
    _block("5f00::/16", "an SRv6 segment identifier", "RFC 9602"),
    _block("fc00::/7", "a private address (unique local)", "RFC 4193"),
    _block("fe80::/10", "a link-local address", "RFC 4291"),
)

BLOCKS = IPV4_BLOCKS + IPV6_BLOCKS


def special_block(address: IPAddress) -> Block | None:
    """The most specific registry block holding `address`, or None outside them all."""
    blocks = IPV4_BLOCKS if address.version == 4 else IPV6_BLOCKS
    found = [block for block in blocks if address in block.network]
    return max(found, key=lambda block: block.network.prefixlen, default=None)

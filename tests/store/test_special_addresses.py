"""Every block of IANA's special-purpose registries is refused by egress, however Python's own
`ipaddress` tables (which follow the registries late) judge it; the blocks that carry an IPv4
address are judged by that address."""

from __future__ import annotations

import ipaddress

import pytest

from store.egress import Egress, EgressRefused, refusal
from store.specialaddresses import BLOCKS, IPV4_BLOCKS, IPV6_BLOCKS, Block, special_block

REFUSED_BLOCKS = [block for block in BLOCKS if not block.carries_ipv4]


def literal(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    return str(address) if address.version == 4 else f"[{address}]"


def edges(block: Block) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The block's first, middle and last address."""
    network = block.network
    middle = network.network_address + network.num_addresses // 2
    return [network.network_address, middle, network.broadcast_address]


@pytest.mark.parametrize("block", REFUSED_BLOCKS, ids=lambda block: str(block.network))
def test_every_address_of_a_special_purpose_block_is_refused_naming_its_block(block):
    egress = Egress()
    for address in edges(block):
        with pytest.raises(EgressRefused) as refused:
            egress.check_url(f"http://{literal(address)}/hook", lookup=False)
        found = special_block(address)
        assert found is not None and found.network.subnet_of(block.network)
        assert f"is {address}, {found.reason};" in refused.value.message


def test_the_ipv4_dummy_address_and_the_new_documentation_block_are_refused_not_asked_about():
    egress = Egress()
    with pytest.raises(EgressRefused) as dummy:
        egress.check_url("http://192.0.0.8/hook", lookup=False)
    with pytest.raises(EgressRefused) as documentation:
        egress.check_url("http://[3fff:0:1::8]/hook", lookup=False)

    assert dummy.value.code == documentation.value.code == "egress_refused"
    assert "'192.0.0.8' is 192.0.0.8, the IPv4 dummy address (RFC 7600)" in dummy.value.message
    assert "is 3fff:0:1::8, a documentation address (RFC 9637)" in documentation.value.message


def test_a_name_resolving_into_a_special_purpose_block_is_refused():
    answers = {"relay.example.org": ["5f00::1"], "turn.example.org": ["192.0.0.10"]}
    egress = Egress(resolver=lambda host, port: answers[host])

    with pytest.raises(EgressRefused, match="resolves to 5f00::1, an SRv6 segment identifier"):
        egress.addresses("relay.example.org", 443)
    with pytest.raises(EgressRefused, match="resolves to 192.0.0.10, the TURN anycast address"):
        egress.addresses("turn.example.org", 443)


def test_blocks_that_carry_an_ipv4_address_are_judged_by_it():
    public, private = "8.8.8.8", "10.0.0.1"
    for prefix in ("::ffff:{}", "64:ff9b::{}"):
        assert refusal(ipaddress.ip_address(prefix.format(public))) is None
        held = refusal(ipaddress.ip_address(prefix.format(private)))
        assert held == "which holds 10.0.0.1, a private address (RFC 1918)"
    assert refusal(ipaddress.ip_address("2002:808:808::1")) is None  # 6to4 of 8.8.8.8
    assert refusal(ipaddress.ip_address("2002:a00:1::1")) == held


def test_an_operator_may_still_allow_a_special_purpose_network():
    egress = Egress(("198.18.0.0/15",))

    assert [str(a) for a in egress.addresses("198.18.0.7", 80)] == ["198.18.0.7"]
    with pytest.raises(EgressRefused, match="198.51.100.7, a documentation address"):
        egress.addresses("198.51.100.7", 80)


def test_the_list_holds_each_registry_s_blocks_once_and_ordinary_addresses_are_outside_it():
    for blocks in (IPV4_BLOCKS, IPV6_BLOCKS):
        networks = [block.network for block in blocks]
        assert len(set(networks)) == len(networks)
    named = {"192.0.0.0/24", "3fff::/20", "5f00::/16", "2001:db8::/32", "64:ff9b:1::/48",
             "100.64.0.0/10", "198.18.0.0/15"}  # fmt: skip
    assert named <= {str(block.network) for block in BLOCKS}
    for address in ("8.8.8.8", "93.184.215.14", "2606:4700::1111", "2a00:1450::1"):
        assert special_block(ipaddress.ip_address(address)) is None
        assert refusal(ipaddress.ip_address(address)) is None

"""Which runs get a network: only container and micro-VM runs of a skill that lists hosts."""

from __future__ import annotations

import pytest

from broker.classify import run_network


@pytest.mark.parametrize("execution", ["spark", "sandbox"])
def test_a_spark_or_sandbox_skill_that_lists_hosts_gets_a_network(execution: str) -> None:
    assert run_network(execution, ("api.github.com",)) == "bridge"


@pytest.mark.parametrize("execution", ["spark", "sandbox", "node"])
def test_a_skill_without_allowed_domains_gets_none_whatever_it_asked_for(execution: str) -> None:
    # skillfleet.network: bridge is deprecated: it no longer opens the network on its own.
    assert run_network(execution, ()) == "none"


def test_a_node_script_runs_on_its_server_whose_network_skillfleet_does_not_manage() -> None:
    assert run_network("node", ("api.github.com",)) == "none"

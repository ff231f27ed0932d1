"""A container run's way out: to the hosts its skill lists, and to nothing else.

A run whose skill lists `skillfleet.allowed-domains` still gets no network of its own: its
container's network namespace holds only loopback, so a direct connection has no route and no
name resolves. Beside it the runner starts an egress container on the outward Docker network
(`bridge` unless the operator names another) running egress_proxy's proxy, which listens on a
Unix socket in a volume of the run's own and forwards only to the listed hosts, on ports 80 and
443. The run container mounts that volume read-only and starts its script under egress_proxy's
relay, which listens on 127.0.0.1:3128 and hands each connection to the socket; HTTP_PROXY and
HTTPS_PROXY point the script there.

Why not a Docker `internal` network: a container on one keeps the bridge's gateway, an address
of the host, within reach (and with the engine's iptables off, a default route through it), so
services of the host would answer the script. A loopback-only namespace needs no firewall rule
of the engine or of the host to hold.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
from docker.errors import NotFound

from relay.errors import RunnerUnavailable
from store.leniency import read_skill_dir
from store.specialaddresses import BLOCKS
from workers.runners import egress_proxy
from workers.runners.base import Job

DEFAULT_NETWORK = "bridge"
PORTS = (80, 443)
ROLE_LABEL = "skillfleet.egress"
VOLUME_PREFIX = "skillfleet-egress-"
# In the egress container the run's new volume is mounted on /tmp, so it takes /tmp's mode
# (1777) and user 65534 may bind the socket there; the run container sees it at RUN_DIR.
PROXY_DIR = "/tmp"
RUN_DIR = "/run/skillfleet-egress"
SOCKET_NAME = "proxy.sock"
# IANA's special-purpose blocks (store/specialaddresses.py) the proxy refuses besides what
# Python's `is_global` refuses; those that carry an IPv4 address are judged by it there.
SPECIAL_NETWORKS = [str(block.network) for block in BLOCKS if not block.carries_ipv4]
PROXY_URL = f"http://{egress_proxy.RELAY_HOST}:{egress_proxy.RELAY_PORT}"
NO_PROXY = "localhost,127.0.0.1,::1"
# The proxy's own container: small, since it only copies bytes.
PROXY_PIDS_LIMIT = 64
PROXY_MEMORY_LIMIT = "128m"
PROXY_NANO_CPUS = 500_000_000
NOBODY = "65534:65534"


def allowed_domains(job: Job, folder: Path) -> tuple[str, ...]:
    """The hosts the skill lists, when the run may use the network; else none."""
    if job.network != "bridge":
        return ()
    # Read as the import read it: an imported skill may bend the spec (store/leniency.py).
    return read_skill_dir(folder, None, job.skill_name).allowed_domains


@functools.cache
def program() -> str:
    """egress_proxy's source, run by the runner image's python3 (`python3 -c`)."""
    return Path(egress_proxy.__file__).read_text(encoding="utf-8")


@dataclass(frozen=True)
class Gate:
    """One run's egress: its socket volume and its proxy container."""

    volume: str
    container: str


class Egress:
    """Opens and closes runs' gates on the Docker engine `client()` returns.

    `network` is the Docker network the proxies reach the hosts through; `private` lets a
    listed name resolve to a private address (a host of the operator's own network).
    """

    def __init__(
        self,
        client: Callable[[], docker.DockerClient],
        image: str,
        label: str,
        network: str = DEFAULT_NETWORK,
        private: bool = False,
        labels: dict[str, str] | None = None,
    ) -> None:
        self.client = client
        self.labels = labels or {}  # on every proxy and its volume, beside the run's label
        self.image = image
        self.label = label
        self.network = network
        self.private = private

    def open(self, run_id: str, hosts: tuple[str, ...]) -> Gate:
        """Start the proxy for `hosts`; the run's container may start right after.

        Raises RunnerUnavailable when the outward network does not exist.
        """
        labels = {**self.labels, self.label: run_id, ROLE_LABEL: "proxy"}
        gate = Gate(self.client().volumes.create(VOLUME_PREFIX + run_id, labels=labels).name, "")
        try:
            container = self.client().containers.create(
                self.image,
                self.command(hosts),
                network_mode=self.network,
                volumes={gate.volume: {"bind": PROXY_DIR, "mode": "rw"}},
                **self.hardening(labels),
            )
            gate = Gate(gate.volume, container.id)
            container.start()
        except NotFound as e:
            self.close(gate)
            if "network" not in str(e).lower():
                raise
            raise RunnerUnavailable(
                f"The egress network {self.network!r} does not exist on this Docker engine, "
                "so a skill that lists allowed-domains can't reach them."
            ) from e
        except BaseException:
            self.close(gate)
            raise
        return gate

    def close(self, gate: Gate) -> None:
        """Stop the proxy and remove its volume; what is gone already is skipped."""
        if gate.container:
            try:
                self.client().api.remove_container(gate.container, force=True)
            except NotFound:
                pass
        try:
            self.client().api.remove_volume(gate.volume, force=True)
        except NotFound:
            pass

    def command(self, hosts: tuple[str, ...]) -> list[str]:
        """The proxy container's command: egress_proxy in its proxy role, for `hosts`."""
        socket = f"{PROXY_DIR}/{SOCKET_NAME}"
        private = "1" if self.private else "0"
        policy = [json.dumps(hosts), json.dumps(PORTS), private, json.dumps(SPECIAL_NETWORKS)]
        return ["python3", "-c", program(), "proxy", socket, *policy]

    @staticmethod
    def hardening(labels: dict[str, str]) -> dict[str, Any]:
        return {
            "read_only": True,
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "pids_limit": PROXY_PIDS_LIMIT,
            "mem_limit": PROXY_MEMORY_LIMIT,
            "nano_cpus": PROXY_NANO_CPUS,
            "user": NOBODY,
            "labels": labels,
            "environment": {"PYTHONDONTWRITEBYTECODE": "1"},
        }


def relayed(command: list[str]) -> list[str]:
    """The run container's command: `command` under egress_proxy's relay."""
    return ["python3", "-c", program(), "relay", f"{RUN_DIR}/{SOCKET_NAME}", "--", *command]


def run_options(gate: Gate) -> dict[str, Any]:
    """What the run's container adds for its gate: the socket's volume and the proxy variables."""
    proxy = {name: PROXY_URL for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}
    return {
        "volumes": {gate.volume: {"bind": RUN_DIR, "mode": "ro"}},
        "environment": {**proxy, "NO_PROXY": NO_PROXY, "no_proxy": NO_PROXY},
    }

"""A container run reaches its skill's allowed-domains through its egress gate, and nothing else.

The hosts are two HTTP servers in containers on a Docker network of this test's own, named
`allowed.test` and `other.test` there; the runner's egress proxies use that network as their
outward one, so nothing leaves this machine. The runs go through the real Spark runner (and the
sandbox's container isolation), on the real engine, streaming into a real Redis.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest
from test_spark_runner import GONE, IMAGE, elsewhere, engine, labelled, never
from test_spark_runner import skill as spark_skill

from relay.streams import RunStream
from store.hashing import content_hash
from store.settings import Settings
from workers.runners.base import Job
from workers.runners.egress import VOLUME_PREFIX
from workers.runners.sandbox import ContainerSandboxRunner, build_sandbox_runner
from workers.runners.spark import LABEL, SparkRunner

pytestmark = pytest.mark.docker

__all__ = ["engine"]  # the engine fixture, shared with the Spark runner's tests

TEST_LABEL = "skillfleet.test-egress"
SERVER = (
    "import http.server, sys\n"
    "name = sys.argv[1]\n"
    "class Reply(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        body = f'hello from {name} {self.path}'.encode()\n"
    "        self.send_response(200)\n"
    "        self.send_header('Content-Length', str(len(body)))\n"
    "        self.end_headers()\n"
    "        self.wfile.write(body)\n"
    "server = http.server.HTTPServer(('0.0.0.0', 80), Reply)\n"
    "print('listening', flush=True)\n"
    "server.serve_forever()\n"
)
# What a script sees of the network, one line per attempt.
PROBE = """\
import errno, json, os, socket, sys, urllib.error, urllib.request

args = json.loads(os.environ["SKILLFLEET_ARGS"])

def get(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return f"{reply.status} {reply.read().decode()}"
    except urllib.error.HTTPError as e:
        return f"{e.code} {e.read().decode().strip()}"
    except urllib.error.URLError as e:
        return f"refused {e.reason}"

def connect(address):
    try:
        socket.create_connection((address, 80), timeout=3).close()
        return "connected"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e))

def resolve(name):
    try:
        return str(socket.getaddrinfo(name, 80)[0][4][0])
    except socket.gaierror:
        return "no answer"

print("allowed:", get("http://allowed.test/ping"))
print("allowed, upper case:", get("http://ALLOWED.TEST./ping"))
print("other:", get("http://other.test/ping"))
print("tunnel to other:", get("https://other.test/"))
print("allowed on another port:", get("http://allowed.test:8080/"))
print("allowed by its address:", get(f"http://{args['allowed_ip']}/"))
print("dns other:", resolve("other.test"))
print("dns allowed:", resolve("allowed.test"))
print("direct to other:", connect(args["other_ip"]))
print("interfaces:", sorted(os.listdir("/sys/class/net")))
"""
NO_NETWORK = """\
import errno, json, os, socket
args = json.loads(os.environ["SKILLFLEET_ARGS"])
try:
    socket.create_connection((args["other_ip"], 80), timeout=3).close()
    print("direct to other: connected")
except OSError as e:
    print("direct to other:", errno.errorcode.get(e.errno, str(e)))
print("proxy:", os.environ.get("HTTP_PROXY"))
print("interfaces:", sorted(os.listdir("/sys/class/net")))
"""


@pytest.fixture(scope="module")
def hosts(engine: docker.DockerClient) -> Iterator[dict[str, str]]:
    """The test network's name and the two servers' addresses on it."""
    network = engine.networks.create(
        f"skillfleet-egress-test-{uuid.uuid4().hex[:8]}", labels={TEST_LABEL: "1"}
    )
    servers: list[Any] = []
    try:
        for name in ("allowed.test", "other.test"):
            server = engine.containers.run(
                IMAGE,
                ["python3", "-c", SERVER, name],
                detach=True,
                network=network.name,
                networking_config={network.name: engine.api.create_endpoint_config(aliases=[name])},
                labels={TEST_LABEL: "1"},
                read_only=True,
                user="65534:65534",
            )
            servers.append(server)
        addresses = {"network": network.name}
        for server, key in zip(servers, ("allowed_ip", "other_ip"), strict=True):
            _wait_listening(server)
            server.reload()
            addresses[key] = server.attrs["NetworkSettings"]["Networks"][network.name]["IPAddress"]
        yield addresses
    finally:
        for server in servers:
            server.remove(force=True)
        network.remove()


def _wait_listening(server: Any) -> None:
    for _ in range(200):
        if b"listening" in server.logs():
            return
        server.reload()
        assert server.status != "exited", server.logs().decode()
        time.sleep(0.05)
    raise AssertionError(f"the test server never listened: {server.logs().decode()}")


@contextlib.contextmanager
def leaves_nothing(runner: SparkRunner, engine: docker.DockerClient) -> Iterator[SparkRunner]:
    """`runner`; once its removals settled, no run container, proxy or egress volume is left."""
    yield runner
    runner.settle()
    assert labelled(engine) == [], "a run's container or its egress proxy was left behind"
    left = [
        v.name
        for v in engine.volumes.list()
        if v.name.startswith(VOLUME_PREFIX) and not elsewhere(v.attrs.get("Labels"))
    ]
    assert left == [], "an egress volume was left behind"


@pytest.fixture
def spark(engine: docker.DockerClient, hosts: dict[str, str]) -> Iterator[SparkRunner]:
    runner = SparkRunner(IMAGE, engine, egress_network=hosts["network"], egress_private=True)
    with leaves_nothing(runner, engine):
        yield runner


def skill(tmp_path: Path, domains: str | None, script: str) -> Path:
    """The Spark tests' skill folder with scripts/probe.py, listing `domains` when given."""
    folder = spark_skill(tmp_path, "probe.py", script)
    listed = f"metadata:\n  skillfleet.allowed-domains: {domains}\n" if domains else ""
    (folder / "SKILL.md").write_text(f"---\nname: demo\ndescription: A demo.\n{listed}---\n")
    return folder


def job(folder: Path, script: str, timeout: int = 60, **arguments: Any) -> Job:
    """A run as the broker plans it for a skill that lists hosts: network "bridge"."""
    return Job(
        str(uuid.uuid4()),
        "demo",
        content_hash(folder),
        script,
        arguments,
        timeout,
        network="bridge",
        execution="spark",
    )


def lines(stdout: str) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in stdout.splitlines())


def test_a_run_reaches_its_allowed_host_and_nothing_else(
    tmp_path, spark, engine, hosts, redis_client
):
    folder = skill(tmp_path, "allowed.test", PROBE)
    the_job = job(folder, "scripts/probe.py", **hosts)
    seen: list[list[str]] = []

    def note_containers() -> bool:  # asked every 0.2 s while the script runs
        if not seen:
            seen.append(
                sorted(
                    c.labels.get("skillfleet.egress", "run")
                    for c in labelled(engine, the_job.run_id)
                )
            )
        return False

    outcome = spark.run(the_job, folder, RunStream(redis_client, the_job.run_id), note_containers)

    assert outcome.status == "succeeded", outcome.stderr
    found = lines(outcome.stdout)
    assert found["allowed"] == "200 hello from allowed.test /ping"
    assert found["allowed, upper case"] == "200 hello from allowed.test /ping"
    assert (
        found["other"] == "403 skillfleet egress: other.test is not in the skill's allowed-domains."
    )
    assert found["tunnel to other"] == "refused Tunnel connection failed: 403 Forbidden"
    assert found["allowed on another port"].startswith("403 skillfleet egress: port 8080")
    assert found["allowed by its address"].startswith(
        f"403 skillfleet egress: {hosts['allowed_ip']}"
    )
    # No resolver and no route: the proxy is the only way out.
    assert (found["dns other"], found["dns allowed"]) == ("no answer", "no answer")
    assert found["direct to other"] == "ENETUNREACH"
    assert found["interfaces"] == "['lo']"
    assert seen == [["proxy", "run"]]  # the run's proxy ran beside it, and is gone (fixture)


def test_a_skill_without_allowed_domains_gets_no_network_and_no_proxy(
    tmp_path, spark, engine, hosts, redis_client
):
    folder = skill(tmp_path, None, NO_NETWORK)
    the_job = job(folder, "scripts/probe.py", **hosts)  # even when the run asks for a network
    seen: list[int] = []

    def count_containers() -> bool:
        seen.append(len(labelled(engine)))
        return False

    outcome = spark.run(the_job, folder, RunStream(redis_client, the_job.run_id), count_containers)

    assert outcome.status == "succeeded", outcome.stderr
    assert lines(outcome.stdout) == {
        "proxy": "None",
        "direct to other": "ENETUNREACH",
        "interfaces": "['lo']",
    }
    assert set(seen) <= {1}


def test_a_timed_out_run_takes_its_proxy_and_volume_with_it(tmp_path, spark, redis_client):
    folder = skill(
        tmp_path, "allowed.test", "import time\nprint('up', flush=True)\ntime.sleep(60)\n"
    )
    the_job = job(folder, "scripts/probe.py", timeout=2)

    outcome = spark.run(the_job, folder, RunStream(redis_client, the_job.run_id), never)

    assert outcome.status == "timed_out"
    assert outcome.stdout == "up\n"  # the fixture proves the proxy and its volume are gone


def test_a_missing_outward_network_fails_the_run_clearly_and_leaves_nothing(
    tmp_path, engine, redis_client
):
    folder = skill(tmp_path, "allowed.test", "print('never')\n")
    the_job = job(folder, "scripts/probe.py")
    missing = SparkRunner(IMAGE, engine, egress_network="skillfleet-no-such-network")

    with leaves_nothing(missing, engine):
        outcome = missing.run(the_job, folder, RunStream(redis_client, the_job.run_id), never)

    assert outcome.status == "failed"
    assert "The egress network 'skillfleet-no-such-network' does not exist" in outcome.error


def test_the_sandbox_s_container_isolation_reaches_the_allowed_host_too(
    tmp_path, engine, hosts, redis_client
):
    script = "import urllib.request\nprint(urllib.request.urlopen('http://allowed.test/').read())\n"
    folder = skill(tmp_path, "allowed.test", script)
    the_job = job(folder, "scripts/probe.py")
    # Built as `skillfleet worker sandbox` builds it, from the operator's settings.
    settings = Settings(
        runner_image=IMAGE,
        sandbox_isolation="container",
        runner_network=hosts["network"],
        runner_network_private=True,
    )
    runner, reason = build_sandbox_runner(settings)
    assert isinstance(runner, ContainerSandboxRunner), reason

    with leaves_nothing(runner, engine):
        outcome = runner.run(the_job, folder, RunStream(redis_client, the_job.run_id), never)

    assert outcome.status == "succeeded", outcome.stderr
    assert outcome.stdout == "b'hello from allowed.test /'\n"


def test_the_proxy_s_container_is_hardened_like_a_run_s(engine, hosts):
    runner = SparkRunner(IMAGE, engine, egress_network=hosts["network"])
    gate = runner.egress.open(str(uuid.uuid4()), ("allowed.test",))
    try:
        attrs = engine.api.inspect_container(gate.container)
    finally:
        runner.egress.close(gate)
    host = attrs["HostConfig"]
    assert (host["ReadonlyRootfs"], host["CapDrop"], host["SecurityOpt"]) == (
        True,
        ["ALL"],
        ["no-new-privileges"],
    )
    assert attrs["Config"]["User"] == "65534:65534"
    assert json.loads(attrs["Config"]["Cmd"][5]) == ["allowed.test"]
    assert LABEL in attrs["Config"]["Labels"]


def test_a_worker_s_start_removes_the_proxy_and_volume_a_killed_worker_left(
    engine, hosts, monkeypatch
):
    monkeypatch.setattr("workers.runners.spark.worker_identity", lambda: GONE)
    killed = SparkRunner(IMAGE, engine, egress_network=hosts["network"])
    gate = killed.egress.open(str(uuid.uuid4()), ("allowed.test",))  # then the worker died
    monkeypatch.undo()

    SparkRunner(IMAGE, engine).start()

    assert gate.container not in {c.id for c in engine.containers.list(all=True)}
    assert gate.volume not in {v.name for v in engine.volumes.list()}


def test_runs_that_start_at_once_each_get_their_own_proxy(tmp_path, spark, hosts, redis_client):
    script = "import urllib.request\nprint(urllib.request.urlopen('http://allowed.test/').status)\n"
    folders = [skill(tmp_path / str(n), "allowed.test", script) for n in range(4)]
    outcomes: list[Any] = []

    def run(folder: Path) -> None:
        the_job = job(folder, "scripts/probe.py")
        stream = RunStream(redis_client, the_job.run_id)
        outcomes.append(spark.run(the_job, folder, stream, never))

    threads = [threading.Thread(target=run, args=(folder,)) for folder in folders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert [(o.status, o.stdout) for o in outcomes] == [("succeeded", "200\n")] * 4

"""The runner image, proven inside real containers started with the Spark runner's flags.

Every test starts a real container from the runner image on the real Docker engine (docker SDK)
with exactly the hardening the Spark runner uses, and removes it afterwards. Without an engine or
without the image the tests skip; with CI=true they fail instead. Build the image with
`workers/runner/build-offline.sh` (no registry needed) or from `workers/runner/Dockerfile`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import docker
import pytest
import requests
from docker.errors import DockerException, ImageNotFound, NotFound

pytestmark = pytest.mark.docker

IN_CI = os.environ.get("CI", "").lower() == "true"
IMAGE = os.environ.get("SKILLFLEET_RUNNER_IMAGE", "skillfleet/runner:latest")
LABEL = "skillfleet.run"
LABEL_FILTER = {"label": f"{LABEL}=test"}
PIDS_LIMIT = 256

# `--network none --read-only --tmpfs /tmp --cap-drop ALL --security-opt no-new-privileges
#  --pids-limit 256 --memory 1g --cpus 2 --user 65534:65534`, as docker SDK arguments.
HARDENED: dict[str, Any] = {
    "network_mode": "none",
    "read_only": True,
    "tmpfs": {"/tmp": ""},
    "cap_drop": ["ALL"],
    "security_opt": ["no-new-privileges"],
    "pids_limit": PIDS_LIMIT,
    "mem_limit": "1g",
    "nano_cpus": 2_000_000_000,
    "user": "65534:65534",
    "labels": {LABEL: "test"},
}


@dataclass(frozen=True)
class Finished:
    container_id: str
    exit_code: int | None  # None: killed because it outlived its timeout
    stdout: str
    stderr: str

    @property
    def timed_out(self) -> bool:
        return self.exit_code is None


def unavailable(what: str) -> None:
    """Skip when the engine or the image is missing; with CI=true, fail."""
    if IN_CI:
        pytest.fail(f"{what}: the Docker tests are required in CI (CI=true).")
    pytest.skip(what)


@pytest.fixture(scope="module")
def client() -> Iterator[docker.DockerClient]:
    try:
        engine = docker.from_env()
        engine.ping()
    except (DockerException, requests.exceptions.RequestException) as e:
        unavailable(f"no Docker engine answers ({type(e).__name__}: {e})")
    try:
        engine.images.get(IMAGE)
    except ImageNotFound:
        engine.close()
        unavailable(
            f"the runner image {IMAGE} is missing "
            "(build it with workers/runner/build-offline.sh or workers/runner/Dockerfile)"
        )
    yield engine
    engine.close()


def labelled_containers(client: docker.DockerClient) -> list[Any]:
    return list(client.containers.list(all=True, filters=LABEL_FILTER, ignore_removed=True))


@pytest.fixture(autouse=True)
def no_container_is_left_behind(client: docker.DockerClient) -> Iterator[None]:
    assert labelled_containers(client) == [], "containers from an earlier run are still there"
    yield
    assert labelled_containers(client) == []


def run(client: docker.DockerClient, command: list[str], timeout: float = 60) -> Finished:
    """Run `command` in a hardened runner container; always remove the container."""
    container = client.containers.create(IMAGE, command, **HARDENED)
    try:
        container.start()
        exit_code: int | None
        try:
            exit_code = int(container.wait(timeout=timeout)["StatusCode"])
        except requests.exceptions.RequestException:  # the wait timed out
            container.kill()
            exit_code = None
        stdout = container.logs(stdout=True, stderr=False).decode(errors="replace")
        stderr = container.logs(stdout=False, stderr=True).decode(errors="replace")
        return Finished(container.id, exit_code, stdout, stderr)
    finally:
        container.remove(force=True)


def python(client: docker.DockerClient, code: str, timeout: float = 60) -> Finished:
    finished = run(client, ["python3", "-c", code], timeout=timeout)
    assert not finished.timed_out, "the container did not end in time"
    assert finished.exit_code == 0, finished.stderr
    return finished


def test_the_root_filesystem_is_read_only(client: docker.DockerClient) -> None:
    finished = run(client, ["bash", "-c", "echo x > /etc/x"])

    assert finished.exit_code != 0
    assert "Read-only file system" in finished.stderr


def test_no_path_outside_tmp_can_be_created(client: docker.DockerClient) -> None:
    code = """
import errno, json
result = {}
for path in ["/x", "/etc/x", "/skill/x", "/var/tmp/x", "/home/x", "/usr/local/bin/x"]:
    try:
        open(path, "w").close()
        result[path] = "created"
    except OSError as e:
        result[path] = errno.errorcode[e.errno]
root = [line.split()[3] for line in open("/proc/self/mounts") if line.split()[1] == "/"]
print(json.dumps({"paths": result, "root_options": root[-1].split(",")}))
"""
    report = json.loads(python(client, code).stdout)

    assert set(report["paths"].values()) == {"EROFS"}, report["paths"]
    assert "ro" in report["root_options"]


def test_scripts_run_as_the_unprivileged_user_65534(client: docker.DockerClient) -> None:
    finished = run(client, ["id", "-u"])

    assert finished.exit_code == 0, finished.stderr
    assert finished.stdout.strip() == "65534"
    assert run(client, ["id", "-g"]).stdout.strip() == "65534"


def test_scripts_have_no_capabilities_and_cannot_gain_privileges(
    client: docker.DockerClient,
) -> None:
    code = """
fields = dict(line.split(":", 1) for line in open("/proc/self/status"))
print(" ".join(fields[key].strip() for key in ["CapEff", "CapPrm", "CapBnd", "NoNewPrivs"]))
"""
    effective, permitted, bounding, no_new_privs = python(client, code).stdout.split()

    assert int(effective, 16) == int(permitted, 16) == int(bounding, 16) == 0
    assert no_new_privs == "1"


def test_the_only_network_interface_is_loopback(client: docker.DockerClient) -> None:
    code = """
import json, os
proc = [line.split(":")[0].strip() for line in open("/proc/net/dev").readlines()[2:]]
print(json.dumps({"sys": sorted(os.listdir("/sys/class/net")), "proc": sorted(proc)}))
"""
    interfaces = json.loads(python(client, code).stdout)

    assert interfaces == {"sys": ["lo"], "proc": ["lo"]}


def test_tmp_is_a_writable_tmpfs(client: docker.DockerClient) -> None:
    script = (
        "echo hello > /tmp/note && cat /tmp/note && mkdir /tmp/work && touch /tmp/work/x "
        "&& awk '$2 == \"/tmp\" {print $3}' /proc/self/mounts"
    )
    finished = run(client, ["bash", "-c", script])

    assert finished.exit_code == 0, finished.stderr
    assert finished.stdout.split() == ["hello", "tmpfs"]


def test_scripts_start_in_the_skill_folder(client: docker.DockerClient) -> None:
    finished = run(client, ["pwd"])

    assert finished.exit_code == 0, finished.stderr
    assert finished.stdout.strip() == "/skill"


@pytest.mark.parametrize(
    "command",
    [
        ["python3", "-c", "import sys; print(sum(range(7)) * 2, sys.version_info[0])"],
        ["node", "-e", "console.log(6 * 7, 3)"],
        ["bash", "-c", "echo $((6 * 7)) 3"],
    ],
    ids=["python3", "node", "bash"],
)
def test_each_interpreter_runs_a_script(client: docker.DockerClient, command: list[str]) -> None:
    finished = run(client, command)

    assert finished.exit_code == 0, finished.stderr
    assert finished.stdout.strip() == "42 3"


def test_a_fork_loop_hits_the_pids_limit_and_the_container_still_ends(
    client: docker.DockerClient,
) -> None:
    # Fork children that hold their pid (sleep) until fork fails or 20 s pass; then exit, which
    # ends the container (the kernel kills what is left in its pid namespace).
    code = """
import errno, os, sys, time
children = 0
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    try:
        pid = os.fork()
    except OSError as e:
        print(f"fork failed with {errno.errorcode[e.errno]} after {children} children")
        sys.exit(0)
    if pid == 0:
        try:
            os.execv("/bin/sleep", ["sleep", "60"])
        finally:
            os._exit(127)
    children += 1
print(f"fork never failed ({children} children in 20 s)")
sys.exit(1)
"""
    finished = run(client, ["python3", "-c", code], timeout=60)

    assert not finished.timed_out, "the container did not end after the fork loop"
    assert finished.exit_code == 0, finished.stdout + finished.stderr
    match = re.fullmatch(r"fork failed with EAGAIN after (\d+) children", finished.stdout.strip())
    assert match, finished.stdout
    assert PIDS_LIMIT - 10 <= int(match[1]) < PIDS_LIMIT


def test_a_recursive_fork_bomb_is_contained_and_the_container_still_ends(
    client: docker.DockerClient,
) -> None:
    # A bash fork bomb whose every process forks twice and waits, so the tree keeps growing
    # until fork fails; bounded by `timeout` (the container's pid 1), which stops it after 8 s
    # (SIGTERM, then SIGKILL 3 s later if anything is left). Which limit stops the tree first
    # depends on the host: the pids limit (EAGAIN, bash retries until `timeout` ends it) or the
    # memory limit (ENOMEM, bash gives up and the tree unwinds by itself with a failure status).
    bomb = "bomb() { bomb & bomb & wait; }; bomb"
    finished = run(client, ["timeout", "-k", "3", "8", "bash", "-c", bomb], timeout=60)

    assert not finished.timed_out, "the container did not end after the fork bomb"
    assert finished.exit_code != 0
    stopped_by_pids = "fork: retry: Resource temporarily unavailable" in finished.stderr
    stopped_by_memory = "fork: Cannot allocate memory" in finished.stderr
    assert stopped_by_pids or stopped_by_memory, finished.stderr[-2000:]
    if not stopped_by_memory:
        assert finished.exit_code in (124, 137)  # timeout's "timed out" (after TERM / after KILL)


def test_a_finished_container_is_gone_afterwards(client: docker.DockerClient) -> None:
    finished = run(client, ["true"])

    assert finished.exit_code == 0
    with pytest.raises(NotFound):
        client.containers.get(finished.container_id)
    assert client.containers.list(all=True, filters={"label": "skillfleet.run=test"}) == []


def test_a_container_that_outlives_its_timeout_is_killed_and_gone(
    client: docker.DockerClient,
) -> None:
    finished = run(client, ["sleep", "300"], timeout=2)

    assert finished.timed_out
    with pytest.raises(NotFound):
        client.containers.get(finished.container_id)
    assert client.containers.list(all=True, filters={"label": "skillfleet.run=test"}) == []

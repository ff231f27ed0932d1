"""The sandbox runner: its refusals, the container opt-in, and real Hyperlight micro-VMs.

The micro-VM tests run only with SKILLFLEET_TEST_KVM=1 (a KVM host where Hyperlight works);
with it set they fail rather than skip when Hyperlight can't run. Without it, the probe must
explain why this host can't offer the sandbox. The container opt-in needs Docker, the runner
image and Redis like the Spark tests: without them it skips, with CI=true it fails.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import docker
import pytest
import redis
import requests
from conftest import IN_CI
from docker.errors import DockerException
from fleet import killed_worker_leaves_no_child
from hyperlight_standin import write_stand_in
from test_spark_runner import labelled

from relay.errors import PackageUnverified
from relay.streams import RunStream, read_events
from store.hashing import content_hash
from store.limits import COALESCE_SECONDS
from store.settings import Settings
from workers.runners.base import Job, OutputCollector
from workers.runners.node import LAUNCHER
from workers.runners.sandbox import (
    ContainerSandboxRunner,
    SandboxRunner,
    _pump,
    build_sandbox_runner,
)
from workers.runners.spark import LABEL

IMAGE = os.environ.get("SKILLFLEET_RUNNER_IMAGE", "skillfleet/runner:latest")
WITH_KVM = os.environ.get("SKILLFLEET_TEST_KVM") == "1"
kvm = [
    pytest.mark.kvm,
    pytest.mark.skipif(not WITH_KVM, reason="micro-VM tests run with SKILLFLEET_TEST_KVM=1"),
]


@pytest.fixture
def engine() -> Iterator[docker.DockerClient]:
    try:
        client = docker.from_env()
        client.ping()
        client.images.get(IMAGE)
    except (DockerException, requests.exceptions.RequestException) as e:
        if IN_CI:
            pytest.fail(f"Docker and {IMAGE} are required in CI (CI=true): {e}")
        pytest.skip(f"Docker or {IMAGE} is not available ({type(e).__name__})")
    yield client
    assert labelled(client) == []
    client.close()


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxRunner]:
    """A working Hyperlight runner; on a KVM test host a failing probe is a failure."""
    runner = SandboxRunner(pool_size=1)
    reason = runner.probe()
    assert reason is None, reason
    yield runner
    runner.close()


def skill(tmp_path: Path, files: dict[str, str]) -> Path:
    """A skill folder as the node cache installs it: dirs 0700, files 0600."""
    folder = tmp_path / "cache" / "demo@hash"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\nname: demo\ndescription: A demo.\n---\n")
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o700 if path.is_dir() else 0o600)
    return folder


def job(
    folder: Path | None, script: str, timeout: int = 30, network: str = "none", **arguments: Any
) -> Job:
    """A job for the skill in `folder` under its real content hash, which the runner proves."""
    skill_hash = content_hash(folder) if folder is not None else "0" * 64
    return Job(
        str(uuid.uuid4()), "demo", skill_hash, script, dict(arguments), timeout, network, "sandbox"
    )


def never() -> bool:
    return False


# -- without a working Hyperlight -----------------------------------------------------------


@pytest.mark.skipif(WITH_KVM, reason="this host runs micro-VMs")
def test_the_probe_explains_why_hyperlight_cannot_run_here():
    reason = SandboxRunner().probe()

    assert reason is not None
    assert "Hyperlight" in reason and "KVM" in reason.upper()


@pytest.mark.skipif(WITH_KVM, reason="this host runs micro-VMs")
def test_without_hyperlight_no_sandbox_runner_is_built_and_the_reason_is_given():
    runner, reason = build_sandbox_runner(Settings(sandbox_isolation="hyperlight"))

    assert runner is None
    assert reason is not None and "Hyperlight" in reason


# A stand-in worker: it boots a micro-VM child the sandbox runner's way, starts a program that
# never ends, says the child's pid, and waits to be killed.
SANDBOX_WORKER = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from workers.runners.guests import PYTHON_GUEST
from workers.runners.sandbox import _MicroVM, _send

vm = _MicroVM(PYTHON_GUEST, ())
assert vm.wait_ready(30) is None
_send(vm.conn, "emit('stdout', 'started')\\nimport time\\ntime.sleep(60)")
assert vm.conn.poll(30) and vm.conn.recv() == ("out", "stdout", "started")
print(json.dumps({"pid": vm.process.pid, "command": vm.process.args}), flush=True)
time.sleep(60)
"""


def test_a_micro_vm_child_dies_with_its_worker(tmp_path):
    write_stand_in(tmp_path)

    started, worker_pid = killed_worker_leaves_no_child(
        SANDBOX_WORKER, str(tmp_path), what="the micro-VM child to die with its worker"
    )

    if LAUNCHER is not None:  # a vfork and the launcher's exec, not a fork of the worker
        assert started["command"][:3] == [LAUNCHER, str(worker_pid), sys.executable]


@dataclass
class GuestPipe:
    """The worker's end of a micro-VM's pipe; this test plays the guest on the other end."""

    conn: Connection


def test_guest_output_is_published_in_bursts_not_one_entry_per_print(redis_client):
    ours, guest = multiprocessing.Pipe()
    run_id = f"run-{uuid.uuid4()}"
    collector = OutputCollector(RunStream(redis_client, run_id), coalesce_seconds=COALESCE_SECONDS)
    lines = [f"line {i}\n" for i in range(50)]
    for line in lines:  # 50 prints waiting at once: one burst
        guest.send(("out", "stdout", line))

    def finish_later() -> None:
        time.sleep(0.3)
        guest.send(("out", "stdout", "late\n"))
        guest.send(("done", 0, "", "", True))

    finisher = threading.Thread(target=finish_later)
    finisher.start()
    ended = _pump(GuestPipe(ours), collector, 30, lambda: False)  # type: ignore[arg-type]
    finisher.join()

    assert ended == (None, 0, True)
    texts = [e.data["text"] for e in read_events(redis_client, run_id) if e.kind == "stdout"]
    assert "".join(texts) == "".join(lines) + "late\n"
    assert texts[-1] == "late\n"  # a print after a pause opens a burst of its own
    # How many 2 ms windows 50 queued messages take depends on the machine's load, never 50.
    assert len(texts) <= 10


@pytest.mark.parametrize("script", ["scripts/a.sh", "scripts/b.cs", "scripts/c.rb", "scripts/d"])
@pytest.mark.parametrize(
    "runner", [SandboxRunner(), ContainerSandboxRunner(IMAGE)], ids=["hyperlight", "container"]
)
def test_scripts_other_than_py_js_mjs_are_refused_without_starting_anything(
    tmp_path, redis_client, script, runner
):
    folder = skill(tmp_path, {script: "echo hi\n"})
    the_job = job(folder, script)

    outcome = runner.run(the_job, folder, RunStream(redis_client, the_job.run_id), never)

    name = Path(script).name
    message = f"Sandboxed skills can run .py, .js and .mjs scripts only; {name} can't run here."
    assert (outcome.status, outcome.exit_code, outcome.error) == ("failed", None, message)
    assert read_events(redis_client, the_job.run_id) == []  # nothing started, nothing said


# -- the container opt-in ------------------------------------------------------------------


@pytest.mark.docker
def test_the_container_opt_in_runs_python_with_no_network(tmp_path, engine, redis_client):
    settings = Settings(sandbox_isolation="container", runner_image=IMAGE)
    runner, reason = build_sandbox_runner(settings)
    assert reason is None and isinstance(runner, ContainerSandboxRunner)
    folder = skill(
        tmp_path,
        {
            "scripts/net.py": "import json, os\n"
            "print(json.loads(os.environ['SKILLFLEET_ARGS'])['word'])\n"
            "print(sorted(os.listdir('/sys/class/net')), os.getuid())\n"
        },
    )
    the_job = job(folder, "scripts/net.py", network="bridge", word="hello")

    outcome = runner.run(the_job, folder, RunStream(redis_client, the_job.run_id), never)

    assert runner.isolation == "container"
    assert outcome.status == "succeeded", outcome.stderr
    assert outcome.stdout == "hello\n['lo'] 65534\n"
    runner.settle()  # the finished container is removed in the background
    runner.volumes.keep = 0
    runner.volumes.prune()  # and the skill's volume, kept for later runs, too


def test_the_container_opt_in_never_asks_for_a_network(tmp_path):
    runner = ContainerSandboxRunner(IMAGE)

    options = runner.container_options(job(None, "scripts/a.py", network="bridge"), tmp_path)

    assert options["network_mode"] == "none"
    assert options["read_only"] is True and options["cap_drop"] == ["ALL"]


# -- real micro-VMs (SKILLFLEET_TEST_KVM=1) -------------------------------------------------


def micro_vm(test: Any) -> Any:
    """Marks a test that boots real micro-VMs: it runs only with SKILLFLEET_TEST_KVM=1."""
    needs_kvm = pytest.mark.skipif(not WITH_KVM, reason="runs with SKILLFLEET_TEST_KVM=1")
    return pytest.mark.kvm(needs_kvm(test))


def texts(redis_client: redis.Redis, run_id: str, kind: str) -> str:
    return "".join(e.data["text"] for e in read_events(redis_client, run_id) if e.kind == kind)


@micro_vm
def test_a_python_script_runs_in_a_micro_vm_with_its_arguments(tmp_path, redis_client, sandbox):
    folder = skill(
        tmp_path,
        {
            "scripts/args.py": "import json, os, sys\n"
            "args = json.loads(os.environ['SKILLFLEET_ARGS'])\n"
            "print(args['word'], os.environ['LUCIA_SKILL_ARGS'] == os.environ['SKILLFLEET_ARGS'])\n"
            "print('to stderr', file=sys.stderr)\n"
        },
    )
    the_job = job(folder, "scripts/args.py", word="héllo ✓")

    outcome = sandbox.run(the_job, folder, RunStream(redis_client, the_job.run_id), never)

    assert (outcome.status, outcome.exit_code) == ("succeeded", 0), outcome.stderr
    assert (outcome.stdout, outcome.stderr) == ("héllo ✓ True\n", "to stderr\n")
    assert texts(redis_client, the_job.run_id, "stdout") == outcome.stdout
    assert texts(redis_client, the_job.run_id, "stderr") == outcome.stderr
    assert sandbox.isolation == "hyperlight"


@micro_vm
@pytest.mark.parametrize("name", ["scripts/exit.js", "scripts/exit.mjs"])
def test_a_javascript_script_runs_in_a_micro_vm_with_its_exit_code(
    tmp_path, redis_client, sandbox, name
):
    folder = skill(
        tmp_path,
        {
            name: "const args = JSON.parse(process.env.SKILLFLEET_ARGS);\n"
            "await Promise.resolve();\n"
            "console.log('word', args.word);\n"
            "console.error('to stderr');\n"
            "process.exit(2);\n"
        },
    )
    the_job = job(folder, name, word="hello")

    outcome = sandbox.run(the_job, folder, RunStream(redis_client, the_job.run_id), never)

    assert (outcome.status, outcome.exit_code) == ("failed", 2), outcome.stderr
    assert (outcome.stdout, outcome.stderr) == ("word hello\n", "to stderr\n")
    assert outcome.error == "The script exited with code 2."


@micro_vm
def test_skill_files_are_readable_but_read_only_in_the_micro_vm(tmp_path, redis_client, sandbox):
    folder = skill(
        tmp_path,
        {
            "references/data.txt": "kept\n",
            "scripts/write.py": "print(open('/input/references/data.txt').read().strip())\n"
            "try:\n"
            "    open('/input/references/data.txt', 'w').write('changed')\n"
            "    print('written')\n"
            "except OSError:\n"
            "    print('refused')\n",
        },
    )
    the_job = job(folder, "scripts/write.py")

    outcome = sandbox.run(the_job, folder, RunStream(redis_client, the_job.run_id), never)

    assert (outcome.status, outcome.stdout) == ("succeeded", "kept\nrefused\n"), outcome.stderr
    assert (folder / "references" / "data.txt").read_text() == "kept\n"


@micro_vm
def test_a_run_starts_from_the_snapshot_not_from_the_previous_run(tmp_path, redis_client, sandbox):
    folder = skill(
        tmp_path,
        {
            "scripts/leave.py": "import os\nos.environ['LEFT'] = 'x'\n"
            "open('/output/left.txt', 'w').write('x')\n",
            "scripts/look.py": "import os\nprint(os.environ.get('LEFT'), os.listdir('/output'))\n",
        },
    )
    first, second = job(folder, "scripts/leave.py"), job(folder, "scripts/look.py")

    assert sandbox.run(first, folder, RunStream(redis_client, first.run_id), never).status == (
        "succeeded"
    )
    outcome = sandbox.run(second, folder, RunStream(redis_client, second.run_id), never)

    assert (outcome.status, outcome.stdout) == ("succeeded", "None []\n"), outcome.stderr


@micro_vm
def test_output_streams_while_the_micro_vm_runs(tmp_path, redis_client, sandbox):
    folder = skill(
        tmp_path,
        {
            "scripts/ticks.py": "import time\nfor i in range(4):\n"
            "    print('tick', i)\n    time.sleep(0.5)\n"
        },
    )
    the_job = job(folder, "scripts/ticks.py")
    first_line_at: list[float] = []

    def note_first_line() -> bool:  # the runner asks this every 0.2 s while the VM runs
        if not first_line_at and texts(redis_client, the_job.run_id, "stdout"):
            first_line_at.append(time.monotonic())
        return False

    outcome = sandbox.run(the_job, folder, RunStream(redis_client, the_job.run_id), note_first_line)
    ended_at = time.monotonic()

    assert outcome.stdout == "tick 0\ntick 1\ntick 2\ntick 3\n", outcome.stderr
    assert first_line_at and ended_at - first_line_at[0] > 1.0


@micro_vm
def test_a_micro_vm_past_its_timeout_is_stopped_and_the_runner_still_works(
    tmp_path, redis_client, sandbox
):
    folder = skill(
        tmp_path,
        {"scripts/spin.py": "print('spinning')\nwhile True:\n    pass\n", "scripts/ok.js": ""},
    )
    the_job = job(folder, "scripts/spin.py", timeout=2)
    started = time.monotonic()

    outcome = sandbox.run(the_job, folder, RunStream(redis_client, the_job.run_id), never)

    assert (outcome.status, outcome.stdout) == ("timed_out", "spinning\n")
    assert outcome.error == "The script ran past its 2 s limit."
    assert time.monotonic() - started < 20
    after = job(folder, "scripts/ok.js")
    assert sandbox.run(after, folder, RunStream(redis_client, after.run_id), never).status == (
        "succeeded"
    )


@micro_vm
def test_cancel_stops_the_micro_vm(tmp_path, redis_client, sandbox):
    folder = skill(
        tmp_path,
        {"scripts/loop.js": "while (true) { console.log('tick'); await Promise.resolve(); }\n"},
    )
    the_job = job(folder, "scripts/loop.js")

    outcome = sandbox.run(
        the_job, folder, RunStream(redis_client, the_job.run_id),
        lambda: bool(texts(redis_client, the_job.run_id, "stdout")),
    )  # fmt: skip

    assert (outcome.status, outcome.error) == ("cancelled", "The run was cancelled.")
    assert outcome.stdout.startswith("tick\n")


@pytest.mark.docker
def test_the_container_opt_in_refuses_a_skill_that_does_not_hash_to_the_run_s_hash(
    tmp_path, engine, redis_client
):
    folder = skill(tmp_path, {"scripts/ok.py": "print('ok')\n"})
    the_job = job(folder, "scripts/ok.py")
    (folder / "scripts" / "ok.py").write_text("print('planted')\n")

    with pytest.raises(PackageUnverified, match="copy for the container"):
        ContainerSandboxRunner(IMAGE, engine).run(
            the_job, folder, RunStream(redis_client, the_job.run_id), never
        )

    assert engine.containers.list(all=True, filters={"label": f"{LABEL}={the_job.run_id}"}) == []
    assert read_events(redis_client, the_job.run_id) == []


@micro_vm
def test_a_skill_that_does_not_hash_to_the_run_s_hash_never_runs_in_a_micro_vm(
    tmp_path, redis_client, sandbox
):
    folder = skill(tmp_path, {"scripts/ok.py": "print('ok')\n"})
    the_job = job(folder, "scripts/ok.py")
    (folder / "scripts" / "ok.py").write_text("print('planted')\n")

    with pytest.raises(PackageUnverified, match="copy for the micro-VM"):
        sandbox.run(the_job, folder, RunStream(redis_client, the_job.run_id), never)

    assert read_events(redis_client, the_job.run_id) == []  # nothing started, nothing said

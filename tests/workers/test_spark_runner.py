"""The Spark runner on the real Docker engine, streaming into a real Redis run stream.

Skill folders are built like the node cache builds them (dirs 0700, files 0600). Without an
engine, the runner image or Redis the tests skip; with CI=true they fail instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import docker
import pytest
import redis
import requests
from conftest import IN_CI
from docker.errors import DockerException, ImageNotFound

from relay.errors import PackageUnverified, RunnerUnavailable
from relay.streams import RunStream, read_events
from store.hashing import content_hash
from store.limits import COALESCE_BYTES
from workers.runners.base import Job
from workers.runners.ownership import WORKER_LABEL, worker_alive, worker_identity
from workers.runners.skill_volumes import FILL_LABEL, SKILL_LABEL, VOLUME_PREFIX
from workers.runners.spark import LABEL, QUEUE_LABEL, TMPFS_OPTIONS, SparkRunner

pytestmark = pytest.mark.docker

IMAGE = os.environ.get("SKILLFLEET_RUNNER_IMAGE", "skillfleet/runner:latest")


@pytest.fixture(scope="module")
def engine() -> Iterator[docker.DockerClient]:
    try:
        client = docker.from_env()
        client.ping()
        client.images.get(IMAGE)
    except (DockerException, requests.exceptions.RequestException) as e:
        what = "the runner image" if isinstance(e, ImageNotFound) else "a Docker engine"
        if IN_CI:
            pytest.fail(f"{what} is required in CI (CI=true): {e}")
        pytest.skip(f"{what} is not available ({type(e).__name__})")
    yield client
    client.close()


@pytest.fixture
def runner(engine: docker.DockerClient) -> Iterator[SparkRunner]:
    spark = SparkRunner(IMAGE, engine)
    yield spark
    spark.settle()  # finished containers are removed in the background
    assert labelled(engine) == [], "a run's container was left behind"
    held = spark.volumes.held().values()
    spark.volumes.keep = 0
    spark.volumes.prune()
    assert not set(held) & {v.name for v in engine.volumes.list()}, "a skill volume stayed"


def labelled(
    engine: docker.DockerClient, run_id: str | None = None, every: bool = False
) -> list[Any]:
    """The run containers on the engine, but another live worker's (a first-pass test's
    `skillfleet up` may run a Spark worker on the same engine meanwhile) unless `every`."""
    label = LABEL if run_id is None else f"{LABEL}={run_id}"
    found = engine.containers.list(all=True, filters={"label": label}, ignore_removed=True)
    return [container for container in found if every or not elsewhere(container.labels)]


MINE = worker_identity()
# A worker process that is gone: no process on this host has that pid.
GONE = f"{socket.gethostname()}:{2**22 + 1}:1"


@pytest.fixture
def gone_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runners made in the test stand for a worker that was killed: what they make is labelled
    with a process that no longer runs, as a crashed worker's leftovers are."""
    monkeypatch.setattr("workers.runners.spark.worker_identity", lambda: GONE)


def elsewhere(labels: dict[str, str] | None) -> bool:
    """Whether another live worker process made it: not this test's to count."""
    worker = (labels or {}).get(WORKER_LABEL)
    return bool(worker) and worker != MINE and worker_alive(worker)


def skill(tmp_path: Path, name: str, text: str) -> Path:
    """A skill folder as the node cache installs it: dirs 0700, files 0600."""
    folder = tmp_path / "cache" / "demo@hash"
    (folder / "scripts").mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text("---\nname: demo\ndescription: A demo.\n---\n")
    (folder / "scripts" / name).write_text(text)
    for path in [folder, folder / "scripts"]:
        path.chmod(0o700)
    for path in [folder / "SKILL.md", folder / "scripts" / name]:
        path.chmod(0o600)
    return folder


def job(
    folder: Path | None, script: str, timeout: int = 30, network: str = "none", **arguments: Any
) -> Job:
    """A job for the skill in `folder` under its real content hash, which the runner proves."""
    skill_hash = content_hash(folder) if folder is not None else "0" * 64
    return Job(str(uuid.uuid4()), "demo", skill_hash, script, dict(arguments), timeout, network)


def skill_volumes(engine: docker.DockerClient, skill_hash: str) -> list[str]:
    return [v.name for v in engine.volumes.list(filters={"label": f"{SKILL_LABEL}={skill_hash}"})]


def plant_volume(engine: docker.DockerClient, name: str, labels: dict[str, str]) -> None:
    """A volume named `name` whose scripts/ok.py prints `planted`, as an intruder makes it."""
    engine.volumes.create(name, labels=labels)
    engine.containers.run(
        IMAGE,
        ["bash", "-c", "mkdir -p /v/scripts && echo \"print('planted')\" > /v/scripts/ok.py"],
        volumes={name: {"bind": "/v", "mode": "rw"}},
        network_mode="none",
        user="0",
        remove=True,
    )


def run_ok(runner: SparkRunner, redis_client: redis.Redis, folder: Path) -> str:
    the_job = job(folder, "scripts/ok.py")
    outcome = runner.run(the_job, folder, RunStream(redis_client, the_job.run_id), never)
    assert outcome.status == "succeeded", outcome.stderr
    return outcome.stdout


def never() -> bool:
    return False


def texts(redis_client: redis.Redis, run_id: str, kind: str) -> list[str]:
    return [e.data["text"] for e in read_events(redis_client, run_id) if e.kind == kind]


def test_stdout_and_stderr_arrive_separately_and_in_order(tmp_path, runner, redis_client):
    folder = skill(
        tmp_path,
        "talk.py",
        "import sys\n"
        "for i in range(3):\n"
        "    sys.stdout.write(f'out {i}\\n'); sys.stdout.flush()\n"
        "    sys.stderr.write(f'err {i}\\n'); sys.stderr.flush()\n",
    )
    the_job = job(folder, "scripts/talk.py")

    outcome = runner.run(the_job, folder, RunStream(redis_client, the_job.run_id), never)

    assert (outcome.status, outcome.exit_code, outcome.error) == ("succeeded", 0, None)
    assert outcome.stdout == "out 0\nout 1\nout 2\n"
    assert outcome.stderr == "err 0\nerr 1\nerr 2\n"
    assert "".join(texts(redis_client, the_job.run_id, "stdout")) == outcome.stdout
    assert "".join(texts(redis_client, the_job.run_id, "stderr")) == outcome.stderr
    first = read_events(redis_client, the_job.run_id)[0]
    assert first.kind == "status" and first.data["status"] == "running"


def test_a_line_printed_every_half_second_arrives_while_the_script_runs(
    tmp_path, runner, redis_client
):
    folder = skill(
        tmp_path,
        "ticks.py",
        "import time\nfor i in range(4):\n    print('tick', i, flush=True)\n    time.sleep(0.5)\n",
    )
    the_job = job(folder, "scripts/ticks.py")
    first_line_at: list[float] = []

    def watch() -> None:
        after, deadline = "0-0", time.monotonic() + 30
        while not first_line_at and time.monotonic() < deadline:
            for event in read_events(redis_client, the_job.run_id, after, block_ms=1000):
                after = event.id
                if event.kind == "stdout" and not first_line_at:
                    first_line_at.append(time.monotonic())

    watcher = threading.Thread(target=watch)
    watcher.start()
    outcome = runner.run(the_job, folder, RunStream(redis_client, the_job.run_id), never)
    ended_at = time.monotonic()
    watcher.join(timeout=30)

    assert outcome.status == "succeeded"
    assert outcome.stdout == "tick 0\ntick 1\ntick 2\ntick 3\n"
    assert first_line_at, "no output arrived in the stream"
    assert ended_at - first_line_at[0] > 1.2  # the first line came about 2 s before the end


def test_each_burst_of_output_is_one_stream_entry_not_one_per_write(tmp_path, runner, redis_client):
    # Unbuffered, print("tick", i) writes "tick", " ", the number and "\n" separately.
    folder = skill(
        tmp_path,
        "tick.py",
        "import time\nfor i in range(3):\n    print('tick', i)\n    time.sleep(0.2)\n"
        "print('x' * 100_000, end='')\n",
    )
    the_job = job(folder, "scripts/tick.py")
    # A window wider than the default 2 ms, which a loaded machine's stalls can split, and still
    # far shorter than the pauses between the prints.
    runner.coalesce_seconds = 0.05

    outcome = runner.run(the_job, folder, RunStream(redis_client, the_job.run_id), never)

    assert outcome.status == "succeeded"
    stdout = texts(redis_client, the_job.run_id, "stdout")
    first_x = next(index for index, text in enumerate(stdout) if text.startswith("x"))
    ticks, tail = stdout[:first_x], stdout[first_x:]
    assert "".join(ticks) == "tick 0\ntick 1\ntick 2\n"
    assert all(text.count("tick") <= 1 for text in ticks)  # a window never spans a pause
    assert len(ticks) <= 6  # twelve writes: a window gathers each print's four
    # How much of the 100 kB one window catches depends on the machine's load; no entry is larger
    # than COALESCE_BYTES and nothing is lost.
    assert max(len(text) for text in tail) <= COALESCE_BYTES
    assert "".join(tail) == "x" * 100_000


def test_a_non_zero_exit_fails_the_run_with_its_code(tmp_path, runner, redis_client):
    folder = skill(tmp_path, "fail.py", "import sys\nprint('oops', file=sys.stderr)\nsys.exit(3)\n")
    the_job = job(folder, "scripts/fail.py")

    outcome = runner.run(the_job, folder, RunStream(redis_client, the_job.run_id), never)

    assert (outcome.status, outcome.exit_code, outcome.stderr) == ("failed", 3, "oops\n")
    assert outcome.error == "The script exited with code 3."


def test_a_script_past_its_timeout_is_killed_and_its_container_is_gone(
    tmp_path, runner, engine, redis_client
):
    folder = skill(
        tmp_path, "slow.py", "import time\nprint('started', flush=True)\ntime.sleep(60)\n"
    )
    the_job = job(folder, "scripts/slow.py", timeout=1)
    started = time.monotonic()

    outcome = runner.run(the_job, folder, RunStream(redis_client, the_job.run_id), never)

    assert outcome.status == "timed_out"
    assert outcome.error == "The script ran past its 1 s limit."
    assert outcome.stdout == "started\n"
    assert time.monotonic() - started < 15
    runner.settle()
    assert labelled(engine, the_job.run_id) == []


def test_cancel_kills_the_container_and_the_run_is_cancelled(tmp_path, runner, redis_client):
    folder = skill(
        tmp_path,
        "loop.py",
        "import time\nwhile True:\n    print('tick', flush=True)\n    time.sleep(0.1)\n",
    )
    the_job = job(folder, "scripts/loop.py")

    def cancelled() -> bool:  # the user cancels once the first tick is in the stream
        return bool(texts(redis_client, the_job.run_id, "stdout"))

    started = time.monotonic()
    outcome = runner.run(the_job, folder, RunStream(redis_client, the_job.run_id), cancelled)

    assert (outcome.status, outcome.error) == ("cancelled", "The run was cancelled.")
    assert outcome.stdout.startswith("tick\n")
    assert time.monotonic() - started < 15


def test_arguments_arrive_in_skillfleet_args_and_lucia_skill_args(tmp_path, runner, redis_client):
    folder = skill(
        tmp_path,
        "args.py",
        "import json, os\n"
        "print(json.dumps([json.loads(os.environ[k]) for k in "
        "('SKILLFLEET_ARGS', 'LUCIA_SKILL_ARGS')]))\n"
        "print(os.environ['SKILLFLEET_RUN_ID'])\n",
    )
    the_job = job(folder, "scripts/args.py", word="héllo ✓", count=2, nested={"a": [1, None]})

    outcome = runner.run(the_job, folder, RunStream(redis_client, the_job.run_id), never)

    assert outcome.status == "succeeded", outcome.stderr
    both, run_id = outcome.stdout.splitlines()
    assert json.loads(both) == [the_job.arguments, the_job.arguments]
    assert run_id == the_job.run_id


def test_a_script_gets_its_argv_as_separate_arguments_in_the_container(
    tmp_path, runner, redis_client
):
    folder = skill(tmp_path, "argv.py", "import json, sys\nprint(json.dumps(sys.argv))\n")
    argv = ("form one.pdf", "$(touch /tmp/pwned)", "`id`", "--", "-rf", "é ✓")
    the_job = replace(job(folder, "scripts/argv.py"), argv=argv)

    outcome = runner.run(the_job, folder, RunStream(redis_client, the_job.run_id), never)

    assert outcome.status == "succeeded", outcome.stderr
    # Run as the module scripts.argv (workers/runners/interpreters.py): argv[0] is its path.
    assert json.loads(outcome.stdout) == ["/skill/scripts/argv.py", *argv]


def test_the_skill_mount_is_read_only_and_the_run_writes_to_its_work_folder_and_tmp(
    tmp_path, runner, redis_client
):
    folder = skill(
        tmp_path,
        "write.py",
        "import errno, os\n"
        "for path in ['note', '/skill/scripts/write.py', '/etc/note']:\n"
        "    try:\n"
        "        open(path, 'w').close()\n"
        "        print(path, 'written')\n"
        "    except OSError as e:\n"
        "        print(path, errno.errorcode[e.errno])\n"
        "open('/tmp/note', 'w').write('kept')\n"
        "print(open('/tmp/note').read(), os.getcwd(), os.getuid(), sorted(os.listdir('.')))\n",
    )
    the_job = job(folder, "scripts/write.py")

    outcome = runner.run(the_job, folder, RunStream(redis_client, the_job.run_id), never)

    assert outcome.status == "succeeded", outcome.stderr
    assert outcome.stdout.splitlines() == [
        "note written",  # in /work, the run's own volume
        "/skill/scripts/write.py EROFS",
        "/etc/note EROFS",
        "kept /work 65534 ['note']",
    ]


def test_the_run_container_has_exactly_the_hardening_flags(tmp_path, runner, engine, redis_client):
    folder = skill(tmp_path, "wait.py", "import time\ntime.sleep(1)\n")
    the_job = job(folder, "scripts/wait.py")
    seen: list[dict[str, Any]] = []

    def inspect_while_running() -> bool:  # the runner asks this every 0.2 s while it runs
        if not seen:
            (container,) = labelled(engine, the_job.run_id)
            seen.append(container.attrs)
        return False

    outcome = runner.run(
        the_job, folder, RunStream(redis_client, the_job.run_id), inspect_while_running
    )

    assert outcome.status == "succeeded", outcome.stderr
    host, config = seen[0]["HostConfig"], seen[0]["Config"]
    assert host["NetworkMode"] == "none"
    assert host["ReadonlyRootfs"] is True
    assert host["Tmpfs"] == {"/tmp": TMPFS_OPTIONS}
    assert host["CapDrop"] == ["ALL"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["PidsLimit"] == 256
    assert host["Memory"] == 1024**3
    assert host["NanoCpus"] == 2_000_000_000
    assert host["Privileged"] is False
    assert config["User"] == "65534:65534"
    assert config["NetworkDisabled"] is True  # a new network namespace the engine leaves empty
    assert config["WorkingDir"] == "/work"
    assert config["Labels"][LABEL] == the_job.run_id
    mounts = {mount["Destination"]: mount for mount in seen[0]["Mounts"]}
    assert sorted(mounts) == ["/skill", "/work"]
    assert (mounts["/skill"]["RW"], mounts["/work"]["RW"]) == (False, True)
    # Volumes the engine holds, not paths of the worker's file system: the worker may run in a
    # container of its own. The skill's is kept for its hash's next run; the run's /work goes.
    assert {mount["Type"] for mount in mounts.values()} == {"volume"}
    assert mounts["/skill"]["Name"] == runner.volumes.held()[the_job.skill_hash]
    runner.settle()
    assert not engine.volumes.list(filters={"name": mounts["/work"]["Name"]})


def test_a_run_without_network_has_only_loopback_and_no_route(tmp_path, runner, redis_client):
    folder = skill(
        tmp_path,
        "net.py",
        "import errno, os, socket\n"
        "print(sorted(os.listdir('/sys/class/net')))\n"
        "try:\n"
        "    socket.create_connection(('192.0.2.1', 9), timeout=2)\n"  # TEST-NET-1
        "except OSError as e:\n"
        "    print(errno.errorcode.get(e.errno, e))\n",
    )
    the_job = job(folder, "scripts/net.py")

    outcome = runner.run(the_job, folder, RunStream(redis_client, the_job.run_id), never)

    assert outcome.status == "succeeded", outcome.stderr
    assert outcome.stdout.splitlines() == ["['lo']", "ENETUNREACH"]  # nothing was sent


def test_no_run_container_gets_a_network_of_its_own_even_when_it_asks(tmp_path, runner):
    bridge = runner.container_options(job(None, "scripts/a.py", network="bridge"), tmp_path)
    closed = runner.container_options(job(None, "scripts/a.py"), tmp_path)

    # Its skill's allowed-domains are reached through an egress gate (test_container_egress.py).
    assert (bridge["network_mode"], closed["network_mode"]) == ("none", "none")
    assert (bridge["network_disabled"], closed["network_disabled"]) == (True, True)
    different = {k for k in bridge if bridge[k] != closed[k]}
    assert different == {"labels", "environment"}  # they carry the run id


def test_the_skill_reaches_the_container_without_a_copy_on_disk_and_the_cache_is_untouched(
    tmp_path, runner, redis_client, monkeypatch
):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    folder = skill(tmp_path, "ok.py", "print('ok')\n")
    the_job = job(folder, "scripts/ok.py")

    outcome = runner.run(the_job, folder, RunStream(redis_client, the_job.run_id), never)

    assert (outcome.status, outcome.stdout) == ("succeeded", "ok\n")
    assert list(scratch.iterdir()) == []
    assert oct(folder.stat().st_mode & 0o777) == "0o700"  # the cache itself is untouched


def test_a_skill_that_does_not_hash_to_the_run_s_hash_never_gets_a_container(
    tmp_path, runner, engine, redis_client, monkeypatch
):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    folder = skill(tmp_path, "ok.py", "print('ok')\n")
    the_job = job(folder, "scripts/ok.py")
    (folder / "scripts" / "extra.py").write_text("print('planted')\n")

    with pytest.raises(PackageUnverified, match="copy for the container.*planted or altered"):
        runner.run(the_job, folder, RunStream(redis_client, the_job.run_id), never)

    assert labelled(engine, the_job.run_id) == []
    assert read_events(redis_client, the_job.run_id) == []  # nothing started, nothing said
    assert list(scratch.iterdir()) == []
    assert skill_volumes(engine, the_job.skill_hash) == []  # no volume for the run's hash


def test_a_script_without_an_interpreter_fails_before_any_container(
    tmp_path, runner, engine, redis_client
):
    folder = skill(tmp_path, "a.rb", "puts 1\n")
    the_job = job(folder, "scripts/a.rb")

    outcome = runner.run(the_job, folder, RunStream(redis_client, the_job.run_id), never)

    assert (outcome.status, outcome.exit_code) == ("failed", None)
    assert outcome.error == "The script could not start: ValueError: no interpreter for '.rb'"
    assert labelled(engine, the_job.run_id) == []


def test_start_removes_leftover_containers_labelled_as_runs(engine, runner):
    for command in (["sleep", "300"], ["true"]):  # one still running, one created only
        leftover = engine.containers.create(
            IMAGE, command, network_mode="none", labels={LABEL: str(uuid.uuid4())}
        )
        if command[0] == "sleep":
            leftover.start()
    assert len(labelled(engine)) == 2

    runner.start()

    assert labelled(engine) == []


def test_start_goes_on_past_a_leftover_volume_removed_since_the_engine_listed_it(
    engine, runner, monkeypatch
):
    # Per-run volumes of a gone worker; something else (its keeper, another worker's start)
    # removes one between the engine's list and this worker's removal of it.
    names = [f"skillfleet-test-{uuid.uuid4().hex[:12]}" for _ in range(2)]
    for name in names:
        engine.volumes.create(name, labels={LABEL: str(uuid.uuid4())})
    listing = docker.models.volumes.VolumeCollection.list

    def listed_then_one_removed(self: Any, *args: Any, **kwargs: Any) -> list[Any]:
        found = listing(self, *args, **kwargs)
        if kwargs.get("filters") == {"label": LABEL}:
            engine.api.remove_volume(names[0], force=True)
        return found

    monkeypatch.setattr(docker.models.volumes.VolumeCollection, "list", listed_then_one_removed)
    runner.start()
    monkeypatch.undo()

    left = {volume.name for volume in engine.volumes.list(filters={"label": LABEL})}
    assert not left & set(names)  # the one removed meanwhile, and the other by the start


def test_start_leaves_the_running_containers_of_another_queue_s_worker_on_the_engine(
    engine, runner
):
    from workers.runners.sandbox import ContainerSandboxRunner

    def running(queue: str | None) -> Any:
        labels = {LABEL: str(uuid.uuid4()), **({QUEUE_LABEL: queue} if queue else {})}
        return engine.containers.run(
            IMAGE, ["sleep", "300"], network_mode="none", labels=labels, detach=True
        )

    sandbox_run, spark_run, unlabelled = running("sandbox"), running("spark"), running(None)
    try:
        runner.start()  # the Spark worker's: a container sandbox worker runs on this engine too
        assert [c.id for c in labelled(engine)] == [sandbox_run.id]
        ContainerSandboxRunner(IMAGE, engine).start()  # and the other way round
        assert labelled(engine) == []
    finally:
        for container in (sandbox_run, spark_run, unlabelled):
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)


def test_start_leaves_what_a_live_worker_of_the_same_queue_made_and_removes_a_gone_ones(
    engine, runner
):
    """Two Spark workers on one engine: one's start never takes the other's running run."""
    live = worker_identity()  # this process: alive
    gone = GONE
    made = []
    try:
        for worker in (live, gone):
            labels = {LABEL: str(uuid.uuid4()), QUEUE_LABEL: "spark", WORKER_LABEL: worker}
            made.append(engine.containers.run(
                IMAGE, ["sleep", "300"], network_mode="none", labels=labels, detach=True
            ))  # fmt: skip
            volume = f"{VOLUME_PREFIX}test-{uuid.uuid4().hex[:8]}"
            engine.volumes.create(
                volume, labels={SKILL_LABEL: "0" * 64, FILL_LABEL: "x", WORKER_LABEL: worker}
            )
            made.append(volume)
        live_run, live_volume, gone_run, gone_volume = made

        runner.start()

        assert [c.id for c in labelled(engine)] == [live_run.id]
        names = {v.name for v in engine.volumes.list()}
        assert live_volume in names and gone_volume not in names
    finally:
        for thing in made:
            with contextlib.suppress(docker.errors.NotFound):
                if isinstance(thing, str):
                    engine.volumes.get(thing).remove(force=True)
                else:
                    thing.remove(force=True)


def test_start_with_a_missing_image_is_refused_naming_the_build_command(engine):
    runner = SparkRunner("skillfleet/runner:no-such-tag", engine)

    with pytest.raises(RunnerUnavailable) as refused:
        runner.start()

    assert "skillfleet/runner:no-such-tag is missing" in refused.value.message
    assert "bash workers/runner/build-offline.sh" in refused.value.message
    assert (
        "docker build -t skillfleet/runner:latest -f workers/runner/Dockerfile ."
        in refused.value.message
    )


def test_start_without_an_engine_is_refused_clearly(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")

    with pytest.raises(RunnerUnavailable) as refused:
        SparkRunner(IMAGE).start()

    assert refused.value.message.startswith("No Docker engine answers")


def test_the_container_is_removed_even_when_publishing_output_fails(
    tmp_path, runner, engine, redis_client
):
    folder = skill(tmp_path, "ok.py", "print('ok')\n")
    the_job = job(folder, "scripts/ok.py")
    stream = RunStream(redis_client, the_job.run_id)
    redis_client.set(stream.key, "not a stream", ex=60)  # every XADD now fails

    with pytest.raises(redis.ResponseError):
        runner.run(the_job, folder, stream, never)

    runner.settle()
    assert labelled(engine, the_job.run_id) == []


def test_a_second_run_of_the_same_hash_reuses_its_volume(tmp_path, runner, engine, redis_client):
    folder = skill(tmp_path, "ok.py", "print('ok')\n")
    skill_hash = content_hash(folder)

    assert run_ok(runner, redis_client, folder) == "ok\n"
    (first,) = skill_volumes(engine, skill_hash)
    assert run_ok(runner, redis_client, folder) == "ok\n"

    assert skill_volumes(engine, skill_hash) == [first]
    assert runner.volumes.fills == 1
    assert runner.volumes.held() == {skill_hash: first}


def test_runs_of_one_hash_that_start_at_once_fill_one_volume(
    tmp_path, runner, engine, redis_client
):
    folder = skill(tmp_path, "ok.py", "print('ok')\n")
    outputs: list[str] = []
    threads = [
        threading.Thread(target=lambda: outputs.append(run_ok(runner, redis_client, folder)))
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert outputs == ["ok\n"] * 3
    assert runner.volumes.fills == 1
    assert len(skill_volumes(engine, content_hash(folder))) == 1


def test_a_volume_planted_under_the_run_s_hash_is_never_used(
    tmp_path, runner, engine, redis_client
):
    folder = skill(tmp_path, "ok.py", "print('ok')\n")
    skill_hash = content_hash(folder)
    planted = f"{VOLUME_PREFIX}{skill_hash[:16]}-planted"
    plant_volume(engine, planted, {SKILL_LABEL: skill_hash, FILL_LABEL: "planted"})
    try:
        assert run_ok(runner, redis_client, folder) == "ok\n"
        assert runner.volumes.held()[skill_hash] != planted
    finally:
        engine.volumes.get(planted).remove()


@pytest.mark.parametrize("replaced", [True, False], ids=["replaced", "removed"])
def test_a_volume_changed_behind_the_worker_is_never_used_and_the_hash_is_filled_again(
    tmp_path, runner, engine, redis_client, replaced
):
    folder = skill(tmp_path, "ok.py", "print('ok')\n")
    skill_hash = content_hash(folder)
    assert run_ok(runner, redis_client, folder) == "ok\n"
    runner.settle()
    name = runner.volumes.held()[skill_hash]
    engine.volumes.get(name).remove()
    if replaced:  # the same name, other files; without the fill's id (which only we know)
        plant_volume(engine, name, {SKILL_LABEL: skill_hash})
    # else the engine makes an empty volume of that name when the next run mounts it

    assert run_ok(runner, redis_client, folder) == "ok\n"

    assert runner.volumes.fills == 2
    assert runner.volumes.held()[skill_hash] != name
    assert name not in {v.name for v in engine.volumes.list()}  # the impostor is gone


def test_a_hash_pruned_past_the_kept_volumes_is_removed_and_filled_again(
    tmp_path, engine, redis_client
):
    runner = SparkRunner(IMAGE, engine, keep_volumes=1)
    first = skill(tmp_path / "a", "ok.py", "print('a')\n")
    second = skill(tmp_path / "b", "ok.py", "print('b')\n")
    try:
        assert run_ok(runner, redis_client, first) == "a\n"
        (kept,) = skill_volumes(engine, content_hash(first))
        assert run_ok(runner, redis_client, second) == "b\n"

        assert skill_volumes(engine, content_hash(first)) == []  # the least recently used
        assert list(runner.volumes.held()) == [content_hash(second)]
        assert run_ok(runner, redis_client, first) == "a\n"
        assert runner.volumes.fills == 3
        assert skill_volumes(engine, content_hash(first)) != [kept]
        assert skill_volumes(engine, content_hash(second)) == []
    finally:
        runner.settle()
        runner.volumes.keep = 0
        runner.volumes.prune()
    assert skill_volumes(engine, content_hash(first)) == []


def test_start_removes_a_killed_fill_and_unused_skill_volumes_but_not_one_in_use(engine, runner):
    unused, in_use = (f"{VOLUME_PREFIX}test-{uuid.uuid4().hex[:8]}" for _ in range(2))
    for name in (unused, in_use):
        engine.volumes.create(name, labels={SKILL_LABEL: "0" * 64, FILL_LABEL: "x"})
    loader = engine.containers.create(  # a fill whose worker was killed
        IMAGE, ["true"], labels={LABEL: "fill-x"}, volumes={unused: {"bind": "/skill"}}
    )
    holder = engine.containers.run(  # another worker's run, not labelled so start spares it
        IMAGE, ["sleep", "300"], detach=True, volumes={in_use: {"bind": "/skill", "mode": "ro"}}
    )
    try:
        runner.start()

        names = {v.name for v in engine.volumes.list()}
        assert unused not in names and in_use in names
        assert labelled(engine) == []
        with pytest.raises(docker.errors.NotFound):
            loader.reload()
    finally:
        holder.remove(force=True)
        engine.volumes.get(in_use).remove()


def test_a_finished_container_is_removed_after_the_outcome_is_known(
    tmp_path, runner, engine, redis_client
):
    folder = skill(tmp_path, "ok.py", "print('ok')\n")
    the_job = job(folder, "scripts/ok.py")

    outcome = runner.run(the_job, folder, RunStream(redis_client, the_job.run_id), never)
    runner.settle()

    assert outcome.status == "succeeded"
    assert labelled(engine, the_job.run_id) == []


def test_a_volume_past_the_kept_ones_goes_once_its_finished_container_is_removed(
    tmp_path, engine, redis_client
):
    runner = SparkRunner(IMAGE, engine, keep_volumes=0)
    folder = skill(tmp_path, "ok.py", "print('ok')\n")

    assert run_ok(runner, redis_client, folder) == "ok\n"
    runner.settle()

    assert skill_volumes(engine, content_hash(folder)) == []
    assert runner.volumes.held() == {}


# A stand-in Spark worker: runs a script that sleeps in the runner's container, says the run's
# id once the container runs, and waits to be killed.
KILLED_WORKER = """
import json, sys, threading, time, uuid
from pathlib import Path
import docker, redis
from relay.streams import RunStream
from store.hashing import content_hash
from workers.runners.base import Job
from workers.runners.spark import LABEL, SparkRunner
folder = Path(sys.argv[3])
job = Job(str(uuid.uuid4()), "demo", content_hash(folder), "scripts/sleep.py", {}, 300)
runner = SparkRunner(sys.argv[1], docker.from_env())
stream = RunStream(redis.Redis.from_url(sys.argv[2]), job.run_id)
threading.Thread(target=runner.run, args=(job, folder, stream, lambda: False), daemon=True).start()
engine = docker.from_env()
while not engine.containers.list(filters={"label": f"{LABEL}={job.run_id}"}):
    time.sleep(0.05)
print(json.dumps({"run_id": job.run_id}), flush=True)
time.sleep(300)
"""


def test_a_killed_worker_s_running_container_is_removed_at_once(tmp_path, engine, redis_client):
    import signal
    import subprocess
    import sys

    from conftest import REDIS_URL
    from fleet import wait_until

    folder = skill(tmp_path, "sleep.py", "import time\nprint('up', flush=True)\ntime.sleep(300)\n")
    root = Path(__file__).resolve().parents[2]
    worker = subprocess.Popen(
        [sys.executable, "-c", KILLED_WORKER, IMAGE, REDIS_URL, str(folder)],
        cwd=root, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    run_id = None
    try:
        assert worker.stdout is not None
        run_id = json.loads(worker.stdout.readline())["run_id"]
        assert [c.status for c in labelled(engine, run_id, every=True)] == ["running"]
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        # Not left to the next Spark worker's start: its keeper removes it now.
        wait_until(
            lambda: labelled(engine, run_id, every=True) == [], 30, "the run's container to go"
        )
    finally:
        worker.kill()
        worker.wait()
        for container in labelled(engine, run_id, every=True) if run_id else []:
            container.remove(force=True)


def test_a_worker_is_alive_while_its_process_runs_and_not_once_its_pid_is_given_again():
    me = worker_identity()
    host, pid, started = me.split(":")
    assert worker_alive(me)
    assert not worker_alive(f"{host}:{pid}:{int(started) + 1}")  # the pid, another process
    assert not worker_alive(f"other-{host}:{pid}:{started}")  # another host's: can't be asked
    assert not worker_alive(None) and not worker_alive("") and not worker_alive("x:y:z")

"""A node run as a uid of its own: real processes, as root, both ways a run starts.

What one owner's script must not reach on a node another owner's runs share: the other runs'
environments (their secrets), the worker's (its token), the data folder, other runs' folders;
and nothing a run started may outlive it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import IN_CI
from fleet import wait_until
from test_launcher import WAYS

from relay.errors import RunError
from relay.streams import RunStream, read_events
from store.settings import Settings, SettingsError
from workers.runners.base import Job
from workers.runners.isolation import (
    RUN_AS_UID,
    RUN_AS_WORKER,
    NoFreeUid,
    RunSpace,
    UidPool,
    sweep,
)
from workers.runners.node import NodeRunner, isolated_command

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 and not IN_CI, reason="a uid per run needs the tests to run as root"
)
# A range of its own, so that a test's uids are no other test's (lock files are per folder).
FIRST_UID = 2_100_005_000


@pytest.fixture
def runs_dir() -> Iterator[Path]:
    """Runs' folders where their uids can reach them (a test's tmp_path is closed to others)."""
    folder = Path(tempfile.mkdtemp(prefix="skillfleet-test-runs-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def space(runs_dir: Path, uids: int = 20, first: int = FIRST_UID) -> RunSpace:
    return RunSpace.of(runs_dir, RUN_AS_UID, first, first + uids - 1)


def skill(tmp_path: Path, scripts: dict[str, str]) -> Path:
    folder = tmp_path / "cache" / "demo"
    for name, text in scripts.items():
        path = folder / "scripts" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o600)  # as the package cache keeps it
    folder.chmod(0o700)
    return folder


def job(script: str, secrets: dict[str, str] | None = None, timeout: int = 30) -> Job:
    return Job(str(uuid.uuid4()), "demo", "0" * 64, script, {}, timeout, secrets=secrets or {})


def never() -> bool:
    return False


def run(runner: NodeRunner, the_job: Job, folder: Path, redis_client):
    return runner.run(the_job, folder, RunStream(redis_client, the_job.run_id), never)


WHO = """
import json, os, sys
here = os.getcwd()
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "cwd": here,
    "home": os.environ["HOME"], "tmp": os.environ["TMPDIR"],
    "script": os.path.abspath(__file__),
    "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "skill_writable": os.access(os.path.dirname(os.path.abspath(__file__)), os.W_OK),
}))
"""


@pytest.mark.parametrize("launcher", WAYS)
def test_a_script_runs_as_a_uid_of_its_own_in_its_runs_folder(
    tmp_path, runs_dir, redis_client, launcher
):
    runner = NodeRunner(launcher=launcher, space=space(runs_dir))
    the_job = job("scripts/who.py")
    outcome = run(runner, the_job, skill(tmp_path, {"who.py": WHO}), redis_client)
    assert outcome.status == "succeeded", outcome.stderr
    seen = json.loads(outcome.stdout)
    assert FIRST_UID <= seen["uid"] < FIRST_UID + 20
    assert seen["gid"] == seen["uid"] and set(seen["groups"]) <= {seen["uid"]}
    root = runs_dir / the_job.run_id
    assert seen["cwd"] == str(root / "work")
    assert seen["home"] == seen["tmp"] == str(root / "tmp")
    assert seen["script"] == str(root / "skill" / "scripts" / "who.py")
    assert not seen["skill_writable"]
    # Its own processes only, as in a fresh PID namespace: no worker, no other run.
    assert len(seen["pids"]) <= 3 and min(seen["pids"]) == 1
    assert runner.isolation == "uid"
    runner.settle()  # the folder is removed in the background, once the run ended
    assert not root.exists()  # the folder goes with the run


PROBE = r"""
import glob, json, os
found = {}
for path in glob.glob("/proc/[0-9]*/environ"):
    try:
        found[path] = open(path, "rb").read().decode(errors="replace")
    except OSError as e:
        found[path] = type(e).__name__
def reads(path):
    try:
        if os.path.isdir(path):
            return sorted(os.listdir(path))
        return open(path, "rb").read()[:64].decode(errors="replace")
    except OSError as e:
        return type(e).__name__
targets = json.loads(os.environ["TARGETS"])
print(json.dumps({"environ": found, "reads": {t: reads(t) for t in targets}}))
"""
HOLDER = """
import os, time
open(os.environ["LEFT"], "w").write(os.environ["API_KEY"])  # as scripts do, mode left as it is
print('holding', flush=True)
time.sleep(30)
"""


@pytest.mark.parametrize("launcher", WAYS)
def test_one_run_reaches_neither_another_runs_secret_nor_the_workers_nor_the_data_folder(
    tmp_path, runs_dir, redis_client, launcher
):
    data = tmp_path / "var"
    (data / "keys").mkdir(parents=True)
    (data / "keys" / "secrets.key").write_text("the key of every owner's secrets")
    (data / "skillfleet.db").write_text("every owner's rows")
    data.chmod(0o700)
    runner = NodeRunner(launcher=launcher, space=space(runs_dir))
    folder = skill(tmp_path, {"hold.py": HOLDER, "probe.py": PROBE})
    left = f"/tmp/skillfleet-test-left-{uuid.uuid4()}"  # the host's /tmp, every run's too
    holder = job("scripts/hold.py", secrets={"API_KEY": "owner-a-secret-value", "LEFT": left})
    holding = RunStream(redis_client, holder.run_id)
    cancel = threading.Event()
    outcomes = {}
    thread = threading.Thread(
        target=lambda: outcomes.update(a=runner.run(holder, folder, holding, cancel.is_set))
    )
    thread.start()
    try:
        held = runs_dir / holder.run_id
        wait_until(lambda: "holding" in _stdout(redis_client, holder.run_id), 20, "run A")
        targets = [str(data), str(data / "keys" / "secrets.key"), str(data / "skillfleet.db"),
                   str(held), str(held / "work"), f"/proc/{os.getpid()}/environ", left]  # fmt: skip
        probe = Job(str(uuid.uuid4()), "demo", "0" * 64, "scripts/probe.py", {}, 30,
                    secrets={"TARGETS": json.dumps(targets)})  # fmt: skip
        outcome = run(runner, probe, folder, redis_client)
    finally:
        cancel.set()
        thread.join(timeout=30)
    assert outcome.status == "succeeded", outcome.stderr
    seen = json.loads(outcome.stdout)
    everything = json.dumps(seen)
    assert "owner-a-secret-value" not in everything
    assert "every owner" not in everything  # neither file's content
    # It sees only its own processes (its PID 1 included, whose environment is closed), and
    # reads only its own environment.
    environ = seen["environ"]
    assert all("TARGETS" in text or text == "PermissionError" for text in environ.values())
    assert len(environ) <= 3 and "/proc/1/environ" in environ
    assert set(seen["reads"].values()) <= {"PermissionError", "FileNotFoundError"}, seen["reads"]
    assert outcomes["a"].status == "cancelled"


def _stdout(redis_client, run_id: str) -> str:
    return "".join(e.data["text"] for e in read_events(redis_client, run_id) if e.kind == "stdout")


LEAVER = """
import os, subprocess, sys
marker = sys.argv[1] if len(sys.argv) > 1 else os.environ["MARKER"]
subprocess.Popen(["setsid", "sh", "-c", f"sleep 2; touch {marker}"], start_new_session=True)
# /dev/shm: the host's, unless the launcher gave the run its own; /run/lock: open to all.
for shared in ("/tmp", "/dev/shm", "/run/lock"):
    if os.access(shared, os.W_OK):
        open(f"{shared}/left-by-a-run-{os.getuid()}", "w").write("private")
print(os.getuid())
"""


@pytest.mark.parametrize("launcher", WAYS)
def test_nothing_a_run_started_outlives_it_and_its_tmp_leftovers_are_removed(
    tmp_path, runs_dir, redis_client, launcher
):
    marker = runs_dir / "outlived"
    runs_dir.chmod(0o777)  # the run's uid may write the marker here, if it lived to
    runner = NodeRunner(launcher=launcher, space=space(runs_dir))
    the_job = job("scripts/leave.py", secrets={"MARKER": str(marker)})
    outcome = run(runner, the_job, skill(tmp_path, {"leave.py": LEAVER}), redis_client)
    assert outcome.status == "succeeded", outcome.stderr
    uid = int(outcome.stdout)
    runner.settle()
    assert not Path(f"/tmp/left-by-a-run-{uid}").exists()
    assert not Path(f"/dev/shm/left-by-a-run-{uid}").exists()
    assert not Path(f"/run/lock/left-by-a-run-{uid}").exists()
    with pytest.raises(AssertionError):
        wait_until(marker.exists, 3.5, "the setsid child to touch its marker")
    assert not any(_owned_by(uid))


def _owned_by(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    pids.append(int(entry))
            except FileNotFoundError:
                pass
    return pids


def test_two_runs_at_once_never_share_a_uid_and_a_full_pool_refuses_clearly(tmp_path):
    pool = UidPool(tmp_path, FIRST_UID, FIRST_UID + 1)
    with pool.lease() as first, pool.lease() as second:
        assert first != second
        with pytest.raises(NoFreeUid, match="All 2 uids"), pool.lease():
            pass
    with pool.lease() as again:
        assert again in (FIRST_UID, FIRST_UID + 1)


def test_the_pool_is_shared_by_every_worker_on_the_host(tmp_path):
    """Two pools on one lock folder (two workers' processes or threads) lease apart."""
    one, other = UidPool(tmp_path, FIRST_UID, FIRST_UID), UidPool(tmp_path, FIRST_UID, FIRST_UID)
    with one.lease(), pytest.raises(NoFreeUid), other.lease():
        pass


def test_the_sweep_removes_only_the_runs_uids_entries(tmp_path):
    mine, theirs, open_to_all = tmp_path / "mine", tmp_path / "theirs", tmp_path / ".X11-unix"
    scratch = tmp_path / "scratch"  # an operator's folder opened to runs (conftest's scratch)
    (mine / "deep").mkdir(parents=True)
    (theirs / "inside").mkdir(parents=True)
    open_to_all.mkdir()
    open_to_all.chmod(0o1777)  # another user's temporary folder: every user may write in it
    scratch.mkdir()
    scratch.chmod(0o777)
    files = [tmp_path / "file", theirs / "inside" / "x", open_to_all / "left", scratch / "kept"]
    for path in (*files, open_to_all / "X0"):
        path.write_text("x")
    for path in (mine, mine / "deep", *files):
        os.chown(path, FIRST_UID, FIRST_UID)
    sweep(FIRST_UID, (str(tmp_path),))
    assert sorted(p.name for p in tmp_path.iterdir()) == [".X11-unix", "scratch", "theirs"]
    assert [p.name for p in open_to_all.iterdir()] == ["X0"]  # the uid's file there went
    assert (theirs / "inside" / "x").exists()  # a closed folder is not its to sweep
    assert (scratch / "kept").exists()  # what a run put in the operator's folder stays


def test_the_sweep_goes_only_so_deep_into_folders_open_to_all(tmp_path):
    folder = tmp_path
    for _ in range(5):  # as another run's uid could nest them, without end
        folder = folder / "open"
        folder.mkdir()
        folder.chmod(0o1777)
        (folder / "left").write_text("x")
        os.chown(folder / "left", FIRST_UID, FIRST_UID)
    sweep(FIRST_UID, (str(tmp_path),))
    left = sorted(len(p.relative_to(tmp_path).parts) for p in tmp_path.rglob("left"))
    assert left == [4, 5, 6]  # the two outermost such folders were swept, not the rest


# A worker process: its space, then its runs' tmpfs, as `skillfleet worker node` makes them.
ON_TMPFS = f"""
import json, os, sys, threading
from pathlib import Path
from workers.runners.isolation import RUN_AS_UID, RunSpace, private_tmpfs
runs = Path(sys.argv[1])
if sys.argv[2] == "thread":
    threading.Thread(target=threading.Event().wait, daemon=True).start()
space = RunSpace.of(runs, RUN_AS_UID, {FIRST_UID}, {FIRST_UID})
why = private_tmpfs(runs, "16m")
with space.uids.lease() as uid:
    (runs / "made-in-the-worker").write_text("x")
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    on = [line.split(" - ")[1].split()[0] for line in mounts if line.split()[4] == str(runs)]
    print(json.dumps({{"why": why, "uid": uid, "types": on}}))
"""


def worker_process(runs_dir: Path, how: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", ON_TMPFS, str(runs_dir), how], capture_output=True, text=True,
        timeout=60, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_a_worker_puts_its_runs_on_a_tmpfs_only_it_sees_and_still_shares_the_uid_locks(
    runs_dir,
):
    seen = worker_process(runs_dir, "alone")
    assert seen["why"] is None
    assert seen["types"] == ["tmpfs"]
    # What it made there is in its memory, not in the host's folder, and is gone with it ...
    assert not (runs_dir / "made-in-the-worker").exists()
    assert str(runs_dir) not in Path("/proc/self/mountinfo").read_text()
    # ... while the uids' locks stayed in the host's folder, where every worker leases them.
    assert (runs_dir / ".uids" / str(seen["uid"])).exists()
    with UidPool(runs_dir / ".uids", FIRST_UID, FIRST_UID).lease() as uid:
        assert uid == seen["uid"]


def test_a_worker_that_already_has_threads_keeps_its_runs_on_the_disk_and_says_why(runs_dir):
    seen = worker_process(runs_dir, "thread")
    assert seen["why"] is not None and "threads" in seen["why"]
    assert seen["types"] == []
    assert (runs_dir / "made-in-the-worker").exists()


@pytest.mark.parametrize("value", ["0", "-1m", "12q", "50 %", "1m,nr_inodes=1", "on"])
def test_a_runs_tmpfs_size_that_is_not_one_is_refused(value):
    with pytest.raises(SettingsError, match="SKILLFLEET_RUN_TMPFS must be a tmpfs size"):
        Settings.from_env({"SKILLFLEET_RUN_TMPFS": value})
    assert Settings.from_env({"SKILLFLEET_RUN_TMPFS": "OFF"}).run_tmpfs == "off"
    assert Settings.from_env({"SKILLFLEET_RUN_TMPFS": "512M"}).run_tmpfs == "512m"
    assert Settings.from_env({}).run_tmpfs == "50%"


def test_the_util_linux_way_is_the_launchers(tmp_path):
    command = isolated_command(["python3", "x.py"], 2_100_000_001)
    assert command[-2:] == ["python3", "x.py"]
    assert "--reuid=2100000001" in command and "--no-new-privs" in command
    assert "--pid" in command and "--mount-proc" in command


def test_a_runs_folder_the_uids_cant_reach_is_refused_at_start(tmp_path):
    with pytest.raises(RunError, match="closed to other users"):
        space(tmp_path / "runs")


def test_a_worker_user_space_runs_as_the_worker(tmp_path, redis_client):
    runner = NodeRunner(space=RunSpace.of(tmp_path / "runs", RUN_AS_WORKER, 1, 1))
    outcome = run(runner, job("scripts/who.py"), skill(tmp_path, {"who.py": WHO}), redis_client)
    assert json.loads(outcome.stdout)["uid"] == os.getuid()
    assert runner.isolation == "process"

"""A node worker's keeper: what a script started dies with the worker too, not only the script.
Real processes, a real SIGKILL of the worker; a stand-in worker runs the real node runner."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import REDIS_URL
from fleet import killed_worker_leaves_no_child, process_ended, wait_until
from structlog.testing import capture_logs

from workers.runners.keeper import GROUP, Keeper

# What a script may do: start a process of its own, then keep running.
SCRIPT = """
import json, os, subprocess, time
child = subprocess.Popen(["sleep", "300"])
with open(json.loads(os.environ["SKILLFLEET_ARGS"])["pidfile"], "w") as out:
    out.write(f"{child.pid} {os.getuid()}")
time.sleep(300)
"""

# A stand-in worker: the node runner runs SCRIPT (its way: argv[1] names the launcher, or
# is empty for setpriv or a prctl), then it says the pid of the script's child and waits.
WORKER = """
import json, sys, threading, time
from pathlib import Path
import redis
from relay.streams import RunStream
from workers.runners.base import Job
from workers.runners.isolation import RunSpace
from workers.runners.node import NodeRunner
folder, runs, run_as = Path(sys.argv[3]), Path(sys.argv[4]), sys.argv[5]
pidfile = runs / "keeper-test" / "tmp" / "child.pid"  # the run's own, whatever its uid
job = Job("keeper-test", "keeper", "0" * 64, "run.py", {"pidfile": str(pidfile)}, 300)
stream = RunStream(redis.Redis.from_url(sys.argv[2]), "keeper-test")
runner = NodeRunner(launcher=sys.argv[1] or None, space=RunSpace.of(runs, run_as))
threading.Thread(target=runner.run, args=(job, folder, stream, lambda: False), daemon=True).start()
while not pidfile.exists() or not pidfile.read_text():
    time.sleep(0.01)
pid, uid = pidfile.read_text().split()
if run_as == "uid":  # the pid the script saw is its PID namespace's: find the host's
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:  # ended meanwhile
            continue
        lines = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        if lines["Uid"].split()[0] == uid and lines["NSpid"].split()[-1] == pid:
            pid = status.parent.name
print(json.dumps({"pid": int(pid)}), flush=True)
time.sleep(300)
"""


@pytest.mark.parametrize("run_as", ["worker", "uid"])
@pytest.mark.parametrize("way", ["skillfleet-launch", "setpriv or prctl"])
def test_what_a_script_started_dies_with_its_worker_and_its_folder_goes(
    way: str, run_as: str, tmp_path: Path
):
    from workers.runners.node import LAUNCHER

    if way == "skillfleet-launch" and LAUNCHER is None:
        pytest.skip("skillfleet-launch is not built")
    if run_as == "uid" and os.geteuid() != 0:
        pytest.skip("a uid per run needs root")
    (tmp_path / "run.py").write_text(SCRIPT)
    launcher = LAUNCHER if way == "skillfleet-launch" else ""
    runs = Path(tempfile.mkdtemp(prefix="skillfleet-test-runs-"))  # reachable by a run's uid
    try:
        killed_worker_leaves_no_child(
            WORKER,
            launcher or "",
            REDIS_URL,
            str(tmp_path),
            str(runs),
            run_as,
            what="the script's own child to die with its worker",
            running=lambda pid: not process_ended(pid),
        )
        wait_until(lambda: not (runs / "keeper-test").exists(), 10, "the run's folder to go")
    finally:
        shutil.rmtree(runs, ignore_errors=True)


def _group() -> subprocess.Popen[bytes]:
    """A process leading a group of its own, as a script does."""
    return subprocess.Popen(["sleep", "300"], start_new_session=True)


def test_a_killed_keeper_is_replaced_and_told_every_group_still_held():
    keeper = Keeper()
    first, second, released = _group(), _group(), _group()
    try:
        keeper.hold(GROUP, first.pid)
        keeper.hold(GROUP, released.pid)
        keeper.release(GROUP, released.pid)
        old = keeper.pid
        assert old is not None
        os.kill(old, signal.SIGKILL)
        wait_until(lambda: process_ended(old), 10, "the keeper to die")
        keeper.hold(GROUP, second.pid)  # a new keeper, told of `first` too
        assert keeper.pid not in (None, old)
        keeper.close()  # as the kernel closes the pipe when the worker dies
        wait_until(lambda: first.poll() is not None and second.poll() is not None, 10,
                   "the held groups to be killed")  # fmt: skip
        assert first.returncode == second.returncode == -signal.SIGKILL
        assert released.poll() is None  # released: not the keeper's to kill
    finally:
        for process in (first, second, released):
            process.kill()
            process.wait()


def _ignores(pid: int, *signals: signal.Signals) -> bool:
    """`pid` ignores each of `signals` (its SigIgn mask in /proc)."""
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith("SigIgn:"))
    mask = int(line.split()[1], 16)
    return all(mask & (1 << (number - 1)) for number in signals)


def test_the_keeper_outlives_the_signals_a_stopping_worker_s_group_gets():
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    keeper = subprocess.Popen(
        [sys.executable, "-m", "workers.runners.keeper"], stdin=subprocess.PIPE
    )
    group = _group()
    try:
        assert keeper.stdin is not None
        keeper.stdin.write(b"+group %d\n" % group.pid)
        keeper.stdin.flush()
        wait_until(lambda: _ignores(keeper.pid, *stops), 10, "the keeper to be ready")
        for stop in stops:
            keeper.send_signal(stop)
        keeper.stdin.close()  # then its worker goes: it is still there to kill the group
        assert keeper.wait(timeout=10) == 0
        assert group.wait(timeout=10) == -signal.SIGKILL
    finally:
        for process in (keeper, group):
            process.kill()
            process.wait()


def test_a_keeper_that_cannot_start_is_logged_and_holding_goes_on(tmp_path: Path) -> None:
    keeper = Keeper([str(tmp_path / "no-such-keeper")])
    with capture_logs() as logs:
        keeper.start()
        keeper.hold(GROUP, 12345)  # tries once more, and the run goes on without one
        keeper.release(GROUP, 12345)
    assert keeper.pid is None
    warned = [entry for entry in logs if entry["log_level"] == "warning"]
    assert len(warned) == 3
    assert warned[0]["event"] == "no keeper: what a dead worker's scripts hold may stay"
    assert "no-such-keeper" in warned[0]["error"]

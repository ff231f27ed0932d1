"""The node runner: a script as a process group on this server, from the verified cache."""

from __future__ import annotations

import ctypes
import errno
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from broker.runs import Outcome
from relay.streams import RunStream
from store.limits import COALESCE_SECONDS
from store.states import RunStatus
from workers.runners.base import (
    CancelCheck,
    Job,
    OutputCollector,
    job_command,
    outcome_of,
    script_environment,
)
from workers.runners.keeper import GROUP, KEEPER, Keeper

READ_BYTES = 16 * 1024
CANCEL_POLL_SECONDS = 0.2
PR_SET_PDEATHSIG = 1

# A script must die with its worker (kill -9 leaves no orphan): its parent-death signal is set
# between the spawn and the exec. skillfleet-launch (launch.c, built by `make`) does that in
# about 0.05 ms, util-linux's setpriv in about 0.9 ms; without either, a preexec_fn does, at the
# price of a full fork of the worker.
LAUNCHER_NAME = "skillfleet-launch"
SETPRIV = shutil.which("setpriv")
try:
    _LIBC: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:  # not Linux: no parent-death signal
    _LIBC = None


def find_launcher() -> str | None:
    """skillfleet-launch beside this Python (a virtualenv's bin) or on PATH; None if absent."""
    places = [str(Path(sys.executable).parent), os.environ.get("PATH", os.defpath)]
    return shutil.which(LAUNCHER_NAME, path=os.pathsep.join(places))


LAUNCHER = find_launcher()
# A script's HOME is its user's, the worker's: tools that keep files under ~ work, and Python
# need not look the user up in the password database as it starts (0.2-0.3 ms a run).
SCRIPT_HOME = os.path.expanduser("~")


def die_with_worker() -> None:
    """In the child: be killed if the worker dies."""
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def launch_command(
    command: list[str], env: dict[str, str], launcher: str | None
) -> tuple[list[str], Callable[[], None] | None]:
    """The command line that starts `command` as a child that dies with this process, and the
    preexec_fn it still needs (None: none, so the spawn is a cheap vfork). Without a launcher,
    setpriv sets the signal."""
    if launcher is not None:
        # The launcher execs a path: the program is found here, on the script's own PATH.
        program = shutil.which(command[0], path=env.get("PATH", os.defpath))
        if program is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command[0])
        return [launcher, str(os.getpid()), program, *command], None
    if SETPRIV is not None:
        return [SETPRIV, "--pdeathsig", "KILL", "--", *command], None
    return command, die_with_worker


class NodeRunner:
    """Runs scripts as local processes; the skill folder is the working directory."""

    isolation = "process"

    def __init__(
        self,
        coalesce_seconds: float = COALESCE_SECONDS,
        launcher: str | None = LAUNCHER,
        keeper: Keeper = KEEPER,
    ) -> None:
        self.coalesce_seconds = coalesce_seconds  # the output window of one stream entry
        self.launcher = launcher  # skillfleet-launch; None: setpriv, or a preexec_fn
        self.keeper = keeper  # the script's group dies with this process, not only the script

    def run(self, job: Job, folder: Path, stream: RunStream, cancelled: CancelCheck) -> Outcome:
        collector = OutputCollector(
            stream, coalesce_seconds=self.coalesce_seconds, secrets=job.secrets
        )
        env = script_environment(job, {"HOME": SCRIPT_HOME})
        try:
            command, preexec = launch_command(job_command(job), env, self.launcher)
            process = subprocess.Popen(
                command,
                cwd=folder,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                preexec_fn=preexec,  # noqa: PLW1509 - only a prctl call, with no launcher at all
            )
        except (OSError, ValueError) as e:
            message = f"The script could not start: {type(e).__name__}: {e}"
            return Outcome(RunStatus.FAILED, None, "", message, message)
        self.keeper.hold(GROUP, process.pid)  # the script leads its group (start_new_session)
        try:
            try:
                collector.started(pid=process.pid)
                state = _pump(process, collector, job.timeout, cancelled)
            except BaseException:  # Redis went away mid-run, or the worker stops: no orphan
                _kill_group(process)
                process.wait()
                raise
            code = process.wait()
        finally:
            self.keeper.release(GROUP, process.pid)
        return outcome_of(state, code, collector, job.timeout)


def _pump(
    process: subprocess.Popen[bytes],
    collector: OutputCollector,
    timeout: int,
    cancelled: CancelCheck,
) -> str | None:
    """Forward output as it comes; stop the group on timeout or cancel. Returns why it stopped."""
    assert process.stdout is not None and process.stderr is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ, "stdout")
    selector.register(process.stderr, selectors.EVENT_READ, "stderr")
    deadline = time.monotonic() + timeout
    next_cancel_check = time.monotonic() + CANCEL_POLL_SECONDS
    stopped: str | None = None
    while selector.get_map():
        now = time.monotonic()
        if stopped is None and now >= deadline:
            stopped = RunStatus.TIMED_OUT
            _kill_group(process)
        if stopped is None and now >= next_cancel_check:
            next_cancel_check = now + CANCEL_POLL_SECONDS
            if cancelled():
                stopped = RunStatus.CANCELLED
                _kill_group(process)
        wait = max(0.0, min(deadline, next_cancel_check) - time.monotonic())
        burst = collector.wait_left()
        if burst is not None:
            wait = min(wait, burst)
        for key, _mask in selector.select(timeout=wait):
            data = os.read(key.fd, READ_BYTES)
            if data:
                collector.add(key.data, data)
            else:
                selector.unregister(key.fileobj)
        collector.flush_due()
    selector.close()
    collector.finish()
    return stopped


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass

"""The node runner: a script as a process group on this server, in a folder of the run's own
(workers/runners/isolation.py), from a copy of the verified cache's skill."""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from broker.runs import Outcome
from relay.errors import RunError
from relay.streams import RunStream
from store.limits import COALESCE_SECONDS
from store.states import RunStatus
from workers.runfiles import InputFileUnavailable, Signature, collect, found_in, place_inputs
from workers.runners.base import (
    CancelCheck,
    Job,
    OutputCollector,
    outcome_of,
    script_environment,
)
from workers.runners.environments import Toolchain
from workers.runners.isolation import (
    RUN_AS_UID,
    RUN_AS_WORKER,
    RunPlace,
    RunSpace,
    default_runs_dir,
)
from workers.runners.keeper import FOLDER, GROUP, KEEPER, UID, Keeper
from workers.runners.remover import Remover

READ_BYTES = 16 * 1024
CANCEL_POLL_SECONDS = 0.2
PR_SET_PDEATHSIG = 1

# A script must die with its worker (kill -9 leaves no orphan): its parent-death signal is set
# between the spawn and the exec. skillfleet-launch (launch.c, built by `make`) does that in
# about 0.05 ms, util-linux's setpriv in about 0.9 ms; without either, a preexec_fn does, at the
# price of a full fork of the worker.
LAUNCHER_NAME = "skillfleet-launch"
SETPRIV = shutil.which("setpriv")
PRIVATE_UMASK = 0o077  # a run with a uid of its own: files and folders for that uid alone
UNSHARE = shutil.which("unshare")
try:
    _LIBC: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:  # not Linux: no parent-death signal
    _LIBC = None


def find_launcher() -> str | None:
    """skillfleet-launch beside this Python (a virtualenv's bin) or on PATH; None if absent."""
    places = [str(Path(sys.executable).parent), os.environ.get("PATH", os.defpath)]
    return shutil.which(LAUNCHER_NAME, path=os.pathsep.join(places))


LAUNCHER = find_launcher()


def die_with_worker() -> None:
    """In the child: be killed if the worker dies."""
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def launch_command(
    command: list[str], env: dict[str, str], launcher: str | None, uid: int | None = None
) -> tuple[list[str], Callable[[], None] | None]:
    """The command line that starts `command` as a child that dies with this process, and the
    preexec_fn it still needs (None: none, so the spawn is a cheap vfork). Without a launcher,
    setpriv sets the signal. With `uid`, it runs as that uid in namespaces of its own."""
    if launcher is not None:
        # The launcher execs a path: the program is found here, on the script's own PATH.
        program = shutil.which(command[0], path=env.get("PATH", os.defpath))
        if program is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command[0])
        as_uid = ["-u", str(uid)] if uid is not None else []
        return [launcher, *as_uid, str(os.getpid()), program, *command], None
    if uid is not None:
        return isolated_command(command, uid), None
    if SETPRIV is not None:
        return [SETPRIV, "--pdeathsig", "KILL", "--", *command], None
    return command, die_with_worker


def isolation_missing(run_as: str, launcher: str | None = LAUNCHER) -> str | None:
    """Why scripts can't start as `run_as` asks on this host, or None."""
    if run_as == RUN_AS_UID and launcher is None and (UNSHARE is None or SETPRIV is None):
        return (
            "a uid per run starts scripts through skillfleet-launch (built by make on x86_64) "
            "or util-linux's unshare and setpriv, and neither is here"
        )
    return None


def isolated_command(command: list[str], uid: int) -> list[str]:
    """What skillfleet-launch -u does, with util-linux's unshare and setpriv (where the launcher
    can't be built): the script is the namespace's PID 1 here, and ends its processes as it
    ends."""
    if UNSHARE is None or SETPRIV is None:
        raise FileNotFoundError(
            errno.ENOENT, "a uid per run needs skillfleet-launch, or util-linux's unshare "
            "and setpriv", "unshare",
        )  # fmt: skip
    return [
        SETPRIV, "--pdeathsig", "KILL", "--",
        UNSHARE, "--pid", "--fork", "--kill-child", "--mount", "--ipc", "--mount-proc",
        "--propagation", "private", "--",
        SETPRIV, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs",
        "--pdeathsig", "KILL", "--", *command,
    ]  # fmt: skip


class NodeRunner:
    """Runs scripts and commands as local processes, each in its run's own folder (`work/` is
    the working directory, the skill is copied beside it), as the run's uid or the worker's."""

    runs_commands = True

    def __init__(
        self,
        coalesce_seconds: float = COALESCE_SECONDS,
        launcher: str | None = LAUNCHER,
        keeper: Keeper = KEEPER,
        space: RunSpace | None = None,
        toolchain: Toolchain | None = None,
    ) -> None:
        self.coalesce_seconds = coalesce_seconds  # the output window of one stream entry
        self.launcher = launcher  # skillfleet-launch; None: setpriv, or a preexec_fn
        self.keeper = keeper  # the script's group dies with this process, not only the script
        self.space = space or RunSpace.of(default_runs_dir(), RUN_AS_WORKER)
        # Interpreters, import path, declared dependencies (workers/runners/environments.py).
        self.toolchain = toolchain or Toolchain()
        self.remover = Remover("node-remover")  # clears ended runs' folders

    @property
    def isolation(self) -> str:
        return self.space.isolation

    def run(self, job: Job, folder: Path, stream: RunStream, cancelled: CancelCheck) -> Outcome:
        """Run the job's script from a copy of the verified `folder`."""
        return self._run_in_place(job, folder, stream, cancelled)

    def run_command(self, job: Job, stream: RunStream, cancelled: CancelCheck) -> Outcome:
        """Run the job's command (run_command's argv) in a folder of its own."""
        return self._run_in_place(job, None, stream, cancelled)

    def _run_in_place(
        self, job: Job, skill: Path | None, stream: RunStream, cancelled: CancelCheck
    ) -> Outcome:
        """The run's folder (and uid) are the keeper's until they are cleared: a worker that
        dies leaves neither behind. They are cleared by the remover once the script ended and
        its files were read: the run's end needn't wait for that (`settle` does)."""
        folder = self.space.folder_of(job.run_id)
        self.keeper.hold(FOLDER, folder)
        try:
            place, clear = self.space.make(job.run_id, skill)
        except BaseException:
            self.keeper.release(FOLDER, folder)
            raise
        if place.uid is not None:
            self.keeper.hold(UID, place.uid)
        try:
            return self._run_in(job, place, stream, cancelled)
        finally:
            self.remover.put(functools.partial(self._clear, place, clear))

    def _clear(self, place: RunPlace, clear: Callable[[], None]) -> None:
        try:
            clear()
        finally:
            if place.uid is not None:
                self.keeper.release(UID, place.uid)
            self.keeper.release(FOLDER, place.root)

    def settle(self) -> None:
        """Wait until the folders of the runs that ended are cleared."""
        self.remover.settle()

    def _run_in(
        self, job: Job, place: RunPlace, stream: RunStream, cancelled: CancelCheck
    ) -> Outcome:
        """Place the call's files, run, and send back what the run made in `work/`."""
        env = script_environment(job, {"HOME": str(place.tmp), "TMPDIR": str(place.tmp)})
        if job.command:
            argv = list(job.command)
        else:
            argv = self.toolchain.command(
                job.skill_hash, job.script, job.argv, place.skill, env, job.as_module
            )
        placed: dict[str, Signature] = {}
        try:
            if job.files is not None and job.inputs:
                placed = place_inputs(job.files, job.run_id, job.inputs, place.work, place.uid)
        except (RunError, OSError) as e:
            message = getattr(e, "message", None) or f"The input files could not be placed: {e}"
            return Outcome(RunStatus.FAILED, None, "", message, message, InputFileUnavailable.code)
        outcome = self._launch(job, place, env, argv, stream, cancelled)
        if job.files is None:
            return outcome
        sent = collect(job.files, job.run_id, found_in(place.work), job.inputs, placed)
        return replace(outcome, files=tuple(sent.files), files_note=sent.note())

    def _launch(
        self,
        job: Job,
        place: RunPlace,
        env: dict[str, str],
        argv: list[str],
        stream: RunStream,
        cancelled: CancelCheck,
    ) -> Outcome:
        collector = OutputCollector(
            stream, coalesce_seconds=self.coalesce_seconds, secrets=job.secrets
        )
        try:
            command, preexec = launch_command(argv, env, self.launcher, place.uid)
            process = subprocess.Popen(
                command,
                cwd=place.work,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                preexec_fn=preexec,  # noqa: PLW1509 - only a prctl call, with no launcher at all
                # A run of its own uid makes its files its own: what it puts in the host's /tmp
                # meanwhile is no other run's to read (the spawn stays a vfork).
                umask=PRIVATE_UMASK if place.uid is not None else -1,
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

"""The node runner: a script as a process group on this server, from the verified cache."""

from __future__ import annotations

import ctypes
import os
import selectors
import signal
import subprocess
import time
from pathlib import Path

from workers.runners.base import CancelCheck, Job, OutputCollector, command_for, script_environment
from workers.runs import CANCELLED, FAILED, SUCCEEDED, TIMED_OUT, Outcome
from workers.streams import RunStream

READ_BYTES = 16 * 1024
CANCEL_POLL_SECONDS = 0.2
PR_SET_PDEATHSIG = 1

try:
    _LIBC: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:  # not Linux: no parent-death signal
    _LIBC = None


def _die_with_worker() -> None:
    """In the child: be killed if the worker dies (kill -9 leaves no orphan script)."""
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class NodeRunner:
    """Runs scripts as local processes; the skill folder is the working directory."""

    isolation = "process"

    def run(self, job: Job, folder: Path, stream: RunStream, cancelled: CancelCheck) -> Outcome:
        collector = OutputCollector(stream)
        try:
            process = subprocess.Popen(
                command_for(job.script),
                cwd=folder,
                env=script_environment(job),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                preexec_fn=_die_with_worker,  # noqa: PLW1509 - only a prctl call
            )
        except (OSError, ValueError) as e:
            message = f"The script could not start: {type(e).__name__}: {e}"
            return Outcome(FAILED, None, "", message, message)
        stream.status("running", pid=process.pid)
        state = _pump(process, collector, job.timeout, cancelled)
        code = process.wait()
        return _outcome(state, code, collector, job.timeout)


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
            stopped = TIMED_OUT
            _kill_group(process)
        if stopped is None and now >= next_cancel_check:
            next_cancel_check = now + CANCEL_POLL_SECONDS
            if cancelled():
                stopped = CANCELLED
                _kill_group(process)
        wait = max(0.0, min(deadline, next_cancel_check) - time.monotonic())
        for key, _mask in selector.select(timeout=wait):
            data = os.read(key.fd, READ_BYTES)
            if data:
                collector.add(key.data, data)
            else:
                selector.unregister(key.fileobj)
    selector.close()
    return stopped


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _outcome(state: str | None, code: int, collector: OutputCollector, timeout: int) -> Outcome:
    stdout, stderr = collector.text("stdout"), collector.text("stderr")
    if state == TIMED_OUT:
        return Outcome(
            TIMED_OUT, code, stdout, stderr, f"The script ran past its {timeout} s limit."
        )
    if state == CANCELLED:
        return Outcome(CANCELLED, code, stdout, stderr, "The run was cancelled.")
    if code == 0:
        return Outcome(SUCCEEDED, 0, stdout, stderr)
    return Outcome(FAILED, code, stdout, stderr, f"The script exited with code {code}.")

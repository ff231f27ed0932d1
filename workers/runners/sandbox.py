"""The sandbox runner: Python and JavaScript in Hyperlight micro-VMs, or containers by opt-in.

hyperlight-sandbox's `Sandbox.run()` has no timeout and can't be interrupted, so each micro-VM
lives in a child process the worker can kill. A child boots its guest once, snapshots it, and
restores the snapshot after every run: each run starts from the same fresh state without a new
boot, and idle children wait in a small pool per guest. The skill is copied into the child's
`/input`, which the guest can only read; `/output` is the run's working directory, with the
call's files in place, and what the run left there comes back (workers/runners/vmfiles.py).
Output comes back line by line through a host tool the guest calls, so it streams while the
script runs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from broker.classify import SANDBOX_SUFFIXES
from broker.runs import Outcome
from relay import naming
from relay.errors import RunError, RunnerUnavailable
from relay.streams import RunStream
from store.errors import StoreError
from store.limits import COALESCE_SECONDS
from store.settings import Settings
from store.states import RunStatus
from workers.runfiles import InputFileUnavailable, collect, found_in, place_inputs
from workers.runners.base import (
    CancelCheck,
    Job,
    OutputCollector,
    Runner,
    outcome_of,
)
from workers.runners.egress import allowed_domains
from workers.runners.guests import GUESTS, JAVASCRIPT_GUEST, PYTHON_GUEST, WARM_UP, guest_program
from workers.runners.node import LAUNCHER, launch_command
from workers.runners.spark import SparkRunner, copy_skill
from workers.runners.vmfiles import VmFolders, empty, move_entries
from workers.verification import verify_folder

PACKAGES = ("hyperlight_sandbox", "hyperlight_sandbox_backend_wasm", "python_guest")
INSTALL_HINT = "pip install 'hyperlight-sandbox[wasm,python_guest,javascript_guest]==0.8.0'"
KVM_DEVICE = "/dev/kvm"
POOL_SIZE = 2  # idle warm micro-VMs kept per guest
BOOT_SECONDS = 60  # a child must boot its guest and take the snapshot within this
CANCEL_POLL_SECONDS = 0.2
MAX_REASON_CHARS = 600
Message = tuple[Any, ...]


def refusal(script: str) -> Outcome | None:
    """The failed outcome of a script the sandbox can't run, or None when it can."""
    if Path(script).suffix in SANDBOX_SUFFIXES:
        return None
    message = (
        "Sandboxed skills can run .py, .js and .mjs scripts only; "
        f"{Path(script).name} can't run here."
    )
    return Outcome(RunStatus.FAILED, None, "", message, message)


class ContainerSandboxRunner(SparkRunner):
    """The operator's opt-in for hosts without KVM: the Spark's container, and as in a micro-VM
    the skill's allowed-domains only (through the Spark's egress gate)."""

    isolation = "container"
    queue_name = naming.SANDBOX

    def run(self, job: Job, folder: Path, stream: RunStream, cancelled: CancelCheck) -> Outcome:
        return refusal(job.script) or super().run(job, folder, stream, cancelled)


class SandboxRunner:
    """Runs .py, .js and .mjs scripts in Hyperlight micro-VMs restored from a snapshot."""

    isolation = "hyperlight"

    def __init__(self, pool_size: int = POOL_SIZE, boot_seconds: float = BOOT_SECONDS) -> None:
        self.pool_size = pool_size
        self.boot_seconds = boot_seconds
        self._idle: dict[str, list[_MicroVM]] = {PYTHON_GUEST: [], JAVASCRIPT_GUEST: []}
        self._lock = threading.Lock()

    def probe(self) -> str | None:
        """None when a micro-VM runs a tiny Python program here, else the reason it can't."""
        problem = host_problem()
        if problem is not None:
            return problem
        try:
            vm = self._boot(PYTHON_GUEST, ())
        except RunnerUnavailable as e:
            return e.message
        _send(vm.conn, "print(6 * 7)")
        reply = _receive(vm.conn, self.boot_seconds) or ("no answer",)
        if reply[0] != "done" or reply[2] != "42\n" or not reply[4]:
            vm.close()
            reason = f"Hyperlight booted a micro-VM but it did not run Python: {reply!r}"
            return reason[:MAX_REASON_CHARS]
        self._check_in(vm, keep=True)
        return None

    def run(self, job: Job, folder: Path, stream: RunStream, cancelled: CancelCheck) -> Outcome:
        """Stage `folder` in a micro-VM's `/input`, prove the copy has the job's hash, place the
        call's files, run, and send back what the run left in its working directory.

        Raises PackageUnverified when the copy does not hash to it: the script never starts.
        """
        refused = refusal(job.script)
        if refused is not None:
            return refused
        try:
            domains = allowed_domains(job, folder)
            vm = self._check_out(GUESTS[Path(job.script).suffix], domains)
        except (RunnerUnavailable, StoreError, OSError) as e:
            text = e.message if isinstance(e, (RunnerUnavailable, StoreError)) else str(e)
            message = f"The sandbox could not start: {text}"
            return Outcome(RunStatus.FAILED, None, "", message, message)
        collector = OutputCollector(stream, coalesce_seconds=COALESCE_SECONDS, secrets=job.secrets)
        reusable = False
        try:
            vm.stage(folder)
            verify_folder(vm.input_dir, job.skill_hash, "The skill's copy for the micro-VM")
            unplaced = _place(job, vm)
            if unplaced is not None:
                return unplaced
            program = guest_program(job, vm.input_dir)  # from the proven copy, nothing else
            stream.status("running", isolation=self.isolation, pid=vm.process.pid)
            _send(vm.conn, program)
            state, code, reusable = _pump(vm, collector, job.timeout, cancelled)
            return _with_files(job, vm, reusable, _outcome(state, code, collector, job.timeout))
        finally:
            self._check_in(vm, reusable and not domains)

    def close(self) -> None:
        """Stop every idle micro-VM."""
        with self._lock:
            idle = [vm for vms in self._idle.values() for vm in vms]
            for vms in self._idle.values():
                vms.clear()
        for vm in idle:
            vm.close()

    def _check_out(self, guest: str, domains: tuple[str, ...]) -> _MicroVM:
        """A warm micro-VM from the pool; a fresh one when none is idle or the run has a network."""
        if not domains:
            with self._lock:
                while self._idle[guest]:
                    vm = self._idle[guest].pop()
                    if vm.process.poll() is None:
                        return vm
                    vm.close()
        return self._boot(guest, domains)

    def _check_in(self, vm: _MicroVM, keep: bool) -> None:
        if keep and vm.process.poll() is None:
            with self._lock:
                if len(self._idle[vm.guest]) < self.pool_size:
                    self._idle[vm.guest].append(vm)
                    return
        vm.close()

    def _boot(self, guest: str, domains: tuple[str, ...]) -> _MicroVM:
        vm = _MicroVM(guest, domains)
        problem = vm.wait_ready(self.boot_seconds)
        if problem is not None:
            vm.close()
            reason = f"{KVM_DEVICE} is present but Hyperlight could not run a micro-VM: {problem}"
            raise RunnerUnavailable(reason[:MAX_REASON_CHARS])
        return vm


def build_sandbox_runner(settings: Settings) -> tuple[Runner | None, str | None]:
    """The sandbox runner this host can offer, or None and the reason it offers none."""
    if settings.sandbox_isolation == "container":
        runner = ContainerSandboxRunner(
            settings.runner_image,
            egress_network=settings.runner_network,
            egress_private=settings.runner_network_private,
            work_direct=settings.spark_work_direct,
        )
        try:
            runner.start()
        except RunnerUnavailable as e:
            return None, e.message
        return runner, None
    sandbox = SandboxRunner()
    reason = sandbox.probe()
    if reason is not None:
        sandbox.close()
        return None, reason
    return sandbox, None


def _outcome(
    state: str | None, code: int | None, collector: OutputCollector, timeout: int
) -> Outcome:
    if code is None:
        message = "The micro-VM stopped before the script ended."
        return Outcome(
            RunStatus.FAILED, None, collector.text("stdout"), collector.text("stderr"), message
        )
    return outcome_of(state, code, collector, timeout)


def _place(job: Job, vm: _MicroVM) -> Outcome | None:
    """Fetch the call's files into the VM's inbox; the failed outcome when one can't be had."""
    if job.files is None or not job.inputs:
        return None
    try:
        place_inputs(job.files, job.run_id, job.inputs, vm.folders.inbox)
    except (RunError, OSError) as e:
        message = getattr(e, "message", None) or f"The input files could not be placed: {e}"
        return Outcome(RunStatus.FAILED, None, "", message, message, InputFileUnavailable.code)
    return None


def _with_files(job: Job, vm: _MicroVM, restored: bool, outcome: Outcome) -> Outcome:
    """Send back what the run created or changed in `/output`. A restored VM's child moved it to
    the outbox before its restore; a VM that was stopped left it in `/output`."""
    if job.files is None:  # nowhere to send it: a warm VM keeps none of it till its next run
        empty(vm.folders.outbox)
        return outcome
    try:
        if not restored:
            vm.kill()
            move_entries(vm.folders.output, vm.folders.outbox)
        sent = collect(job.files, job.run_id, found_in(vm.folders.outbox), job.inputs)
    except OSError as e:
        note = f"The run's files could not be read back: {type(e).__name__}."
        return replace(outcome, files_note=note)
    finally:
        empty(vm.folders.outbox)
    return replace(outcome, files=tuple(sent.files), files_note=sent.note())


def host_problem() -> str | None:
    """Why this host can't run Hyperlight at all (package, CPU, KVM), or None."""
    missing = [name for name in PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        return f"Hyperlight is not installed ({', '.join(missing)} missing): {INSTALL_HINT}."
    machine = platform.machine().lower()
    if machine not in ("x86_64", "amd64"):
        return f"Hyperlight needs an x86_64 server with KVM; this one is {machine}."
    if not os.path.exists(KVM_DEVICE):
        return f"Hyperlight needs KVM, and this server has no {KVM_DEVICE}."
    if not os.access(KVM_DEVICE, os.R_OK | os.W_OK):
        return f"Hyperlight needs KVM, and this user can't open {KVM_DEVICE} (join the kvm group)."
    return None


class _MicroVM:
    """A child process holding one booted guest, its snapshot and its folders."""

    def __init__(self, guest: str, domains: tuple[str, ...]) -> None:
        self.guest = guest
        self.folders = VmFolders(Path(tempfile.mkdtemp(prefix="skillfleet-vm-"))).make()
        self.input_dir = self.folders.input
        ours, theirs = socket.socketpair()
        self.conn = Connection(ours.detach())
        arguments = [str(theirs.fileno()), guest, str(self.folders.root), json.dumps(domains)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        try:
            # The child dies with the worker, as a node script does: through skillfleet-launch
            # (or setpriv) when there is one, so the spawn is a vfork, not a fork of the worker.
            command, preexec = launch_command(
                [sys.executable, "-c", CHILD_COMMAND, *arguments], env, LAUNCHER
            )
            self.process = subprocess.Popen(
                command,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=[theirs.fileno()],
                preexec_fn=preexec,  # noqa: PLW1509 - only a prctl call, with no launcher at all
            )
        finally:
            theirs.close()

    def wait_ready(self, seconds: float) -> str | None:
        """None once the guest booted and was snapshotted, else what went wrong."""
        reply = _receive(self.conn, seconds)
        if not reply:
            return f"the micro-VM did not boot within {seconds:g} s"
        if reply[0] == "crashed":
            self.kill()
            return f"the micro-VM process ended with exit code {self.process.returncode}"
        return None if reply == ("ready",) else str(reply[-1])

    def stage(self, folder: Path) -> None:
        """Replace `/input`'s files with the skill's (the folder stays: the VM holds it open),
        with nothing waiting in the inbox or the outbox."""
        empty(self.input_dir)
        copy_skill(folder, self.input_dir)
        empty(self.folders.inbox)
        empty(self.folders.outbox)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(5)

    def close(self) -> None:
        self.kill()
        self.conn.close()
        shutil.rmtree(self.folders.root, ignore_errors=True)


def _pump(
    vm: _MicroVM, collector: OutputCollector, timeout: int, cancelled: CancelCheck
) -> tuple[str | None, int | None, bool]:
    """Forward output until the guest is done, or kill the VM on timeout or cancel.

    Output is published in bursts, as the node runner does: what the guest prints within the
    collector's window becomes one stream entry. Returns why it was stopped (None: it ended),
    the exit code (None: the VM crashed), and whether the VM was restored for another run.
    """
    ended = _forward(vm, collector, timeout, cancelled)
    collector.flush()
    return ended


def _forward(
    vm: _MicroVM, collector: OutputCollector, timeout: int, cancelled: CancelCheck
) -> tuple[str | None, int | None, bool]:
    deadline = time.monotonic() + timeout
    next_cancel_check = time.monotonic() + CANCEL_POLL_SECONDS
    while True:
        wait = max(0.0, min(deadline, next_cancel_check) - time.monotonic())
        burst = collector.wait_left()
        if burst is not None:
            wait = min(wait, burst)
        message = _receive(vm.conn, wait) or ("wait",)
        if message[0] == "out":
            collector.add(message[1], message[2].encode("utf-8", "replace"))
        elif message[0] == "done":
            for name, text in (("stdout", message[2]), ("stderr", message[3])):
                if text:  # what the guest's own capture caught (normally nothing)
                    collector.add(name, text.encode("utf-8", "replace"))
            return None, int(message[1]), bool(message[4])
        elif message[0] == "crashed":
            collector.add("stderr", f"{message[1]}\n".encode())
            return RunStatus.FAILED, None, False
        collector.flush_due()
        stopped = _stop_reason(deadline, next_cancel_check, cancelled)
        if stopped is not None:
            vm.kill()
            return stopped, vm.process.returncode, False
        if time.monotonic() >= next_cancel_check:
            next_cancel_check = time.monotonic() + CANCEL_POLL_SECONDS


def _send(conn: Connection, program: str) -> None:
    try:
        conn.send(program)
    except OSError:  # the child is gone; the next receive says so
        pass


def _receive(conn: Connection, seconds: float) -> Message:
    """The child's next message, or () when none came within `seconds`."""
    try:
        return tuple(conn.recv()) if conn.poll(seconds) else ()
    except (OSError, EOFError):
        return ("crashed", "The micro-VM process ended.")


def _stop_reason(deadline: float, next_cancel_check: float, cancelled: CancelCheck) -> str | None:
    now = time.monotonic()
    if now >= deadline:
        return RunStatus.TIMED_OUT
    if now >= next_cancel_check and cancelled():
        return RunStatus.CANCELLED
    return None


# -- the programs the guests run ----------------------------------------------------------

# Python: the script runs from /input as __main__; print() goes out line by line via `emit`.
CHILD_COMMAND = "from workers.runners.sandbox import child_main; child_main()"


def child_main() -> None:
    """The child's entry: `<socket fd> <guest module> <VM folder> <domains as JSON>`."""
    fd, guest, root, domains = sys.argv[1:5]
    serve(Connection(int(fd)), guest, VmFolders(Path(root)), tuple(json.loads(domains)))


def serve(conn: Connection, guest: str, folders: VmFolders, domains: tuple[str, ...]) -> None:
    """In the child: boot the guest, snapshot it, then run each program sent and restore."""
    exit_codes: list[int] = []

    def files_in() -> bool:  # after the run emptied /output, before the script starts
        move_entries(folders.inbox, folders.output)
        return True

    def emit(stream: str = "stdout", text: str = "") -> bool:
        conn.send(("out", "stderr" if stream == "stderr" else "stdout", text))
        return True

    def finish(code: int = 0) -> bool:
        exit_codes.append(int(code))
        return True

    try:
        from hyperlight_sandbox import Sandbox

        vm: Any = Sandbox(
            backend="wasm", module=guest, input_dir=str(folders.input),
            output_dir=str(folders.output),
        )  # fmt: skip
        vm.register_tool("emit", emit)
        vm.register_tool("exit", finish)
        vm.register_tool("files_in", files_in)
        for host in domains:
            vm.allow_domain(f"https://{host}")
        vm.run(WARM_UP[guest])
        snapshot = vm.snapshot()
    except Exception as e:  # sent to the worker, which then refuses the sandbox queue
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready",))
    while _serve_one(conn, vm, snapshot, exit_codes, folders):
        pass


def _serve_one(
    conn: Connection, vm: Any, snapshot: Any, exit_codes: list[int], folders: VmFolders
) -> bool:
    """Run one program, take what it left in /output out (a restore empties /output, but only
    of its top-level files), and restore the snapshot; False when this child can't serve
    again."""
    try:
        program = conn.recv()
    except EOFError:  # the worker closed the pool
        return False
    exit_codes.clear()
    try:
        result = vm.run(program)
    except Exception as e:  # the micro-VM itself failed
        conn.send(("crashed", f"{type(e).__name__}: {e}"))
        return False
    code = exit_codes[-1] if exit_codes else int(result.exit_code)
    try:
        move_entries(folders.output, folders.outbox)
        vm.restore(snapshot)
        restored = True
    except Exception:  # the result still counts (the worker takes /output); this child is done
        restored = False
    conn.send(("done", code, result.stdout, result.stderr, restored))
    return restored

"""The Spark runner: each script in a throwaway hardened container from the runner image."""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import shutil
import tarfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import docker
import requests
from docker.errors import DockerException, ImageNotFound, NotFound

from broker.runs import Outcome
from relay import naming
from relay.errors import PackageUnverified, RunnerUnavailable
from relay.streams import RunStream
from store.environment import IMAGE_PYTHON
from store.errors import StoreError
from store.limits import COALESCE_SECONDS
from store.states import RunStatus
from workers.runfiles import InputFileUnavailable
from workers.runners.base import (
    CancelCheck,
    Job,
    OutputCollector,
    outcome_of,
    script_environment,
)
from workers.runners.dependency_volumes import DependencyVolumes
from workers.runners.dependency_volumes import options as dependency_options
from workers.runners.egress import (
    DEFAULT_NETWORK,
    Egress,
    Gate,
    allowed_domains,
    relayed,
    run_options,
)
from workers.runners.interpreters import script_command
from workers.runners.keeper import KEEPER, Keeper
from workers.runners.keeper import LABEL as KEPT_LABEL
from workers.runners.ownership import WORKER_LABEL, made_by_live_worker, worker_identity
from workers.runners.skill_volumes import KEEP_VOLUMES, SkillVolume, SkillVolumes
from workers.runners.workdirs import (
    WORK_MOUNT,
    WorkVolume,
    collect_outputs,
    create_volume,
    put_inputs,
)

LABEL = "skillfleet.run"
# The queue of the worker that made a run's containers: a Spark worker and a container sandbox
# worker may share one engine, and each removes only its own (and unlabelled) leftovers.
QUEUE_LABEL = "skillfleet.queue"
SKILL_MOUNT = "/skill"
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# /tmp is the only writable place; its files count against the memory limit, so cap it too.
TMPFS_OPTIONS = "rw,noexec,nosuid,nodev,size=256m"
PIDS_LIMIT = 256
MEMORY_LIMIT = "1g"
NANO_CPUS = 2_000_000_000
NOBODY = "65534:65534"
CANCEL_POLL_SECONDS = 0.2
# After a kill, or once the output ended, how long the engine may take to report the exit.
EXIT_WAIT_SECONDS = 15
BUILD_HINT = (
    "build it with `bash workers/runner/build-offline.sh` "
    "or `docker build -t skillfleet/runner:latest -f workers/runner/Dockerfile .`"
)
# Connections kept to the engine: each running script holds one for its output, besides the
# calls of the other runs and of the remover.
ENGINE_CONNECTIONS = 32
_ENGINE_ERRORS = (DockerException, requests.exceptions.RequestException)


def copy_skill(folder: Path, target: Path) -> None:
    """Copy a skill folder to `target` readable by any user: dirs 0755, files 0644.

    The cache keeps skills private to the worker's user (0700/0600); the container's user
    (65534) reads this copy instead. Links are refused: the cache never holds any.
    """
    target.mkdir(mode=0o755, exist_ok=True)
    os.chmod(target, 0o755)  # mkdir's mode is masked by the umask
    for entry in sorted(folder.iterdir()):
        destination = target / entry.name
        if entry.is_symlink():
            raise ValueError(f"the skill holds a link: {entry.name}")
        if entry.is_dir():
            copy_skill(entry, destination)
        else:
            shutil.copyfile(entry, destination)
            os.chmod(destination, 0o644)


class SparkRunner:
    """Runs each script in its own container: read-only, no capabilities, user 65534.

    The skill reaches the container through a volume per content hash (`SkillVolumes`), filled
    and proven once and mounted read-only into every run of that hash. A finished container is
    removed by a background thread, off the run's path; a worker's start removes whatever a
    killed worker left (containers, loaders, unused skill volumes).
    """

    isolation = "container"
    queue_name = naming.SPARK  # its worker's queue, on its containers

    def __init__(
        self,
        image: str,
        client: docker.DockerClient | None = None,
        keep_volumes: int = KEEP_VOLUMES,
        coalesce_seconds: float = COALESCE_SECONDS,
        egress_network: str = DEFAULT_NETWORK,
        egress_private: bool = False,
        keeper: Keeper = KEEPER,
        package_index: str | None = None,
        work_direct: bool = True,
    ) -> None:
        self.image = image
        self.worker = worker_identity()  # on everything it makes, for another worker's start
        # Files into and out of /work straight in its volume's folder when reachable.
        self.work_direct = work_direct
        self.keeper = keeper  # removes a run's containers if this worker dies mid-run
        self.coalesce_seconds = coalesce_seconds  # the output window of one stream entry
        self._client = client
        self.volumes = SkillVolumes(
            lambda: self.client, image, SKILL_MOUNT, LABEL, keep_volumes, self.worker
        )
        # Declared dependencies, a volume per resolved set (workers/runners/dependency_volumes.py).
        self.dependencies = DependencyVolumes(
            lambda: self.client, image, LABEL, package_index, self.worker
        )
        self.egress = Egress(
            lambda: self.client,
            image,
            LABEL,
            egress_network,
            egress_private,
            labels={QUEUE_LABEL: self.queue_name, WORKER_LABEL: self.worker},
        )
        # Finished containers' ids, and cleanups that must follow them (a run's egress gate).
        self._removals: queue.Queue[str | Callable[[], None]] = queue.Queue()
        self._remover: threading.Thread | None = None
        self._remover_lock = threading.Lock()

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            self._client = docker.from_env(max_pool_size=ENGINE_CONNECTIONS)
        return self._client

    def hosts_for(self, job: Job, folder: Path) -> tuple[str, ...]:
        """The hosts a run may reach through its egress gate: its skill's allowed-domains."""
        return allowed_domains(job, folder)

    def command(self, job: Job) -> list[str]:
        """The container's command: the interpreter, the script and its argv, in exec form (the
        engine runs the list itself; no shell reads it)."""
        return script_command(SKILL_MOUNT, job.script, job.argv, IMAGE_PYTHON, job.as_module)

    def container_options(
        self,
        job: Job,
        volume: str | Path,
        gate: Gate | None = None,
        deps: str | None = None,
        work: str | None = None,
    ) -> dict[str, Any]:
        """The docker SDK arguments of a run's container (the runner image's hardening).

        `volume` holds the skill and is mounted read-only at /skill; `work`, the run's own
        volume, is its working directory at /work. No run has a network: one with a `gate`
        reaches its skill's hosts through the gate (workers/runners/egress.py).
        """
        options: dict[str, Any] = {
            "network_mode": "none",
            # The engine needn't set a network up (`none` still makes a sandbox with loopback):
            # the container gets a new network namespace holding only loopback, and starts in
            # less than half the time.
            "network_disabled": True,
            "read_only": True,
            "tmpfs": {"/tmp": TMPFS_OPTIONS},
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "pids_limit": PIDS_LIMIT,
            "mem_limit": MEMORY_LIMIT,
            "nano_cpus": NANO_CPUS,
            "user": NOBODY,
            "labels": {LABEL: job.run_id, QUEUE_LABEL: self.queue_name, WORKER_LABEL: self.worker},
            "volumes": {str(volume): {"bind": SKILL_MOUNT, "mode": "ro"}},
            "working_dir": WORK_MOUNT if work is not None else SKILL_MOUNT,
            "environment": script_environment(job, {"PATH": IMAGE_PATH, "HOME": "/tmp"}),
            "stdin_open": False,
            "tty": False,
        }
        if work is not None:
            options["volumes"][work] = {"bind": WORK_MOUNT, "mode": "rw"}
        extras = [dependency_options(deps, job.script, SKILL_MOUNT)]
        if gate is not None:
            extras.append(run_options(gate))
        for extra in extras:
            options["volumes"].update(extra["volumes"])
            options["environment"].update(extra["environment"])
        return options

    def start(self) -> None:
        """Check the engine and the image; remove what a crashed worker left behind.

        Raises RunnerUnavailable when the engine doesn't answer or the image is missing.
        """
        try:
            self.client.ping()
        except _ENGINE_ERRORS as e:
            raise RunnerUnavailable(
                f"No Docker engine answers, so spark scripts can't run here ({type(e).__name__})."
            ) from e
        try:
            self.client.images.get(self.image)
        except ImageNotFound as e:
            raise RunnerUnavailable(
                f"The runner image {self.image} is missing; {BUILD_HINT}."
            ) from e
        try:
            for container in self.leftovers():
                _remove(container)
            # Per-run volumes (an egress gate's), then the skill volumes no container holds. One
            # removed since the list (its worker's keeper, another worker starting) is gone.
            for volume in self.client.volumes.list(filters={"label": LABEL}):
                if self._ours(volume.attrs.get("Labels")):
                    with contextlib.suppress(NotFound):
                        volume.remove(force=True)
            self.volumes.remove_unused()
            self.dependencies.remove_unused()
        except _ENGINE_ERRORS as e:
            raise RunnerUnavailable(
                f"Containers left by an earlier spark worker can't be removed: {e}"
            ) from e

    def leftovers(self) -> list[Any]:
        """Every container labelled as a run of this worker's queue (or as a run with no queue,
        or as a volume's loader), running or not, that no live worker made: another queue's
        worker on this engine, and another live worker of this queue on this host, keep theirs."""
        # A container removed between the engine's list and its inspection (its own worker's
        # keeper, or another worker starting) is no leftover: left out, not an error.
        found = self.client.containers.list(all=True, filters={"label": LABEL}, ignore_removed=True)
        return [container for container in found if self._ours(container.labels)]

    def _ours(self, labels: dict[str, str] | None) -> bool:
        labels = labels or {}
        if labels.get(QUEUE_LABEL, self.queue_name) != self.queue_name:
            return False
        return not made_by_live_worker(labels)

    def run(self, job: Job, folder: Path, stream: RunStream, cancelled: CancelCheck) -> Outcome:
        """Run in a new container that mounts the skill's volume, proven for the job's hash.

        Raises PackageUnverified when `folder` does not hash to the job's hash, or when the
        volume is replaced behind this worker's back twice in a row: no script starts then.
        """
        collector = OutputCollector(
            stream, coalesce_seconds=self.coalesce_seconds, secrets=job.secrets
        )
        try:
            command = self.command(job)
            hosts = self.hosts_for(job, folder)
        except (ValueError, StoreError) as e:
            return _not_started(e)
        # Raises DependenciesUnavailable (the run ends with its code) before any container.
        deps = self.dependencies.volume_for(job.skill_hash, folder)
        label = f"{LABEL}={job.run_id}"  # the run's container, its egress gate and its volume
        self.keeper.hold(KEPT_LABEL, label)
        try:
            return self._attempts(job, folder, collector, stream, cancelled, command, hosts, deps)
        finally:
            # Once the remover has removed them (it takes them in order), not before.
            self._start_remover()
            self._removals.put(functools.partial(self.keeper.release, KEPT_LABEL, label))

    def _attempts(
        self,
        job: Job,
        folder: Path,
        collector: OutputCollector,
        stream: RunStream,
        cancelled: CancelCheck,
        command: list[str],
        hosts: tuple[str, ...],
        deps: str | None = None,
    ) -> Outcome:
        """The run in a container on a proven volume; a volume replaced behind this worker's
        back is filled again once."""
        for _attempt in range(2):
            with contextlib.ExitStack() as held:
                try:
                    volume = held.enter_context(self.volumes.use(job.skill_hash, folder))
                    gate = self._open_gate(job, hosts, held)
                    work = self._work_volume(job, held)
                    container = self._create(job, command, volume, gate, deps, work.name)
                except (OSError, ValueError, RunnerUnavailable, *_ENGINE_ERRORS) as e:
                    return _not_started(e)
                try:
                    proven = self.volumes.mounted(volume)
                except _ENGINE_ERRORS as e:
                    _remove(container)
                    return _not_started(e)
                if not proven:
                    _remove(container)  # it holds the impostor; then the volume can go
                    self.volumes.forget(volume)
                    continue
                try:
                    return self._with_files(container, job, collector, stream, cancelled, work)
                finally:
                    self._discard(container)
        raise PackageUnverified(
            "The skill's volume was replaced behind the worker's back twice; the run did not start."
        )

    def _with_files(
        self,
        container: Any,
        job: Job,
        collector: OutputCollector,
        stream: RunStream,
        cancelled: CancelCheck,
        work: WorkVolume,
    ) -> Outcome:
        """The call's files into /work, the run, then what it made there back."""
        if job.files is not None and job.inputs:
            try:
                put_inputs(container, job.files, job.run_id, job.inputs, work)
            except InputFileUnavailable as e:
                return Outcome(RunStatus.FAILED, None, "", e.message, e.message, e.code)
            except (OSError, *_ENGINE_ERRORS) as e:
                return _not_started(e)
        outcome = self._watch(container, job, collector, stream, cancelled)
        if job.files is None:
            return outcome
        try:
            return collect_outputs(container, job.files, job.run_id, job.inputs, outcome, work)
        except (OSError, tarfile.TarError, *_ENGINE_ERRORS) as e:
            note = f"The run's files could not be read back: {type(e).__name__}."
            return replace(outcome, files_note=note)

    def _work_volume(self, job: Job, held: contextlib.ExitStack) -> WorkVolume:
        """The run's /work volume; removed after its container (the remover keeps that order)."""
        labels = {LABEL: job.run_id, QUEUE_LABEL: self.queue_name, WORKER_LABEL: self.worker}
        work = create_volume(self.client, labels, self.work_direct)
        self._start_remover()
        held.callback(self._removals.put, functools.partial(self._remove_volume, work.name))
        return work

    def _remove_volume(self, name: str) -> None:
        with contextlib.suppress(NotFound):
            self.client.api.remove_volume(name, force=True)

    def settle(self) -> None:
        """Wait until every finished container handed to the remover is gone."""
        self._removals.join()

    def _create(
        self, job: Job, command: list[str], volume: SkillVolume, gate: Gate | None,
        deps: str | None = None, work: str | None = None,
    ) -> Any:  # fmt: skip
        """The run's container, created (and inspected) by the SDK."""
        options = self.container_options(job, volume.name, gate, deps, work)
        if gate is not None:
            command = relayed(command)
        return self.client.containers.create(self.image, command, **options)

    def _open_gate(
        self, job: Job, hosts: tuple[str, ...], held: contextlib.ExitStack
    ) -> Gate | None:
        """The run's egress gate when its skill lists hosts; it closes after the container goes."""
        if not hosts:
            return None
        gate = self.egress.open(job.run_id, hosts)
        self._start_remover()
        held.callback(self._removals.put, functools.partial(self.egress.close, gate))
        return gate

    def _discard(self, container: Any) -> None:
        """Remove `container` in the background: the run's outcome needn't wait for it."""
        self._start_remover()
        self._removals.put(container.id)

    def _start_remover(self) -> None:
        with self._remover_lock:
            if self._remover is None or not self._remover.is_alive():
                self._remover = threading.Thread(
                    target=self._remove_finished, name="spark-remover", daemon=True
                )
                self._remover.start()

    def _remove_finished(self) -> None:
        while True:
            removal = self._removals.get()
            try:
                if callable(removal):
                    removal()
                else:
                    self.client.api.remove_container(removal, force=True)
            except _ENGINE_ERRORS:
                pass  # gone already, or the engine is away: the next start removes it
            try:
                if self._removals.qsize() == 0:
                    self.volumes.prune()  # volumes that only finished containers held
            finally:
                self._removals.task_done()

    def _watch(
        self,
        container: Any,
        job: Job,
        collector: OutputCollector,
        stream: RunStream,
        cancelled: CancelCheck,
    ) -> Outcome:
        """Attach before start so no output is missed; then supervise until it exits.

        The engine attaches the output streams before it answers the attach, so everything the
        script prints after `start` arrives on them. No log replay (`logs`): what the script
        prints while the engine replays its log would arrive twice, once from each.
        """
        frames = container.attach(stdout=True, stderr=True, stream=True, demux=True, logs=False)
        try:
            reader = _Reader(frames)
            try:
                container.start()
            except _ENGINE_ERRORS as e:
                message = f"The script could not start: {type(e).__name__}: {e}"
                return Outcome(RunStatus.FAILED, None, "", message, message)
            stream.status("running", container=container.short_id)
            reader.start()
            state, code = _supervise(container, reader, collector, job.timeout, cancelled)
            reader.join(EXIT_WAIT_SECONDS)
            reader.drain(collector)
            if reader.error is not None:
                raise reader.error
            return outcome_of(state, code, collector, job.timeout)
        finally:
            frames.close()


def _not_started(error: Exception) -> Outcome:
    message = f"The script could not start: {type(error).__name__}: {error}"
    return Outcome(RunStatus.FAILED, None, "", message, message)


Frame = tuple[bytes | None, bytes | None]


class _Reader(threading.Thread):
    """Takes the container's stdout and stderr frames off the engine's stream as they come.

    Only the supervising thread hands them to the collector, so output is published in bursts
    (one stream entry per burst, as the node runner does) by one thread.
    """

    def __init__(self, frames: Iterable[Frame]):
        super().__init__(name="spark-output", daemon=True)
        self.frames = frames
        self.queue: queue.SimpleQueue[Frame | None] = queue.SimpleQueue()  # None: the end
        self.ended = False  # the supervising thread took the end
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            for frame in self.frames:
                self.queue.put(frame)
        except Exception as e:  # re-raised by the supervising thread, after cleanup
            self.error = e
        finally:
            self.queue.put(None)

    def forward(self, collector: OutputCollector, seconds: float) -> None:
        """Hand frames to `collector` for up to `seconds`, or until the output ended."""
        until = time.monotonic() + seconds
        while not self.ended:
            wait = until - time.monotonic()
            burst = collector.wait_left()
            if burst is not None:
                wait = min(wait, burst)
            try:
                self._take(collector, self.queue.get(timeout=max(0.0, wait)))
            except queue.Empty:
                pass
            collector.flush_due()
            if time.monotonic() >= until:
                return
        collector.flush()

    def drain(self, collector: OutputCollector) -> None:
        """Hand over what is still queued, and publish every burst."""
        while not self.ended:
            try:
                self._take(collector, self.queue.get_nowait())
            except queue.Empty:
                break
        collector.flush()

    def _take(self, collector: OutputCollector, frame: Frame | None) -> None:
        if frame is None:
            self.ended = True
            return
        stdout, stderr = frame
        if stdout:
            collector.add("stdout", stdout)
        if stderr:
            collector.add("stderr", stderr)


def _supervise(
    container: Any,
    reader: _Reader,
    collector: OutputCollector,
    timeout: int,
    cancelled: CancelCheck,
) -> tuple[str | None, int]:
    """Wait for the exit code; kill on timeout or cancel. Returns why it stopped, and the code."""
    deadline = time.monotonic() + timeout
    stopped: str | None = None
    killed_at = 0.0
    while True:
        if not reader.ended:
            reader.forward(collector, CANCEL_POLL_SECONDS)
        else:  # the output ended: the container exited (or is about to)
            code = _exit_code(container, CANCEL_POLL_SECONDS)
            if code is not None:
                return stopped, code
        if stopped is None:
            stopped = _stop_reason(deadline, cancelled)
            if stopped is not None:
                killed_at = time.monotonic()
                _kill(container)
        elif time.monotonic() - killed_at > EXIT_WAIT_SECONDS:
            code = _exit_code(container, EXIT_WAIT_SECONDS)
            return stopped, code if code is not None else 137


def _stop_reason(deadline: float, cancelled: CancelCheck) -> str | None:
    if time.monotonic() >= deadline:
        return RunStatus.TIMED_OUT
    if cancelled():
        return RunStatus.CANCELLED
    return None


def _exit_code(container: Any, seconds: float) -> int | None:
    """The exit code, or None when the container is still running after `seconds`."""
    try:
        return int(container.wait(timeout=seconds)["StatusCode"])
    except requests.exceptions.RequestException:  # the wait timed out
        return None


def _kill(container: Any) -> None:
    try:
        container.kill()
    except DockerException:  # already gone, or it exited between the check and the kill
        pass


def _remove(container: Any) -> None:
    try:
        container.remove(force=True)
    except NotFound:
        pass

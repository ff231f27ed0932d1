"""`skillfleet worker node|spark|sandbox|control` and `skillfleet beat`."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import click

from relay import naming
from skillfleet.cli_settings import load_settings
from store.settings import Settings


def consume(app: Any, queues: list[str], *, hostname: str, concurrency: int) -> None:
    """Consume `queues` as `celery worker -Q … --pool threads` does, without gossip or mingle,
    logging at INFO, until the worker is told to stop. The worker is started as Celery's
    command starts it (`app.Worker(…).start()`), without loading the command line itself: its
    click commands, REPL and shell completion cost a worker's start some 0.3–0.5 s of CPU."""
    from celery.utils.nodenames import default_nodename, host_format

    worker = app.Worker(
        hostname=host_format(default_nodename(hostname)),
        queues=queues,
        pool_cls="threads",
        concurrency=concurrency,
        without_gossip=True,
        without_mingle=True,
        loglevel="INFO",
    )
    worker.start()


@click.group()
def worker() -> None:
    """Celery workers."""


@worker.command("node")
@click.option("--name", required=True, help="This server's node name (skillfleet nodes add NAME)")
@click.option("--concurrency", default=8, show_default=True, help="Scripts run at once")
def node(name: str, concurrency: int) -> None:
    """The node agent: syncs verified skill packages and runs node scripts on this server."""
    if not naming.is_node_name(name):
        raise click.ClickException("A node name is 1-64 characters of a-z, 0-9 and hyphens.")
    from workers.agent import SyncLoop
    from workers.runners.isolation import FEATURE

    settings = load_settings()
    cache = _package_cache(settings, name)
    loop_holder: dict[str, Any] = {}

    def before(client: Any) -> None:
        loop_holder["loop"] = SyncLoop(cache, client, name)
        loop_holder["loop"].start()

    runner, reason = _node_runner(settings)
    _serve(
        settings,
        role="node",
        queue=naming.node_queue(name),
        name=name,
        runner=runner,
        packages=cache,
        features=[*_node_features(), FEATURE[settings.node_run_as]],
        concurrency=concurrency,
        before=before,
        reason=reason,
        status=runner.toolchain.standard if runner is not None else None,
    )


def _node_toolchain(settings: Settings) -> Any:
    """The standard environment (built in the background from now on) and declared
    dependencies' folders, where every run's uid reads them."""
    from workers.runners.environments import (
        DeclaredEnvironments,
        StandardEnvironment,
        Toolchain,
        default_env_dir,
    )

    env_dir = settings.env_dir or default_env_dir()
    standard = StandardEnvironment(env_dir, settings.package_index, settings.standard_env)
    standard.start()
    return Toolchain(standard, DeclaredEnvironments(env_dir, standard, settings.package_index))


def _node_runner(settings: Settings) -> tuple[Any, str | None]:
    """The node runner as the settings ask (a uid per run, or the worker's user), or None and
    why it can't run scripts here."""
    from workers.runners.isolation import (
        RUN_AS_UID,
        TMPFS_OFF,
        RunSpace,
        default_runs_dir,
        private_tmpfs,
        unusable,
    )
    from workers.runners.node import NodeRunner, isolation_missing

    reason = unusable(settings.node_run_as) or isolation_missing(settings.node_run_as)
    if reason is not None:
        return None, f"This node runs no scripts: {reason}."
    if settings.node_run_as == RUN_AS_UID:
        # Runs get uids of their own: nothing of the worker's may be theirs to read.
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        settings.data_dir.chmod(0o700)
    runs_dir = settings.run_dir or default_runs_dir()
    space = RunSpace.of(runs_dir, settings.node_run_as, *settings.run_uids)
    if settings.node_run_as == RUN_AS_UID and settings.run_tmpfs != TMPFS_OFF:
        # Before any thread starts (the toolchain's and the keeper's come next).
        kept = private_tmpfs(runs_dir, settings.run_tmpfs)
        if kept is not None:
            click.echo(f"The runs' folder {runs_dir} stays on its disk: {kept}.", err=True)
    runner = NodeRunner(space=space, toolchain=_node_toolchain(settings))
    runner.keeper.start()  # before the first run, not on its path
    return runner, None


@worker.command("spark")
@click.option("--concurrency", default=4, show_default=True)
def spark(concurrency: int) -> None:
    """The Spark runner: scripts in throwaway hardened Docker containers."""
    from relay.errors import RunnerUnavailable
    from workers.runners.spark import SparkRunner

    settings = load_settings()
    runner = SparkRunner(
        settings.runner_image,
        egress_network=settings.runner_network,
        egress_private=settings.runner_network_private,
        package_index=settings.package_index,
        work_direct=settings.spark_work_direct,
    )
    try:
        runner.start()
    except RunnerUnavailable as e:
        raise click.ClickException(e.message) from e
    runner.keeper.start()  # before the first run, not on its path
    _serve(
        settings,
        role="spark",
        queue=naming.SPARK,
        name=naming.SPARK,
        runner=runner,
        packages=_package_cache(settings, naming.SPARK),
        features=["skills", "docker"],
        concurrency=concurrency,
    )


@worker.command("sandbox")
@click.option("--concurrency", default=4, show_default=True)
def sandbox(concurrency: int) -> None:
    """The KVM host runner: Python and JavaScript in Hyperlight micro-VMs."""
    from workers.runners.sandbox import build_sandbox_runner

    settings = load_settings()
    runner, reason = build_sandbox_runner(settings)
    packages = _package_cache(settings, naming.SANDBOX)
    features = ["skills", "kvm"] if runner is not None else ["skills"]
    _serve(
        settings,
        role="sandbox",
        queue=naming.SANDBOX,
        name=naming.SANDBOX,
        runner=runner,
        packages=packages,
        features=features,
        concurrency=concurrency,
        reason=reason,
    )


@worker.command("control")
# A job run holds a thread while one of its scripts runs; the reaper and expiry need one too.
@click.option("--concurrency", default=4, show_default=True)
def control(concurrency: int) -> None:
    """API-side background work: job runs, reaping lost runs, expiring approvals."""
    _serve(load_settings(), role="control", queue=naming.CONTROL, name=None, runner=None,
           packages=None, features=[], concurrency=concurrency)  # fmt: skip


def beat_command() -> click.Command:
    @click.command("beat")
    def beat() -> None:
        """celery beat: job tick on start and each minute, housekeeping every 5 s, sweep 60 s."""
        from celery.signals import beat_init

        from relay.app import create_beat
        from skillfleet.heap import freeze_startup_heap

        # A first start (no schedule file yet) would wait for the next minute to tick, so a
        # time that came while beat was starting would run a minute late, under the next one.
        beat_init.connect(_tick_on_start, weak=False)
        beat_init.connect(lambda **_: freeze_startup_heap(), weak=False)
        settings = load_settings()
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        schedule = settings.data_dir / "celerybeat-schedule"
        app = create_beat(settings)
        # As `celery beat --loglevel INFO --schedule …` runs it, without Celery's command line
        # (see consume).
        app.Beat(loglevel="INFO", schedule=str(schedule)).run()

    return beat


def _tick_on_start(sender: Any, **_: Any) -> None:
    """Send the job tick once as beat starts; a tick is idempotent, so an extra one is free."""
    scheduler = sender.scheduler
    scheduler.apply_entry(scheduler.schedule["job-tick"])


def _package_cache(settings: Settings, node: str) -> Any:
    from workers.packages import PackageCache

    if not settings.node_token or not settings.manifest_public_key:
        raise click.ClickException(
            "Set SKILLFLEET_NODE_TOKEN (from `skillfleet nodes add NAME`) and "
            "SKILLFLEET_MANIFEST_KEY (from `skillfleet keys show`) for this worker."
        )
    return PackageCache(
        settings.cache_dir / node,
        settings.api_url,
        node,
        settings.node_token,
        settings.manifest_public_key,
    )


def _run_files(settings: Settings, node: str | None) -> Any:
    """The channel a worker fetches its runs' input files and sends back their output on, and
    the input files it keeps beside its packages (only it reads either)."""
    from workers.runfiles import InputCache, RunFiles

    if node is None or not settings.node_token:
        return None
    cache = InputCache(settings.cache_dir / node / ".inputs")
    return RunFiles(settings.api_url, node, settings.node_token, cache=cache)


def _node_features() -> list[str]:
    features = ["skills"]
    if _docker_answers():
        features.append("docker")
        if Path("/dev/kvm").exists() and platform.machine() == "x86_64":
            features.append("kvm")
    return features


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=2).ping()
        return True
    except Exception:  # noqa: BLE001 - any failure means "no engine here"
        return False


def _serve(
    settings: Settings,
    *,
    role: str,
    queue: str,
    name: str | None,
    runner: Any,
    packages: Any,
    features: list[str],
    concurrency: int,
    reason: str | None = None,
    before: Any = None,
    status: Any = None,
) -> None:
    """Beat for `queue` and consume it; a worker that can't serve it beats but stays off it.

    `status` (a node's standard environment) adds its features, and its note as the reason
    of a worker that serves."""
    import time

    from relay.app import QUIET_TASKS
    from relay.clients import Clients
    from relay.heartbeat import Beater, Instance
    from relay.retention import StreamCaps
    from skillfleet.heap import freeze_startup_heap
    from store import tracing
    from store.logs import configure_logging
    from workers.execute import WorkerContext

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    configure_logging(settings.log_level, settings.log_format)
    tracing.start(settings, f"skillfleet-worker-{role}", [f"run/{t}" for t in QUIET_TASKS])
    # The process's engine, Redis client and Celery app, built once (workers/context.py).
    clients = Clients.build(settings)
    app, client = clients.celery, clients.redis
    app.skillfleet_clients = clients
    instance = Instance(role=role, queue=queue, name=name, features=features, reason=reason)
    serving = reason is None
    app.skillfleet_instance = instance  # job runs record it; the reaper watches its heartbeat
    if runner is not None:
        sessions = clients.sessions
        caps = StreamCaps.of(settings)
        files = _run_files(settings, name)
        app.skillfleet_worker = WorkerContext(
            sessions, client, instance, runner, packages, caps, files
        )

    def refresh(current: Instance) -> None:
        if status is not None:
            current.features = [*features, *status.features()]
            current.reason = reason or status.note()
        if packages is not None:
            current.hashes = packages.held()
            current.refused = [f"{key}: {why}" for key, why in packages.last_refused]

    beater = Beater(
        client,
        instance,
        serving,
        refresh,
        every=settings.heartbeat_seconds,
        alive_seconds=settings.worker_alive_seconds,
    )
    if before is not None:
        before(client)
    if not serving:
        click.echo(f"Not consuming '{queue}': {reason}", err=True)
        beater.start()
        freeze_startup_heap()
    else:
        # The first beat says "ready": only once Celery consumes the queue.
        from celery.signals import worker_ready

        worker_ready.connect(lambda **_: beater.start(), weak=False)
        worker_ready.connect(lambda **_: freeze_startup_heap(), weak=False)
    try:
        if not serving:
            while True:
                time.sleep(3600)
        hostname = f"{role}-{name or role}-{os.getpid()}@%h"
        consume(app, [queue], hostname=hostname, concurrency=concurrency)
    finally:
        beater.stop()

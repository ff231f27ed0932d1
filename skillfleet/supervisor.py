"""The workers of `skillfleet up`: started together, each restarted with back-off when it exits."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# The first restart waits this long, each further one twice as long, up to MAX_BACKOFF_SECONDS;
# a worker that then runs STABLE_SECONDS starts over from the first delay.
FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 30.0
STABLE_SECONDS = 60.0
STOP_SECONDS = 10.0


@dataclass
class Worker:
    label: str
    arguments: list[str]
    env: dict[str, str]
    log: Path
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    restarts_in_a_row: int = 0
    restart_at: float | None = None


class Supervisor:
    """Keeps each worker running: one that exits is reported and started again after a delay."""

    def __init__(self, echo: Callable[[str], None]) -> None:
        self.echo = echo
        self.workers: dict[str, Worker] = {}

    def start(self, label: str, arguments: list[str], env: dict[str, str], log: Path) -> None:
        worker = Worker(label, arguments, env, log)
        self.workers[label] = worker
        self._launch(worker)

    def pid(self, label: str) -> int | None:
        """The process id of the worker `label` now, or None while it waits to restart."""
        process = self.workers[label].process
        return None if process is None else process.pid

    def is_running(self, label: str) -> bool:
        process = self.workers[label].process
        return process is not None and process.poll() is None

    def check(self) -> None:
        """Notice workers that exited and restart those whose back-off has passed."""
        now = time.monotonic()
        for worker in self.workers.values():
            if worker.process is not None and worker.process.poll() is not None:
                self._exited(worker, now)
            elif worker.process is None and worker.restart_at is not None:
                if now >= worker.restart_at:
                    self._launch(worker)
                    self.echo(f"  worker {worker.label} restarted")

    def stop(self) -> None:
        for worker in reversed(self.workers.values()):
            if worker.process is not None and worker.process.poll() is None:
                worker.process.terminate()
        for worker in self.workers.values():
            if worker.process is not None:
                try:
                    worker.process.wait(timeout=STOP_SECONDS)
                except subprocess.TimeoutExpired:
                    worker.process.kill()
                    worker.process.wait()

    def _exited(self, worker: Worker, now: float) -> None:
        assert worker.process is not None
        code = worker.process.returncode
        if now - worker.started >= STABLE_SECONDS:
            worker.restarts_in_a_row = 0
        delay = min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2**worker.restarts_in_a_row)
        worker.restarts_in_a_row += 1
        worker.process = None
        worker.restart_at = now + delay
        self.echo(
            f"  worker {worker.label} stopped (exit code {code}); "
            f"restarting in {delay:.0f} s; see {worker.log}"
        )

    def _launch(self, worker: Worker) -> None:
        with open(worker.log, "ab") as log_file:
            worker.process = subprocess.Popen(
                [sys.executable, "-m", "skillfleet", *worker.arguments],
                env=worker.env,
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        worker.started = time.monotonic()
        worker.restart_at = None

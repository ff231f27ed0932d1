"""Garbage collection while a long-running `skillfleet` process starts (skillfleet/heap.py):
paused from the command line's first import until the process has started, then on again with
its start-up heap frozen. A short command is collected as usual."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REDIS_URL

from skillfleet.cli import STARTS_LONG, cli
from store.migrate import upgrade

ROOT = Path(__file__).resolve().parents[2]
# Run as `skillfleet <argv>` runs, after the probe: it counts every collection after main()
# began, says at Celery's worker_ready (before the worker's own receivers) how many there were
# and whether collection is on, and at exit whether it is on with a frozen heap (on the
# standard output's descriptor: a Celery worker sends its `sys.stdout` to its log).
PROBE = """
import atexit, gc, os, sys
from celery.signals import worker_ready
from skillfleet.cli import main
began = False
seen = []
say = lambda *words: os.write(1, (" ".join(map(str, words)) + "\\n").encode())
gc.callbacks.append(lambda phase, info: began and phase == "start" and seen.append(1))
worker_ready.connect(lambda **_: say("READY", len(seen), gc.isenabled()), weak=False)
atexit.register(lambda: say("EXIT", gc.isenabled(), gc.get_freeze_count() > 0))
sys.argv = ["skillfleet", *sys.argv[1:]]
began = True
main()
"""


def probe(argv: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", PROBE, *argv], cwd=ROOT, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip


@pytest.mark.fleet
def test_a_worker_starts_without_a_collection_then_collects_with_its_start_frozen(
    tmp_path: Path,
) -> None:
    upgrade(f"sqlite:///{tmp_path / 'skillfleet.db'}")
    env = dict(os.environ, SKILLFLEET_DATA_DIR=str(tmp_path), REDIS_URL=REDIS_URL)
    worker = probe(["worker", "control"], env)
    try:
        assert worker.stdout is not None
        ready = next(line for line in worker.stdout if line.startswith("READY"))
        # Collection stayed off while the worker imported and built everything it keeps (some
        # 320 collections before, two of them full).
        assert ready.split() == ["READY", "0", "False"]
    finally:
        worker.send_signal(signal.SIGTERM)
        out, _ = worker.communicate(timeout=30)
    assert "EXIT True True" in out  # on again once it was ready, its start-up heap frozen


def test_a_short_command_is_collected_as_usual() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "policy", "check", "broker/builtin_policy.yaml"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Valid policy" in done.stdout
    assert "EXIT True False" in done.stdout


@pytest.mark.parametrize("command", sorted(STARTS_LONG))
def test_each_command_that_pauses_collection_is_one_of_the_cli(command: str) -> None:
    # A misspelt name would leave that command's start collected (harmless, but then the set
    # says something untrue about which commands pause it).
    with cli.make_context("skillfleet", [command, "--help"], resilient_parsing=True) as ctx:
        assert cli.get_command(ctx, command) is not None

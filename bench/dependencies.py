"""Benchmark: a warm run of a skill that declares dependencies against a plain one, measured in
the same run (goal: at most 1.1x the plain run's median).

Run with `python bench/dependencies.py [--spark] [--rounds N]`. Both skills hold the same
script, printing one line; the declared one has a PEP 723 block naming tabulate (not in the
standard environment), so its runs get the declared packages' folder (a node) or volume (the
Spark) on their import path. The first run of the declared skill builds that (not timed); then
the two are run in alternated rounds (A B B A) through the real runner, a real Redis run
stream and real subprocesses or containers, and the medians and their ratio are printed. A
third column runs the declared skill's script importing tabulate, to show what the import
itself costs. On a node, the plain run is also measured with the host's python3 instead of the
standard environment's, for what the standard environment costs every run.

REDIS_URL (default redis://127.0.0.1:6379/14) is the Redis the run streams go to;
SKILLFLEET_RUNNER_IMAGE (default skillfleet/runner:latest) the Spark's image.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from relay.streams import RunStream  # noqa: E402
from store.hashing import content_hash  # noqa: E402
from workers.runners.base import Job  # noqa: E402
from workers.runners.environments import (  # noqa: E402
    DeclaredEnvironments,
    StandardEnvironment,
    Toolchain,
    default_env_dir,
)
from workers.runners.node import NodeRunner  # noqa: E402

BLOCK = '# /// script\n# dependencies = ["tabulate>=0.9"]\n# ///\n'
SCRIPT = 'print("ok")\n'
IMPORTING = 'import tabulate\nprint("ok")\n'


def skill(parent: Path, name: str, text: str) -> Path:
    folder = parent / name
    (folder / "scripts").mkdir(parents=True)
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: A bench skill.\n---\n")
    (folder / "scripts" / "run.py").write_text(text)
    return folder


def timed(run: Callable[[], None]) -> float:
    started = time.perf_counter()
    run()
    return (time.perf_counter() - started) * 1000


def runs(runner: object, client: redis.Redis, folder: Path) -> Callable[[], None]:
    skill_hash = content_hash(folder)

    def once() -> None:
        job = Job(str(uuid.uuid4()), folder.name, skill_hash, "scripts/run.py", {}, 60)
        outcome = runner.run(job, folder, RunStream(client, job.run_id), lambda: False)  # type: ignore[attr-defined]
        assert outcome.status == "succeeded", outcome.stderr

    return once


def measure(label: str, runs_: list[tuple[str, Callable[[], None]]], rounds: int) -> None:
    """Warm every run up (the first builds declared packages), then time them in alternated
    rounds; the first is the baseline of the ratios."""
    for _name, run in runs_:
        run()
    times: dict[str, list[float]] = {name: [] for name, _run in runs_}
    for round_ in range(rounds):
        for name, run in runs_ if round_ % 2 == 0 else list(reversed(runs_)):
            times[name].append(timed(run))
    medians = {name: statistics.median(values) for name, values in times.items()}
    base = runs_[0][0]
    print(f"{label}: {rounds} runs each, medians")
    for name, median in medians.items():
        ratio = "" if name == base else f"  ({median / medians[base]:.2f}x {base})"
        print(f"  {name:36} {median:8.1f} ms{ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--spark", action="store_true", help="measure the Spark runner too")
    args = parser.parse_args()
    client = redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/14"))
    work = Path(tempfile.mkdtemp(prefix="skillfleet-bench-deps-"))
    try:
        plain = skill(work, "plain", SCRIPT)
        declared = skill(work, "declared", BLOCK + SCRIPT)
        importing = skill(work, "importing", BLOCK + IMPORTING)
        standard = StandardEnvironment(default_env_dir())
        standard.build()
        print(f"standard environment: {standard.folder or standard.note()}")
        toolchain = Toolchain(standard, DeclaredEnvironments(default_env_dir(), standard))
        node = NodeRunner(toolchain=toolchain)
        host = NodeRunner(toolchain=Toolchain())
        measure("node", [
            ("plain", runs(node, client, plain)),
            ("declared, warm (goal <= 1.10x)", runs(node, client, declared)),
            ("declared, importing it", runs(node, client, importing)),
            ("plain, the host's python3", runs(host, client, plain)),
        ], args.rounds)  # fmt: skip
        if args.spark:
            from workers.runners.spark import SparkRunner

            image = os.environ.get("SKILLFLEET_RUNNER_IMAGE", "skillfleet/runner:latest")
            spark = SparkRunner(image)
            spark.start()
            try:
                measure(f"spark ({image})", [
                    ("plain", runs(spark, client, plain)),
                    ("declared, warm (goal <= 1.10x)", runs(spark, client, declared)),
                    ("declared, importing it", runs(spark, client, importing)),
                ], args.rounds)  # fmt: skip
            finally:
                spark.settle()
                spark.dependencies.remove_unused()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Benchmark: a run with one 1 MiB file in and one out, against the same run without files.

Run with `python bench/run_files.py [--spark] [--fresh]`. It starts a real `skillfleet api`, a
node worker (and with --spark a Spark worker) as bench/runs.py does, uploads a 1 MiB file once
(with --fresh, a new one before each files run, untimed: a file no worker holds yet), then
measures interleaved (plain, files, files, plain, ...) the same script called with `?wait=`:

- plain: the script reads nothing and writes nothing;
- files: the call places the 1 MiB file in the run's working directory (`files`, by id), the
  script copies it to a new file, and that file comes back by id in the result.

Printed: each side's p50 and the ratio (goal: files within 1.3x plain).
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.runs import NODE, System  # noqa: E402

ROUNDS = 40
SPARK_ROUNDS = 15
GOAL = 1.3
# Both sides start the same interpreter with the same imports; one copies the file it was given.
PLAIN = "import shutil, sys\nprint('ok')\n"
COPY = "import shutil, sys\nshutil.copyfile(sys.argv[1], sys.argv[2])\nprint('ok')\n"


CALLS = iter(range(1_000_000))  # a new turn every 10 calls (a turn may make 50)


def call(client: httpx.Client, skill: str, node: str | None, files: str | None) -> None:
    arguments: dict[str, Any] = {"skill_name": skill, "script": "scripts/run.py"}
    if node is not None:
        arguments["node"] = node
    if files is not None:
        arguments["args"] = ["in.bin", "out.bin"]
        arguments["files"] = {"in.bin": files}
    body = {"arguments": arguments, "chat_id": "files-bench",
            "turn_id": f"turn-{next(CALLS) // 10}"}  # fmt: skip
    envelope = client.post("/api/tools/run_skill_script", params={"wait": 60}, json=body).json()
    assert envelope.get("status") == "done", envelope
    if files is not None:
        assert len(envelope["result"]["files"]) == 1, envelope


def upload(client: httpx.Client) -> str:
    data = os.urandom(1024 * 1024)
    sent = client.post("/api/files", files={"file": ("in.bin", io.BytesIO(data))})
    return str(sent.json()["id"])


def measure(
    client: httpx.Client, prefix: str, node: str | None, file_id: str, rounds: int, fresh: bool
):
    samples: dict[str, list[float]] = {"plain": [], "files": []}
    sides = [("plain", f"{prefix}-plain", None), ("files", f"{prefix}-files", file_id)]
    for _side, skill, files in sides:  # warm: packages fetched, volumes filled
        call(client, skill, node, files)
    for index in range(rounds):
        for side, skill, files in sides if index % 2 == 0 else reversed(sides):
            if files is not None and fresh:
                files = upload(client)
            started = time.perf_counter()
            call(client, skill, node, files)
            samples[side].append(time.perf_counter() - started)
    return samples


def report(what: str, samples: dict[str, list[float]]) -> None:
    plain = statistics.median(samples["plain"]) * 1000
    files = statistics.median(samples["files"]) * 1000
    print(f"  {what:<6} plain {plain:7.1f} ms   1 MiB in and out {files:7.1f} ms   "
          f"ratio {files / plain:.2f}x (goal <= {GOAL}x)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spark", action="store_true")
    parser.add_argument("--fresh", action="store_true", help="a new file for every files run")
    options = parser.parse_args()
    spark, fresh = options.spark, options.fresh
    with tempfile.TemporaryDirectory() as tmp, System(Path(tmp), spark=spark) as system:
        for execution in ("node", "spark") if spark else ("node",):
            system.install(f"{execution}-plain", execution, {"scripts/run.py": PLAIN})
            system.install(f"{execution}-files", execution, {"scripts/run.py": COPY})
        with httpx.Client(base_url=system.url, headers=system.headers, timeout=120) as client:
            file_id = upload(client)
            results = {"node": measure(client, "node", NODE, file_id, ROUNDS, fresh)}
            if spark:
                results["spark"] = measure(client, "spark", None, file_id, SPARK_ROUNDS, fresh)
    which = "a new file each run" if fresh else "the same file each run"
    print(f"A run with one 1 MiB file in and one out ({which}), against the same run without (p50)")
    for what, samples in results.items():
        report(what, samples)


if __name__ == "__main__":
    main()

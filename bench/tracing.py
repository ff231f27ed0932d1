"""Benchmark: a node run with traces on against the same run with traces off, in the same run.

Run with `python bench/tracing.py`. It starts two real systems as bench/runs.py does (a
`skillfleet api` under gunicorn and a node worker each, on temporary SQLite data dirs and two
databases of the Redis at REDIS_URL, default redis://127.0.0.1:6379/14 and the one after it):
one with traces on, sending them to an OTLP/HTTP receiver in this process
(OTEL_EXPORTER_OTLP_ENDPOINT, the SDK's default batching), one without any OTEL_* variable. It
then times the same node run (REST call -> broker -> Celery -> node worker -> subprocess ->
result, `?wait=`) on each, alternating which goes first, and prints the medians, p95s, their
ratio (goal: at most 1.05), the CPU each system spent per run (its API, node worker and the
scripts it ran: on a busy machine the steadier figure) and the spans the receiver got; the
machine's load average before and after says how busy it was.

`--without sqlalchemy,redis` leaves those instrumentations out of the traced side, as
OTEL_PYTHON_DISABLED_INSTRUMENTATIONS does; `--ratio 0.1` keeps a tenth of its calls' traces
(OTEL_TRACES_SAMPLER=parentbased_traceidratio); `--same` runs both sides without traces, to
show what the two systems differ by when they are alike (the bench's own noise).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.runs import NODE, TRIVIAL, Agent, System, median_ms, p95_ms, timed  # noqa: E402

ROUNDS = 150
GOAL = 1.05


class Node(System):
    """The API and a node worker only (no floor, no skeleton)."""

    def __init__(self, root: Path, redis_url: str, extra: dict[str, str]) -> None:
        root.mkdir(parents=True, exist_ok=True)
        super().__init__(root, spark=False)
        self.env.update(REDIS_URL=redis_url, **extra)

    def start_floor(self) -> None:
        return None

    def start_skeleton(self) -> None:
        return None


@contextmanager
def collector() -> Iterator[tuple[str, list[int]]]:
    """An OTLP/HTTP receiver on a loopback port: its endpoint, and the sizes of the batches it
    got."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    spans: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 - the http.server name
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            request = ExportTraceServiceRequest.FromString(body)
            spans.append(sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", spans
    finally:
        server.shutdown()
        server.server_close()


def next_database(url: str) -> str:
    base, _, number = url.rpartition("/")
    return f"{base}/{(int(number or 0) + 1) % 16}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--same", action="store_true", help="both sides without traces (A/A)")
    parser.add_argument(
        "--without", default="", help="OTEL_PYTHON_DISABLED_INSTRUMENTATIONS of the traced side"
    )
    parser.add_argument(
        "--ratio", type=float, help="the traced side keeps this share of calls' traces"
    )
    arguments = parser.parse_args()
    rounds = arguments.rounds
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/14")
    load_before = os.getloadavg()
    with ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-tracing-")))
        endpoint, batches = stack.enter_context(collector())
        off = stack.enter_context(Node(root / "off", redis_url, {}))
        on_env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}
        if arguments.without:
            on_env["OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"] = arguments.without
        if arguments.ratio is not None:
            on_env["OTEL_TRACES_SAMPLER"] = "parentbased_traceidratio"
            on_env["OTEL_TRACES_SAMPLER_ARG"] = str(arguments.ratio)
        if arguments.same:
            on_env = {}
        on = stack.enter_context(Node(root / "on", next_database(redis_url), on_env))
        samples = measure(off, on, root, rounds)
        time.sleep(6)  # the last batch leaves (the SDK's default delay is 5 s)
    report(samples, sum(batches), rounds, load_before, os.getloadavg())


def measure(off: System, on: System, root: Path, rounds: int) -> dict[str, list[float]]:
    sides = {"off": off, "on": on}
    clients = {}
    agents = {}
    for name, system in sides.items():
        system.install("trivial", "node", {"scripts/ok.py": TRIVIAL})
        clients[name] = httpx.Client(base_url=system.url, headers=system.headers, timeout=120)
        agents[name] = Agent(f"bench-tracing-{name}")
        for _ in range(5):  # warm up: packages synced, connections open
            system.run(clients[name], "trivial", "scripts/ok.py", NODE, agents[name])
    samples: dict[str, list[float]] = {"off": [], "on": []}
    before = {name: system.cpu_seconds() for name, system in sides.items()}
    for number in range(rounds):  # interleaved, each first in every other round
        order = ("off", "on") if number % 2 == 0 else ("on", "off")
        for name in order:
            system, client, agent = sides[name], clients[name], agents[name]
            samples[name] += timed(
                lambda s=system, c=client, a=agent: s.run(c, "trivial", "scripts/ok.py", NODE, a),
                1,
            )
    for name, system in sides.items():
        # CPU seconds per run: its API (with its workers), its node worker, the scripts it ran.
        after = system.cpu_seconds()
        for part in ("api", "node worker", "node scripts"):
            samples[f"{name} {part}"] = [(after[part] - before[name][part]) / rounds]
    return samples


def report(
    samples: dict[str, list[float]],
    spans: int,
    rounds: int,
    load_before: tuple[float, float, float],
    load_after: tuple[float, float, float],
) -> None:
    off, on = median_ms(samples["off"]), median_ms(samples["on"])
    ratio = on / off
    verdict = "meets" if ratio <= GOAL else "misses"
    print(f"node run, {rounds} rounds each, interleaved")
    print(f"  traces off: p50 {off:.1f} ms, p95 {p95_ms(samples['off']):.1f} ms")
    print(f"  traces on:  p50 {on:.1f} ms, p95 {p95_ms(samples['on']):.1f} ms")
    print(f"  ratio on/off (p50): {ratio:.3f} ({verdict} the goal of {GOAL})")
    means = statistics.mean(samples["on"]) / statistics.mean(samples["off"])
    print(f"  ratio on/off (mean): {means:.3f}")
    parts = ("api", "node worker", "node scripts")
    cpu = {side: {p: samples[f"{side} {p}"][0] * 1000 for p in parts} for side in ("off", "on")}
    for side, spent in cpu.items():
        shown = ", ".join(f"{part} {ms:.1f}" for part, ms in spent.items())
        print(f"  CPU per run, traces {side}: {sum(spent.values()):.1f} ms ({shown})")
    ratio_cpu = sum(cpu["on"].values()) / sum(cpu["off"].values())
    print(f"  ratio on/off (CPU per run): {ratio_cpu:.3f}")
    print(f"  spans received: {spans} ({spans / (rounds + 5):.1f} per traced run)")
    print(f"  load average (1, 5, 15 min) before: {', '.join(f'{x:.2f}' for x in load_before)}")
    print(f"  load average (1, 5, 15 min) after:  {', '.join(f'{x:.2f}' for x in load_after)}")
    print(f"  cores: {os.cpu_count()}")


if __name__ == "__main__":
    main()

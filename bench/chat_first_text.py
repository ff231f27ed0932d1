"""Benchmark: time to the first text part through `POST /api/chat` against the model server's own
first chunk.

Run with `python bench/chat_first_text.py [--samples 30] [--delays 0,50,250]`. It starts a real
`skillfleet api` (gunicorn, one uvicorn worker) and a control worker on a temporary SQLite data
dir and the Redis at REDIS_URL (default redis://127.0.0.1:6379/13), and a local
OpenAI-compatible stand-in (tests/model_standin.py, in a process of its own) whose first text
chunk comes `delay` ms after the request (a hosted model takes some hundreds of ms; 0 shows the
fixed cost alone). After ten untimed turns, for each delay, interleaved:

- model: a streamed chat-completions request straight to the stand-in, from sending it to the
  first chunk with text;
- chat: `POST /api/chat` (a new chat each time) from sending it to the first `text-delta`
  chunk: the turn queued, the control worker's model request, the turn's Redis stream, the
  live tier's translation into the UI message stream.

It prints the medians, their ratio, the difference, and whether chat <= 1.2 x model + 5 ms
(the goal).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from model_standin import slow  # noqa: E402

from bench.runs import free_port  # noqa: E402

SKILLFLEET = [sys.executable, "-m", "skillfleet"]
GOAL_RATIO, GOAL_MS = 1.2, 5.0
PIECES = 3  # text chunks per answer, `delay` apart
WARM = 10  # turns before the timed ones


class System:
    """`skillfleet api` and a control worker as real processes on a temporary data dir."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("SKILLFLEET_")},
            "SKILLFLEET_DATA_DIR": str(root / "var"),
            "SKILLFLEET_PORT": str(self.port),
            "SKILLFLEET_URL": self.url,
            "SKILLFLEET_EGRESS_ALLOW": "127.0.0.1",  # the stand-in, as an operator allows it
            "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/13"),
            "PYTHONPATH": str(ROOT),
        }
        self.processes: list[subprocess.Popen[bytes]] = []

    def cli(self, *arguments: str) -> str:
        result = subprocess.run(
            [*SKILLFLEET, *arguments], env=self.env, check=True, capture_output=True, text=True
        )
        return result.stdout.strip().splitlines()[-1]

    def start(self, *arguments: str) -> None:
        log = open(self.root / f"{arguments[0]}.log", "wb")  # noqa: SIM115
        command = [*SKILLFLEET, *arguments]
        self.processes.append(subprocess.Popen(command, env=self.env, stdout=log, stderr=log))

    def __enter__(self) -> System:
        self.cli("db", "upgrade")
        owner = self.cli("tokens", "create", "--owner", f"bench-{os.getpid()}", "--role", "owner")
        self.headers = {"Authorization": f"Bearer {owner}"}
        self.start("api", "--workers", "1")
        self.start("worker", "control")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/api/health").status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("the API did not start; see the logs in " + str(self.root))

    def __exit__(self, *exc: object) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


def model_first(client: httpx.Client, url: str) -> float:
    """Seconds from sending a streamed request to the stand-in to its first text chunk."""
    body = {"model": "standin", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    started = time.perf_counter()
    first = 0.0
    with client.stream("POST", f"{url}/chat/completions", json=body) as response:
        for line in response.iter_lines():
            if not first and line.startswith("data: {") and _has_text(line[6:]):
                first = time.perf_counter() - started
    return first


def _has_text(data: str) -> bool:
    choices = json.loads(data).get("choices") or [{}]
    return bool(choices[0].get("delta", {}).get("content"))


def chat_first(client: httpx.Client, system: System, number: int) -> float:
    """Seconds from POST /api/chat to its first text-delta; the answer is read to its end."""
    message = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}
    body = {"id": f"bench-{number}", "messages": [message], "trigger": "submit-message"}
    started = time.perf_counter()
    first = 0.0
    with client.stream(
        "POST", f"{system.url}/api/chat", json=body, headers=system.headers
    ) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if not first and line.startswith('data: {"type":"text-delta"'):
                first = time.perf_counter() - started
    if not first:
        raise RuntimeError(f"no text came through /api/chat; see the logs in {system.root}")
    return first


@contextmanager
def standin_process(script: list[dict[str, Any]]) -> Iterator[str]:
    """The URL of tests/model_standin.py serving `script` in a process of its own: a model
    server is not the client's program, and in one process each waited for the other's turn at
    the interpreter (the stand-in's first chunk 1.0-1.6 ms so, 0.8 ms on its own)."""
    code = (
        "import json, sys\n"
        "from model_standin import model_standin\n"
        "with model_standin(json.loads(sys.stdin.readline())) as model:\n"
        "    print(model.url, flush=True)\n"
        "    sys.stdin.read()  # until the bench closes it\n"
    )
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=environment, text=True,
    )  # fmt: skip
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(json.dumps(script) + "\n")
        process.stdin.flush()
        url = process.stdout.readline().strip()
        if not url:
            raise RuntimeError("the model stand-in did not start")
        yield url
    finally:
        process.stdin.close()
        process.wait(timeout=10)


def measure(system: System, delay_ms: int, samples: int) -> dict[str, Any]:
    every = delay_ms / 1000
    script = [slow(PIECES, every) for _ in range(2 * samples + 2 * WARM)]
    with standin_process(script) as url, httpx.Client(timeout=60) as client:
        setting = {"base_url": url, "name": "standin"}
        answer = client.put(
            f"{system.url}/api/settings/model", json=setting, headers=system.headers
        )
        answer.raise_for_status()
        for number in range(WARM):  # the worker's and the API's first turns, their caches
            chat_first(client, system, -delay_ms * 1000 - number - 1)
            model_first(client, url)
        direct, through = [], []
        for number in range(samples):
            direct.append(model_first(client, url))
            through.append(chat_first(client, system, delay_ms * 1000 + number))
    base, chat = statistics.median(direct) * 1000, statistics.median(through) * 1000
    return {
        "delay_ms": delay_ms, "model_ms": base, "chat_ms": chat, "ratio": chat / base,
        "extra_ms": chat - base, "goal": chat <= GOAL_RATIO * base + GOAL_MS,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--delays", default="0,50,250", help="ms before the model's first chunk")
    options = parser.parse_args()
    load = os.getloadavg()
    print(
        f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs"
    )
    with tempfile.TemporaryDirectory() as folder, System(Path(folder)) as system:
        print("delay ms | model first chunk ms | chat first text ms | ratio | extra ms | goal")
        for delay in (int(d) for d in options.delays.split(",")):
            row = measure(system, delay, options.samples)
            print(
                f"{row['delay_ms']:8} | {row['model_ms']:20.1f} | {row['chat_ms']:18.1f} | "
                f"{row['ratio']:5.2f} | {row['extra_ms']:8.1f} | "
                f"{'met' if row['goal'] else 'missed'}"
            )
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()

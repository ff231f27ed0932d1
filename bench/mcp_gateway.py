"""Benchmark: the MCP gateway against the REST tool route it calls, in the same run.

Run with `python bench/mcp_gateway.py` (not bench/mcp.py: that name would shadow the `mcp`
package for a script run from this folder). It starts a real `skillfleet api` (gunicorn) and
a node worker on a temporary SQLite data dir and the Redis at REDIS_URL (default
redis://127.0.0.1:6379/14), as bench/runs.py does, then measures, interleaved (REST, MCP, MCP,
REST, ...):

- list_skills: POST /api/tools/list_skills against `tools/call list_skills` on /mcp, with the
  official SDK's client (streamable HTTP, the protocol version it negotiates);
- a trivial run: POST /api/tools/run_skill_script?wait=60 against `tools/call
  run_skill_script` on /mcp, which follows the run's events to its exit.

Both sides use the same owner token, one chat, and a new turn every TURN_CALLS calls. The
figure is the ratio of the medians (goal: MCP within 1.5x REST).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx2  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp_types import RequestParamsMeta  # noqa: E402

from bench.runs import NODE, TRIVIAL, TURN_CALLS, System  # noqa: E402

ROUNDS = 200  # list_skills calls of each side
RUN_ROUNDS = 40  # runs of each side

Timed = Callable[[int], Awaitable[None]]


async def measure(sides: dict[str, Timed], rounds: int) -> dict[str, list[float]]:
    """Each side `rounds` times, alternated A B B A so drift hits both alike."""
    samples: dict[str, list[float]] = {name: [] for name in sides}
    order = list(sides)
    for index in range(rounds):
        for name in order if index % 2 == 0 else reversed(order):
            started = time.perf_counter()
            await sides[name](index)
            samples[name].append(time.perf_counter() - started)
    return samples


def turn_of(side: str, index: int) -> str:
    return f"{side}-turn-{index // TURN_CALLS}"


async def bench(system: System) -> dict[str, dict[str, list[float]]]:
    token = system.headers["Authorization"]
    rest = httpx.AsyncClient(base_url=system.url, headers=system.headers, timeout=90)
    http = httpx2.AsyncClient(headers={"Authorization": token}, timeout=90)
    run_arguments = {"skill_name": "trivial", "script": "scripts/ok.py", "node": NODE}
    async with rest, Client(streamable_http_client(f"{system.url}/mcp", http_client=http)) as mcp:

        async def rest_call(tool: str, arguments: dict[str, Any], index: int) -> None:
            body = {"arguments": arguments, "chat_id": "rest", "turn_id": turn_of("rest", index)}
            answer = await rest.post(f"/api/tools/{tool}", params={"wait": 60}, json=body)
            assert answer.json()["status"] == "done", answer.text

        async def mcp_call(tool: str, arguments: dict[str, Any], index: int) -> None:
            sent = {"skillfleet/chat_id": "mcp", "skillfleet/turn_id": turn_of("mcp", index)}
            meta = cast(RequestParamsMeta, sent)  # an open map; mypy doesn't know extra_items
            result = await mcp.call_tool(tool, arguments, meta=meta)
            assert not result.is_error, result.content

        listing = await measure(
            {
                "rest": lambda i: rest_call("list_skills", {}, i),
                "mcp": lambda i: mcp_call("list_skills", {}, i),
            },
            ROUNDS,
        )
        runs = await measure(
            {
                "rest": lambda i: rest_call("run_skill_script", run_arguments, i),
                "mcp": lambda i: mcp_call("run_skill_script", run_arguments, i),
            },
            RUN_ROUNDS,
        )
    return {"list_skills": listing, "trivial run": runs}


def report(results: dict[str, dict[str, list[float]]]) -> None:
    print("MCP gateway against REST (p50, interleaved)")
    for what, samples in results.items():
        rest = statistics.median(samples["rest"]) * 1000
        mcp = statistics.median(samples["mcp"]) * 1000
        print(f"  {what:<12} REST {rest:7.1f} ms   MCP {mcp:7.1f} ms   ratio {mcp / rest:.2f}x")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, System(Path(tmp), spark=False) as system:
        system.install("trivial", "node", {"scripts/ok.py": TRIVIAL})
        results = asyncio.run(bench(system))
    report(results)


if __name__ == "__main__":
    main()

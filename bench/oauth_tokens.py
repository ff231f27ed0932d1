"""Benchmark: an MCP `tools/call` with an OAuth access token against the same call with a
static agent token, in the same run.

Run with `.venv/bin/python bench/oauth_tokens.py`. It starts a real `skillfleet api` (gunicorn)
and a node worker on a temporary SQLite data dir and the Redis at REDIS_URL (default
redis://127.0.0.1:6379/14), as bench/runs.py does; creates a static agent token with the CLI
and signs a host in through OAuth (registration, authorize, the consent page's forms, the code
exchanged with its PKCE verifier) for the same owner; then calls `list_skills` over /mcp with
the official SDK's client, interleaved (static, OAuth, OAuth, static, ...), a new turn every
TURN_CALLS calls. The figure is the
ratio of the medians (goal: OAuth within 1.05x static).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlencode

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import httpx2  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp_types import RequestParamsMeta  # noqa: E402
from oauthhost import REDIRECT, consent, query  # noqa: E402

from bench.mcp_gateway import measure, turn_of  # noqa: E402
from bench.runs import NODE, TURN_CALLS, System  # noqa: E402

ROUNDS = 300


def oauth_token(url: str, owner_token: str) -> str:
    """An access token for /mcp, got as a host gets one (the owner's consent posted)."""
    registration = {
        "client_name": "Bench Host",
        "redirect_uris": [REDIRECT],
        "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
    }
    client_id = httpx.post(f"{url}/oauth/register", json=registration).json()["client_id"]
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    params = {
        "response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT,
        "code_challenge": challenge.decode().rstrip("="), "code_challenge_method": "S256",
        "state": "bench", "resource": f"{url}/mcp",
    }  # fmt: skip
    with httpx.Client(timeout=30) as browser:
        answer = consent(browser, f"{url}/oauth/authorize?{urlencode(params)}", owner_token)
    form = {
        "grant_type": "authorization_code", "code": query(answer)["code"],
        "redirect_uri": REDIRECT, "client_id": client_id, "code_verifier": verifier,
    }  # fmt: skip
    tokens = httpx.post(f"{url}/oauth/token", data=form)
    assert tokens.status_code == 200, tokens.text
    access: str = tokens.json()["access_token"]
    return access


async def bench(url: str, tokens: dict[str, str]) -> dict[str, list[float]]:
    clients: dict[str, Any] = {}
    for side, token in tokens.items():
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=90)
        clients[side] = Client(streamable_http_client(f"{url}/mcp", http_client=http))
    async with clients["static"] as static, clients["oauth"] as oauth:
        connected = {"static": static, "oauth": oauth}

        def call(side: str) -> Any:
            async def one(index: int) -> None:
                sent = {"skillfleet/chat_id": side, "skillfleet/turn_id": turn_of(side, index)}
                meta = cast(RequestParamsMeta, sent)
                result = await connected[side].call_tool("list_skills", {}, meta=meta)
                assert not result.is_error, result.content

            return one

        for side in connected:  # warm both before measuring (a turn of their own)
            for index in range(10):
                await call(side)(ROUNDS + TURN_CALLS + index)
        return await measure({side: call(side) for side in connected}, ROUNDS)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, System(Path(tmp), spark=False) as system:
        owner = system.headers["Authorization"].removeprefix("Bearer ")
        static = system.cli("tokens", "create", "--owner", NODE, "--role", "agent")
        samples = asyncio.run(
            bench(system.url, {"static": static, "oauth": oauth_token(system.url, owner)})
        )
    static_ms = statistics.median(samples["static"]) * 1000
    oauth_ms = statistics.median(samples["oauth"]) * 1000
    print("tools/call list_skills over /mcp (p50, interleaved)")
    print(f"  static agent token {static_ms:7.1f} ms   OAuth token {oauth_ms:7.1f} ms   "
          f"ratio {oauth_ms / static_ms:.3f}x")  # fmt: skip


if __name__ == "__main__":
    main()

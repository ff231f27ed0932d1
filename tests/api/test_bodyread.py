"""The event loop's reading of small bodies (api/bodyread.py), on its own."""

from __future__ import annotations

import asyncio
from typing import Any

from api.bodyread import PREREAD_MAX_BYTES, BodyBudget, read_body, small_body_length


def scope_with(*headers: tuple[bytes, bytes]) -> dict[str, Any]:
    return {"type": "http", "headers": list(headers)}


def test_only_a_declared_body_within_the_limit_is_read_on_the_loop():
    length = b"content-length"
    assert small_body_length(scope_with((length, b"100"))) == 100
    assert small_body_length(scope_with((length, str(PREREAD_MAX_BYTES).encode()))) == (
        PREREAD_MAX_BYTES
    )
    for refused in (b"0", str(PREREAD_MAX_BYTES + 1).encode(), b"-5", b"12x", b""):
        assert small_body_length(scope_with((length, refused))) is None, refused
    assert small_body_length(scope_with((b"transfer-encoding", b"chunked"))) is None
    assert small_body_length({"type": "http"}) is None


def test_the_budget_bounds_the_bytes_held_at_once():
    budget = BodyBudget(most=100)
    assert budget.take(60) and not budget.take(41) and budget.take(40)
    assert budget.held == 100
    budget.give(60)
    assert budget.take(60) and budget.held == 100


def messages(*sent: dict[str, Any]):
    queue = list(sent)

    async def receive() -> dict[str, Any]:
        return queue.pop(0)

    return receive


def test_a_body_is_joined_from_its_pieces_and_a_client_gone_midway_gives_none():
    pieces = messages(
        {"type": "http.request", "body": b"ab", "more_body": True},
        {"type": "http.request", "body": b"", "more_body": True},
        {"type": "http.request", "body": b"cd", "more_body": False},
    )
    assert asyncio.run(read_body(pieces)) == b"abcd"
    gone = messages(
        {"type": "http.request", "body": b"ab", "more_body": True}, {"type": "http.disconnect"}
    )
    assert asyncio.run(read_body(gone)) is None

"""The call limit per turn holds however the calls race."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from flask import Flask

from broker.turns import turn_key
from store.limits import MAX_CALLS_PER_TURN

pytestmark = pytest.mark.both_databases  # concurrent writes


def fire(app: Flask, auth: dict[str, str], bodies: list[dict[str, object]]) -> Counter[str]:
    def one(body: dict[str, object]) -> str:
        response = app.test_client().post("/api/tools/list_skills", headers=auth, json=body)
        assert response.status_code == 200, response.json
        return str(response.json["status"])

    with ThreadPoolExecutor(max_workers=16) as pool:
        return Counter(pool.map(one, bodies))


def test_eighty_concurrent_calls_of_one_turn_admit_exactly_fifty(app, auth):
    statuses = fire(app, auth, [{"arguments": {}, "turn_id": "race"}] * 80)
    assert statuses == {"done": MAX_CALLS_PER_TURN, "denied": 80 - MAX_CALLS_PER_TURN}
    fresh = app.test_client().post(
        "/api/tools/list_skills", headers=auth, json={"arguments": {}, "turn_id": "next"}
    )
    assert fresh.json["status"] == "done"


def test_calls_without_a_turn_id_count_against_their_chats_turn(app, auth, other_auth):
    statuses = fire(app, auth, [{"arguments": {}, "chat_id": "no-turns"}] * 60)
    assert statuses == {"done": 50, "denied": 10}
    # Another chat, and another owner's chat of the same id, have turns of their own.
    assert fire(app, auth, [{"arguments": {}, "chat_id": "other"}])["done"] == 1
    assert fire(app, other_auth, [{"arguments": {}, "chat_id": "no-turns"}])["done"] == 1


def test_the_turn_of_a_call_is_its_turn_id_else_its_chat_for_the_hour():
    from datetime import UTC, datetime

    at = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
    assert turn_key("t-1", 5, at) == "turn:t-1"
    assert turn_key(None, 5, at) == "chat:5:2026-12-01T09"
    assert turn_key(None, None, at) is None

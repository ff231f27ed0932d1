"""Cursor pages: exact while rows are inserted, and a cursor that is not this list's own (forged,
of another format, another owner, route or filters) refused with 400 `invalid_cursor`."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import uuid
from datetime import datetime, timedelta

import pytest
from factories import owner_id_of
from pages import cursor_of, next_link, walk
from test_frontend_contract import add_run

from api.paging import COUNT_CAP, _cursor_key
from store.db import transaction
from store.models import ToolCall, utcnow


def add_call(services, owner: int, **values: object) -> str:
    row = {
        "id": str(uuid.uuid4()),
        "owner_id": owner,
        "tool": "list_skills",
        "tier": "read",
        "status": "done",
        "created_at": utcnow(),
    }
    row.update(values)
    with transaction(services.sessions) as session:
        session.add(ToolCall(**row))
    return str(row["id"])


ADD = {"runs": (add_run, "run_id"), "calls": (add_call, "call_id")}


def newest_first(rows: list[dict[str, object]], id_field: str) -> bool:
    keys = [(datetime.fromisoformat(str(r["created_at"])), str(r[id_field])) for r in rows]
    return all(a > b for a, b in zip(keys, keys[1:], strict=False))


@pytest.mark.both_databases
@pytest.mark.parametrize("listed", ADD.keys())
def test_pages_repeat_no_row_and_skip_none_while_rows_are_inserted(client, auth, services, listed):
    add, id_field = ADD[listed]
    alice = owner_id_of(services)
    base = utcnow() - timedelta(days=1)
    # Three rows to each instant: a page boundary falls between rows of the same created_at.
    there = {add(services, alice, created_at=base - timedelta(seconds=i // 3)) for i in range(45)}
    stop = threading.Event()
    raced: list[str] = []

    def insert_meanwhile() -> None:
        while not stop.is_set():
            raced.append(add(services, alice, created_at=utcnow()))

    racer = threading.Thread(target=insert_meanwhile)
    racer.start()
    seen: list[dict[str, object]] = []
    address: str | None = f"/api/{listed}?page_size=4"
    try:
        while address is not None:
            response = client.get(address, headers=auth)
            assert response.status_code == 200, response.json
            seen += response.json
            address = next_link(response)
            if seen and address is not None:
                # Between two pages: a newer row, one at the boundary's own instant (on either
                # side of it by id), and an older one than all.
                boundary = datetime.fromisoformat(str(seen[-1]["created_at"]))
                add(services, alice, created_at=utcnow())
                add(services, alice, created_at=boundary, id=f"{uuid.uuid4()}")
                add(services, alice, created_at=base - timedelta(days=3))
    finally:
        stop.set()
        racer.join()
    ids = [str(row[id_field]) for row in seen]
    assert len(ids) == len(set(ids)), "a row came twice"
    assert there <= set(ids), "a row there from the start was skipped"
    assert newest_first(seen, id_field)
    assert raced, "nothing was inserted while the pages were read"


@pytest.fixture
def two_pages(client, auth, services) -> str:
    """A cursor to the second page of alice's runs (three of them, two a page)."""
    alice = owner_id_of(services)
    for _ in range(3):
        add_run(services, alice)
    return cursor_of(client.get("/api/runs?page_size=2", headers=auth))


def refused(response) -> bool:
    return response.status_code == 400 and response.json["code"] == "invalid_cursor"


def signed(services, body: object) -> str:
    """A cursor signed with the server's own key: only the server could make it."""
    text = json.dumps(body, separators=(",", ":")).encode()
    mac = hmac.new(_cursor_key(services.settings.keys_dir), text, hashlib.sha256).digest()

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).decode().rstrip("=")

    return f"{b64(text)}.{b64(mac)}"


def test_the_cursor_of_a_page_leads_to_the_next_and_the_last_page_has_no_link(
    client, auth, two_pages
):
    second = client.get(f"/api/runs?page_size=2&cursor={two_pages}", headers=auth)
    assert second.status_code == 200 and len(second.json) == 1
    assert next_link(second) is None
    assert "X-Total-Count" not in second.headers  # counted on the first page only


def test_a_changed_or_made_up_cursor_is_refused(client, auth, services, two_pages):
    body, mac = two_pages.split(".")
    decoded = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    widened = json.loads(decoded)
    widened["k"][1] = "zzzz"  # a later id: the page would move
    changed = base64.urlsafe_b64encode(json.dumps(widened).encode()).decode().rstrip("=")
    for cursor in (
        "abc",
        f"{changed}.{mac}",
        f"{body}.{mac[:-2]}",
        f"{body}.{'A' * len(mac)}",
        f"{body}{mac}",
        f"{body}.{mac}.{mac}",
        "%00",
        "..",
        "é.é",
    ):
        response = client.get(f"/api/runs?page_size=2&cursor={cursor}", headers=auth)
        assert refused(response), (cursor, response.json)


def test_a_signed_cursor_of_another_format_or_shape_is_refused(client, auth, services, two_pages):
    alice = owner_id_of(services)
    real = json.loads(base64.urlsafe_b64decode(two_pages.split(".")[0] + "=="))
    for body in (
        {**real, "v": 0},  # a format of before
        {**real, "v": 2},
        {k: v for k, v in real.items() if k != "k"},
        {**real, "k": real["k"][:1]},
        {**real, "k": [*real["k"], 1]},
        {**real, "k": [{"t": "yesterday"}, "x"]},
        {**real, "k": [[1], "x"]},
        {**real, "k": None},
        {**real, "k": ["2026-12-06T10:00:00+00:00", "x"]},  # a time as text
        {**real, "k": [1, "x"]},
        {**real, "k": {"a": 1, "b": 2}},
        {**real, "k": "ab"},
        {**real, "o": str(alice)},
        [1, 2],
    ):
        response = client.get(f"/api/runs?cursor={signed(services, body)}", headers=auth)
        assert refused(response), (body, response.json)
    assert client.get(f"/api/runs?cursor={signed(services, real)}", headers=auth).status_code == 200


def test_another_owners_cursor_is_refused_both_ways(client, auth, other_auth, services, two_pages):
    assert refused(client.get(f"/api/runs?page_size=2&cursor={two_pages}", headers=other_auth))
    bob = owner_id_of(services, "bob")
    for _ in range(3):
        add_run(services, bob)
    bobs = cursor_of(client.get("/api/runs?page_size=2", headers=other_auth))
    assert refused(client.get(f"/api/runs?page_size=2&cursor={bobs}", headers=auth))
    assert client.get(f"/api/runs?page_size=2&cursor={bobs}", headers=other_auth).status_code == 200


def test_the_owners_agent_follows_the_owners_cursor_and_no_token_is_asked_first(
    client, auth, agent_auth, two_pages
):
    assert client.get(f"/api/runs?page_size=2&cursor={two_pages}", headers=agent_auth).json
    assert client.get(f"/api/runs?page_size=2&cursor={two_pages}").status_code == 401
    assert client.get("/api/runs?cursor=forged").status_code == 401


def test_a_cursor_is_refused_on_another_list_or_with_other_filters(
    client, auth, services, two_pages
):
    assert refused(client.get(f"/api/calls?cursor={two_pages}", headers=auth))
    assert refused(client.get(f"/api/runs?status=failed&cursor={two_pages}", headers=auth))
    alice = owner_id_of(services)
    for _ in range(3):
        add_run(services, alice, status="failed")
    failed = cursor_of(client.get("/api/runs?status=failed&page_size=2", headers=auth))
    assert refused(client.get(f"/api/runs?cursor={failed}", headers=auth))
    assert refused(client.get(f"/api/runs?status=succeeded&cursor={failed}", headers=auth))
    # The page size may change between pages: it is not a filter.
    kept = client.get(f"/api/runs?status=failed&page_size=5&cursor={failed}", headers=auth)
    assert kept.status_code == 200 and len(kept.json) == 1


def test_a_cursor_past_its_length_limit_or_a_page_size_past_the_limit_is_a_bad_request(
    client, auth
):
    for query in ("cursor=" + "a" * 2001, "cursor=", "page_size=1001", "page_size=-1"):
        response = client.get(f"/api/runs?{query}", headers=auth)
        assert response.status_code == 422, (query, response.json)
        assert response.json["code"] == "invalid_request"
    assert client.get("/api/runs?page_size=1000", headers=auth).status_code == 200


def test_the_first_page_counts_up_to_the_cap_and_says_when_there_are_more(client, auth, services):
    alice = owner_id_of(services)
    now = utcnow()
    rows = [
        {"id": str(uuid.uuid4()), "owner_id": alice, "tool": "list_skills", "tier": "read",
         "status": "done", "created_at": now - timedelta(seconds=i)}
        for i in range(COUNT_CAP + 1)
    ]  # fmt: skip
    with transaction(services.sessions) as session:
        session.execute(ToolCall.__table__.insert(), rows[:COUNT_CAP])
    assert client.get("/api/calls?page_size=1", headers=auth).headers["X-Total-Count"] == "1000"
    with transaction(services.sessions) as session:
        session.execute(ToolCall.__table__.insert(), rows[COUNT_CAP:])
    assert client.get("/api/calls?page_size=1", headers=auth).headers["X-Total-Count"] == "1000+"
    pages = walk(client, "/api/calls?page_size=1000", auth)
    assert [len(page) for page in pages] == [1000, 1]


def test_a_cursor_of_a_list_held_in_memory_is_bound_to_its_owner_and_list_too(
    client, auth, other_auth
):
    made = client.post("/api/tokens", headers=auth, json={"role": "agent", "label": "bot"})
    assert made.status_code == 201
    cursor = cursor_of(client.get("/api/tokens?page_size=1", headers=auth))
    assert refused(client.get(f"/api/tokens?page_size=1&cursor={cursor}", headers=other_auth))
    assert refused(client.get(f"/api/webhooks?page_size=1&cursor={cursor}", headers=auth))
    second = client.get(f"/api/tokens?page_size=1&cursor={cursor}", headers=auth)
    assert second.status_code == 200 and [t["label"] for t in second.json] == ["bot"]


def test_the_tools_page_by_their_place_in_the_list(client, auth):
    everything = client.get("/api/tools", headers=auth).json
    pages = walk(client, "/api/tools?page_size=3", auth)
    assert len(pages) > 1 and [tool for page in pages for tool in page] == everything

"""Every list route pages the same way (by cursor), and the run and call filters a frontend
relies on."""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from datetime import timedelta

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from factories import owner_id_of
from pages import next_link, walk
from test_approvals import WIPE, install, run
from test_frontend_contract import add_run

from store.db import transaction
from store.lifecycle import jobruns
from store.limits import (
    DEFAULT_PAGE_SIZE,
    KEPT_JOB_RUNS,
    MAX_JOBS,
    MAX_MODEL_SOURCES,
    MAX_OWNER_TOKENS,
    MAX_PUSH_SUBSCRIPTIONS,
    MAX_WEBHOOKS,
)
from store.models import ToolCall, utcnow

PROBE = {"cron": "0 6 * * *", "steps": [{"tool": "list_skills"}]}


def two_jobs(client, auth, services) -> str:
    for name in ("beta", "alpha"):
        made = client.post("/api/jobs", headers=auth, json={"name": name, **PROBE})
        assert made.status_code == 201, made.json
    return "/api/jobs"


def two_job_runs(client, auth, services) -> str:
    job = client.post("/api/jobs", headers=auth, json={"name": "probe", **PROBE}).json
    for worker in ("worker-1", "worker-2"):
        started = client.post(f"/api/jobs/{job['id']}/run", headers=auth)
        assert started.status_code == 202, started.json
        with transaction(services.sessions) as session:  # what the control worker does
            claimed = jobruns.claim(session, started.json["job_run_id"], worker)
            assert claimed is not None and jobruns.succeed(session, claimed, worker)
    return f"/api/jobs/{job['id']}/runs"


def two_tokens(client, auth, services) -> str:
    made = client.post("/api/tokens", headers=auth, json={"role": "agent", "label": "bot"})
    assert made.status_code == 201, made.json
    return "/api/tokens"  # the owner's own token and the agent's


@pytest.fixture
def settings(settings):
    """Webhooks may go to loopback here, as an operator allows a test host."""
    return settings.with_overrides(egress_allow=("127.0.0.1",))


def two_webhooks(client, auth, services) -> str:
    for path in ("/a", "/b"):
        body = {"url": f"http://127.0.0.1:9{path}", "events": ["*"]}
        assert client.post("/api/webhooks", headers=auth, json=body).status_code == 201
    return "/api/webhooks"


def browser_keys() -> dict[str, str]:
    public = ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )  # fmt: skip
    encode = base64.urlsafe_b64encode
    return {"p256dh": encode(public).decode(), "auth": encode(os.urandom(16)).decode()}


def two_subscriptions(client, auth, services) -> str:
    for name in ("a", "b"):
        body = {"endpoint": f"https://fcm.googleapis.com/fcm/send/{name}", "keys": browser_keys()}
        made = client.post("/api/push/subscriptions", headers=auth, json=body)
        assert made.status_code == 201, made.json
    return "/api/push/subscriptions"


LISTS: dict[str, Callable[..., str]] = {
    "jobs": two_jobs,
    "job runs": two_job_runs,
    "tokens": two_tokens,
    "webhooks": two_webhooks,
    "push subscriptions": two_subscriptions,
}


@pytest.mark.parametrize("setup", LISTS.values(), ids=LISTS.keys())
def test_page_size_one_gives_one_item_the_count_and_a_link_to_the_next_in_a_stable_order(
    client, auth, services, setup
):
    path = setup(client, auth, services)
    everything = client.get(path, headers=auth)
    assert everything.status_code == 200 and len(everything.json) == 2
    assert next_link(everything) is None and everything.headers["X-Total-Count"] == "2"
    first = client.get(f"{path}?page_size=1", headers=auth)
    assert first.status_code == 200
    assert first.json == everything.json[:1]
    assert first.headers["X-Total-Count"] == "2"
    link = next_link(first)
    assert link is not None and link.startswith(f"{path}?page_size=1&cursor=")
    second = client.get(link, headers=auth)
    assert second.json == everything.json[1:]
    assert next_link(second) is None
    assert walk(client, f"{path}?page_size=1", auth) == [[item] for item in everything.json]


@pytest.mark.parametrize("setup", LISTS.values(), ids=LISTS.keys())
@pytest.mark.parametrize("query", ["page_size=100000", "page_size=0", "page=2", "page_size=x"])
def test_a_bad_page_size_or_a_page_number_is_refused_like_every_list(
    client, auth, services, setup, query
):
    path = setup(client, auth, services)
    response = client.get(f"{path}?{query}", headers=auth)
    assert response.status_code == 422, response.json
    assert response.json["code"] == "invalid_request"
    assert set(response.json["errors"]["query"]) <= {"page", "page_size"}


def test_capped_lists_fit_one_default_page_which_the_console_and_cli_read():
    # The console and `skillfleet jobs` read only the first page of these lists.
    for cap in (MAX_JOBS, KEPT_JOB_RUNS, MAX_OWNER_TOKENS, MAX_WEBHOOKS, MAX_PUSH_SUBSCRIPTIONS,
                MAX_MODEL_SOURCES):  # fmt: skip
        assert cap <= DEFAULT_PAGE_SIZE


def test_the_openapi_document_pages_every_new_list(client):
    paths = client.get("/api/openapi.json").json["paths"]
    for path in ("/api/jobs", "/api/jobs/{job_id}/runs", "/api/tokens", "/api/webhooks",
                 "/api/push/subscriptions", "/api/model-sources"):  # fmt: skip
        listing = paths[path]["get"]
        assert {"cursor", "page_size"} <= {p["name"] for p in listing["parameters"]}, path
        assert "page" not in {p["name"] for p in listing["parameters"]}, path
        assert {"Link", "X-Total-Count"} <= set(listing["responses"]["200"]["headers"]), path


def test_runs_are_filtered_by_the_chat_of_the_call_that_started_them(client, auth, services):
    def call_in(chat: str) -> dict[str, object]:
        """The call's id and its chat's, as the dispatcher gives them to the call's run."""
        body = {"arguments": {}, "chat_id": chat}
        call_id = client.post("/api/tools/list_skills", headers=auth, json=body).json["call_id"]
        with transaction(services.sessions) as session:
            call = session.get(ToolCall, call_id)
            assert call is not None and call.chat_id is not None
            return {"call_id": call_id, "chat_id": call.chat_id}

    alice = owner_id_of(services)
    now = utcnow()
    in_a = add_run(services, alice, **call_in("chat-a"), created_at=now)
    older_in_a = add_run(
        services, alice, **call_in("chat-a"), created_at=now - timedelta(minutes=1)
    )
    add_run(services, alice, **call_in("chat-b"))
    add_run(services, alice)  # no call, no chat

    def ids(query: str) -> list[str]:
        response = client.get(f"/api/runs?{query}", headers=auth)
        assert response.status_code == 200, response.json
        return [r["run_id"] for r in response.json]

    assert ids("chat=chat-a") == [in_a, older_in_a]
    assert ids("chat=chat-a&page_size=1") == [in_a]
    assert ids("chat=chat-c") == []


def test_calls_are_filtered_by_skill_node_and_since(client, auth, services):
    install(client, auth, "wiper", WIPE)
    install(client, auth, "eraser", WIPE)
    old = run(client, auth, arguments={"node": "web01"})["call_id"]
    on_db = run(client, auth, arguments={"node": "db01"})["call_id"]
    eraser = run(client, auth, name="eraser", arguments={"node": "web01"})["call_id"]
    now = utcnow()
    ages = {old: timedelta(hours=2), on_db: timedelta(minutes=2), eraser: timedelta(minutes=1)}
    with transaction(services.sessions) as session:
        for call_id, age in ages.items():
            session.get(ToolCall, call_id).created_at = now - age

    def ids(query: str) -> list[str]:
        response = client.get(f"/api/calls?{query}", headers=auth)
        assert response.status_code == 200, response.json
        return [c["call_id"] for c in response.json]

    assert ids("") == [eraser, on_db, old]
    assert ids("skill=wiper") == [on_db, old]
    assert ids("skill=eraser") == [eraser]
    assert ids("node=web01") == [eraser, old]
    assert ids("node=db01&skill=wiper") == [on_db]
    since = (now - timedelta(minutes=30)).isoformat().replace("+", "%2B")
    assert ids(f"since={since}") == [eraser, on_db]
    assert ids(f"since={since}&node=web01") == [eraser]
    refused = client.get("/api/calls?since=yesterday", headers=auth)
    assert refused.status_code == 422 and refused.json["code"] == "invalid_request"


@pytest.mark.both_databases
def test_runs_and_calls_made_at_the_same_instant_page_once_each_in_a_fixed_order(
    client, auth, services
):
    # Newest first, and among rows of the same instant by id: a page boundary between them
    # can neither repeat one nor skip one.
    alice = owner_id_of(services)
    now = utcnow()
    runs = [add_run(services, alice, id=f"run-{letter}", created_at=now) for letter in "abc"]
    body = {"arguments": {}}
    calls = [
        str(client.post("/api/tools/list_skills", headers=auth, json=body).json["call_id"])
        for _ in range(3)
    ]
    with transaction(services.sessions) as session:
        for call_id in calls:
            session.get(ToolCall, call_id).created_at = now

    def paged(path: str) -> list[str]:
        pages = walk(client, f"{path}?page_size=1", auth)
        assert [len(page) for page in pages] == [1, 1, 1]
        return [page[0]["run_id" if "runs" in path else "call_id"] for page in pages]

    assert paged("/api/runs") == sorted(runs, reverse=True)
    assert paged("/api/calls") == sorted(calls, reverse=True)

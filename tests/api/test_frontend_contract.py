"""What a browser frontend relies on: run and call lists, pagination, the event feed, CORS."""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from pages import next_link, walk
from test_approvals import WIPE, answer, install, run

from api import create_app
from api.services import Services
from relay import events as owner_events
from relay import naming
from store.db import transaction
from store.lifecycle import jobruns
from store.models import JobRun, Owner, Run, utcnow
from store.settings import Settings


@pytest.fixture(autouse=True)
def fresh_feeds(redis_client: redis.Redis) -> None:
    """Owner ids restart with each database: drop event streams earlier tests left."""
    for key in redis_client.scan_iter(match=naming.owner_events(0).replace(":0:", ":*:")):
        redis_client.delete(key)


def owner_id(services: Services, name: str = "alice") -> int:
    with services.sessions() as session:
        found = session.query(Owner).filter_by(name=name).one()
        return found.id


def add_run(services: Services, owner: int, **values: object) -> str:
    row = {
        "id": str(uuid.uuid4()),
        "owner_id": owner,
        "skill_name": "disk-report",
        "skill_hash": "a" * 64,
        "script": "scripts/report.py",
        "arguments": {},
        "execution": "node",
        "queue": "node.web01",
        "node": "web01",
        "status": "succeeded",
        "timeout_seconds": 300,
        "created_at": utcnow(),
    }
    row.update(values)
    with transaction(services.sessions) as session:
        session.add(Run(**row))
    return str(row["id"])


def test_runs_are_listed_newest_first_and_filtered_by_status_skill_node_and_since(
    client, auth, other_auth, services
):
    alice = owner_id(services)
    now = utcnow()
    old = add_run(services, alice, created_at=now - timedelta(hours=2))
    failed = add_run(services, alice, status="failed", created_at=now - timedelta(minutes=5))
    other_skill = add_run(services, alice, skill_name="log-tail", node="db01", created_at=now)
    bob = owner_id(services, "bob")
    add_run(services, bob)

    everything = client.get("/api/runs", headers=auth)
    assert everything.status_code == 200
    assert [r["run_id"] for r in everything.json] == [other_skill, failed, old]

    def ids(query: str) -> list[str]:
        response = client.get(f"/api/runs?{query}", headers=auth)
        assert response.status_code == 200, response.json
        return [r["run_id"] for r in response.json]

    assert ids("status=failed") == [failed]
    assert ids("skill=log-tail") == [other_skill]
    assert ids("node=web01") == [failed, old]
    since = (now - timedelta(minutes=30)).isoformat()
    assert ids(f"since={since.replace('+', '%2B')}") == [other_skill, failed]
    assert client.get("/api/runs", headers=other_auth).json[0]["run_id"] not in (old, failed)


def test_an_unknown_run_state_filter_is_refused_with_the_error_shape(client, auth):
    response = client.get("/api/runs?status=exploded", headers=auth)
    assert response.status_code == 422
    assert response.json["code"] == "invalid_request"
    assert "status" in json.dumps(response.json["errors"])


def test_page_size_one_gives_one_item_the_count_and_the_next_page_link(client, auth):
    install(client, auth, "wiper", WIPE)
    first = client.get("/api/skills?page_size=1", headers=auth)
    assert first.status_code == 200
    assert len(first.json) == 1
    everything = client.get("/api/skills", headers=auth).json
    assert first.headers["X-Total-Count"] == str(len(everything))
    assert len(everything) > 1 and next_link(first) is not None
    assert first.json[0]["name"] == everything[0]["name"]
    pages = walk(client, "/api/skills?page_size=1", auth)
    assert [page[0]["name"] for page in pages] == [skill["name"] for skill in everything]


def test_a_page_size_past_the_limit_is_refused(client, auth):
    response = client.get("/api/approvals?page_size=100000", headers=auth)
    assert response.status_code == 422
    assert response.json["code"] == "invalid_request"


def test_calls_are_listed_with_status_tool_and_chat_filters_and_pages(client, auth, services):
    install(client, auth, "wiper", WIPE)
    asked = run(client, auth, chat="chat-a")
    listed = client.post(
        "/api/tools/list_skills", headers=auth, json={"arguments": {}, "chat_id": "chat-b"}
    ).json

    response = client.get("/api/calls", headers=auth)
    assert response.status_code == 200
    assert [c["call_id"] for c in response.json] == [listed["call_id"], asked["call_id"]]
    pending = client.get("/api/calls?status=pending_approval", headers=auth).json
    assert [c["call_id"] for c in pending] == [asked["call_id"]]
    in_chat = client.get("/api/calls?chat=chat-b", headers=auth).json
    assert [c["call_id"] for c in in_chat] == [listed["call_id"]]
    by_tool = client.get("/api/calls?tool=run_skill_script", headers=auth).json
    assert [c["call_id"] for c in by_tool] == [asked["call_id"]]
    first_page = client.get("/api/calls?page_size=1", headers=auth)
    assert first_page.headers["X-Total-Count"] == "2"
    second_page = client.get(next_link(first_page), headers=auth)
    assert [c["call_id"] for c in second_page.json] == [asked["call_id"]]
    assert next_link(second_page) is None and "X-Total-Count" not in second_page.headers


# The feed also carries notices for push and webhooks (approval.waiting, run.failed...);
# these tests follow the state changes a frontend shows.
CHANGES = ("approval.created", "approval.answered", "call.finished", "run.state", "job_run.state")


def read_feed(client, auth, count: int, last_id: str = "0-0") -> list[dict[str, object]]:
    """The first `count` state-change events of the owner's SSE feed after `last_id`."""
    headers = {**auth, "Last-Event-ID": last_id}
    before = set(threading.enumerate())
    response = client.get("/api/events", headers=headers, buffered=False)
    assert response.status_code == 200
    assert response.mimetype == "text/event-stream"
    events: list[dict[str, object]] = []
    chunks = iter(response.response)
    try:
        while len(events) < count:
            frame = next(chunks)
            frame = frame.decode() if isinstance(frame, bytes) else frame
            if frame.startswith("id:"):
                fields = dict(line.split(": ", 1) for line in frame.strip().split("\n"))
                if fields["event"] not in CHANGES:
                    continue
                events.append(
                    {"id": fields["id"], "kind": fields["event"], **json.loads(fields["data"])}
                )
    finally:
        response.close()
    # The test client serves the stream as a plain WSGI server does, from a helper thread with
    # a loop of its own; the close ends it, even when redis-py's blocked read swallowed the
    # cancellation (the thread would live on until the read's block ran out).
    assert [t for t in threading.enumerate() if t not in before and t.is_alive()] == []
    return events


@pytest.mark.slow
def test_the_event_feed_replays_an_approval_asked_and_answered_from_last_event_id(client, auth):
    install(client, auth, "wiper", WIPE)
    asked = run(client, auth)
    assert answer(client, auth, asked["approval_id"], "deny").status_code == 200

    events = read_feed(client, auth, 3)

    assert [e["kind"] for e in events] == [
        "approval.created",
        "approval.answered",
        "call.finished",
    ]
    created, answered, finished = events
    assert created["approval_id"] == asked["approval_id"]
    assert created["status"] == "pending" and created["skill_name"] == "wiper"
    assert answered["status"] == "denied"
    assert finished["call_id"] == asked["call_id"] and finished["status"] == "denied"
    # Reconnecting after the first event replays only what came after it.
    again = read_feed(client, auth, 2, last_id=str(created["id"]))
    assert [e["id"] for e in again] == [answered["id"], finished["id"]]


@pytest.mark.slow
def test_a_refused_answer_is_rolled_back_and_never_announced(client, auth):
    install(client, auth, "wiper", WIPE)
    asked = run(client, auth)
    refused = answer(client, auth, asked["approval_id"], "approve_for_chat")
    assert refused.status_code == 400 and refused.json["code"] == "grant_not_offered"
    assert answer(client, auth, asked["approval_id"], "approve").status_code == 200

    events = read_feed(client, auth, 2)

    assert [(e["kind"], e["status"]) for e in events] == [
        ("approval.created", "pending"),
        ("approval.answered", "approved"),
    ]


def test_another_owner_hears_nothing_of_alices_approvals(client, auth, other_auth, redis_client):
    install(client, auth, "wiper", WIPE)
    run(client, auth)
    bob = client.get("/api/events", headers={**other_auth, "Last-Event-ID": "0-0"}, buffered=False)
    assert bob.status_code == 200
    bob.close()
    streams = list(redis_client.scan_iter(match="skillfleet:owner:*:events"))
    assert len(streams) == 1  # only alice's


@pytest.mark.slow
def test_a_job_run_announces_each_state_it_moves_to(client, auth, services, redis_client):
    body = {"name": "probe", "cron": "0 6 * * *", "steps": [{"tool": "list_skills"}]}
    job = client.post("/api/jobs", headers=auth, json=body).json
    started = client.post(f"/api/jobs/{job['id']}/run", headers=auth)
    assert started.status_code == 202, started.json
    run_id = started.json["job_run_id"]
    with transaction(services.sessions) as session:  # what the control worker does
        claimed = jobruns.claim(session, run_id, "worker-1")
        assert claimed is not None
        assert jobruns.succeed(session, claimed, "worker-1")
    with transaction(services.sessions) as session:  # a move that loses its race: no event
        assert jobruns.claim(session, run_id, "worker-2") is None
        assert session.get(JobRun, run_id).status == "succeeded"

    events = read_feed(client, auth, 3)

    assert [(e["kind"], e["status"]) for e in events] == [
        ("job_run.state", "queued"),
        ("job_run.state", "running"),
        ("job_run.state", "succeeded"),
    ]
    assert {(e["job_run_id"], e["job_id"]) for e in events} == {(run_id, job["id"])}
    kinds = [e.kind for e in owner_events.read(redis_client, owner_id(services))]
    assert kinds.count("job_run.state") == 3


@pytest.mark.parametrize(
    "last_id", ["'; DROP", "---", "1-2-3", "12-", "12", "99999999999999999999999-0"]
)
def test_a_bad_last_event_id_is_refused(client, auth, last_id):
    response = client.get("/api/events", headers={**auth, "Last-Event-ID": last_id})
    assert response.status_code == 400
    assert response.json["code"] == "invalid_event_id"


@pytest.mark.slow
def test_an_event_id_from_the_future_replays_the_feed_from_its_start(client, auth):
    install(client, auth, "wiper", WIPE)
    asked = run(client, auth)
    future = f"{int(time.time() * 1000) + 10**9}-0"

    events = read_feed(client, auth, 1, last_id=future)

    assert [(e["kind"], e["approval_id"]) for e in events] == [
        ("approval.created", asked["approval_id"])
    ]


def test_calls_still_work_when_the_event_feed_cannot_be_reached(tmp_path: Path, database_url: str):
    settings = Settings(
        data_dir=tmp_path / "var",
        database_url=database_url,
        redis_url="redis://127.0.0.1:1/0",  # nothing listens there
        dry_run=True,
    )
    services = Services.build(settings)
    try:
        client = create_app(services=services).test_client()
        with transaction(services.sessions) as session:
            from store.tokens import create_owner_token

            headers = {"Authorization": f"Bearer {create_owner_token(session, 'carol')}"}
        response = client.post("/api/tools/list_skills", headers=headers, json={"arguments": {}})
        assert response.status_code == 200
        assert response.json["status"] == "done"
        listed = client.get("/api/calls", headers=headers).json
        assert [c["status"] for c in listed] == ["done"]
    finally:
        services.engine.dispose()


ORIGIN = "https://console.example.org"


@pytest.fixture
def cors_client(settings: Settings):
    services = Services.build(settings.with_overrides(cors_origins=(ORIGIN,)))
    yield create_app(services=services).test_client()
    services.engine.dispose()


def test_a_preflight_from_an_allowed_origin_is_answered_without_credentials(cors_client):
    response = cors_client.options(
        "/api/approvals/abc",
        headers={
            "Origin": ORIGIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )
    assert response.status_code == 200
    assert response.headers["Access-Control-Allow-Origin"] == ORIGIN
    assert "POST" in response.headers["Access-Control-Allow-Methods"]
    assert "authorization" in response.headers["Access-Control-Allow-Headers"].lower()
    assert "Access-Control-Allow-Credentials" not in response.headers


def test_an_allowed_origin_reads_lists_and_their_paging_headers(cors_client, auth):
    response = cors_client.get("/api/skills?page_size=1", headers={**auth, "Origin": ORIGIN})
    assert response.status_code == 200
    assert response.headers["Access-Control-Allow-Origin"] == ORIGIN
    exposed = response.headers["Access-Control-Expose-Headers"]
    assert "Link" in exposed and "X-Total-Count" in exposed
    # Errors carry the headers too, so a frontend can read the API's message.
    refused = cors_client.get("/api/skills", headers={"Origin": ORIGIN})
    assert refused.status_code == 401
    assert refused.headers["Access-Control-Allow-Origin"] == ORIGIN


def test_other_origins_and_the_default_settings_get_no_cors_headers(cors_client, client, auth):
    stranger = cors_client.get("/api/skills", headers={**auth, "Origin": "https://evil.example"})
    assert "Access-Control-Allow-Origin" not in stranger.headers
    default = client.get("/api/skills", headers={**auth, "Origin": ORIGIN})
    assert "Access-Control-Allow-Origin" not in default.headers


def test_bad_cors_origins_in_the_environment_are_refused_at_start():
    from store.settings import SettingsError

    with pytest.raises(SettingsError, match="SKILLFLEET_CORS_ORIGINS"):
        Settings.from_env({"SKILLFLEET_CORS_ORIGINS": "console.example.org"})
    parsed = Settings.from_env({"SKILLFLEET_CORS_ORIGINS": f"{ORIGIN}/, http://localhost:5173"})
    assert parsed.cors_origins == (ORIGIN, "http://localhost:5173")


def test_the_openapi_document_describes_the_frontend_routes_and_envelope_examples(client):
    doc = client.get("/api/openapi.json").json
    assert {"/api/runs", "/api/calls", "/api/events"} <= set(doc["paths"])
    runs = doc["paths"]["/api/runs"]["get"]
    names = {p["name"] for p in runs["parameters"]}
    assert {"status", "skill", "node", "chat", "since", "cursor", "page_size"} <= names
    assert {"Link", "X-Total-Count"} <= set(runs["responses"]["200"]["headers"])
    envelope = doc["paths"]["/api/tools/{tool}"]["post"]["responses"]["200"]["content"]
    examples = envelope["application/json"]["examples"]
    assert {"done", "running", "pending_approval", "denied", "failed"} <= set(examples)
    assert "text/event-stream" in doc["paths"]["/api/events"]["get"]["responses"]["200"]["content"]
    undescribed = [
        f"{method.upper()} {path} {status}"
        for path, operations in doc["paths"].items()
        for method, operation in operations.items()
        if isinstance(operation, dict)
        for status, response in operation.get("responses", {}).items()
        # 204, and 202 (/mcp's answer to a notification), have no body
        if status.startswith("2") and status not in ("202", "204") and "content" not in response
    ]
    assert undescribed == []


def test_the_console_is_served_at_the_root_with_a_strict_content_policy(client):
    page = client.get("/")
    assert page.status_code == 200
    assert page.mimetype == "text/html"
    assert b"/console/app.js" in page.data
    policy = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    script = client.get("/console/app.js")
    assert script.status_code == 200
    assert "javascript" in script.mimetype
    assert client.get("/console/no-such.js").status_code == 404
    assert client.get("/console/../__init__.py").status_code == 404

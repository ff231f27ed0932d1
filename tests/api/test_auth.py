"""Every /api route but the health check needs a valid bearer token."""

from __future__ import annotations

import io

import pytest
from factories import finished_run, skill_files, zip_bytes
from sqlalchemy import select

from store.db import transaction
from store.models import ApiToken, Base, Owner
from store.tokens import create_node_token, token_digest

PROTECTED = [
    ("GET", "/api/skills"),
    ("POST", "/api/skills"),
    ("GET", "/api/skills/skill-authoring"),
    ("DELETE", "/api/skills/skill-authoring"),
    ("GET", "/api/skills/skill-authoring/files/SKILL.md"),
    ("POST", "/api/skills/skill-authoring/duplicate"),
    ("PUT", "/api/skills/skill-authoring/enabled"),
    ("GET", "/api/tools"),
    ("POST", "/api/tools/list_skills"),
    ("GET", "/api/calls/x"),
    ("GET", "/api/approvals"),
    ("POST", "/api/approvals/x"),
    ("GET", "/api/runs/x"),
    ("GET", "/api/runs/x/events"),
    ("GET", "/api/settings"),
    ("GET", "/api/chats"),
    ("GET", "/api/nodes"),
    ("GET", "/api/tokens"),
    ("POST", "/api/tokens"),
    ("DELETE", "/api/tokens/1"),
]


@pytest.mark.parametrize(("method", "path"), PROTECTED)
def test_a_request_without_a_token_is_401_unauthorized(client, method, path):
    response = client.open(path, method=method)
    assert response.status_code == 401
    assert response.json["code"] == "unauthorized"
    assert response.headers["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize(("method", "path"), PROTECTED)
def test_a_request_with_a_wrong_token_is_401_unauthorized(client, method, path):
    response = client.open(path, method=method, headers={"Authorization": "Bearer sf_wrong"})
    assert response.status_code == 401
    assert response.json == {
        "code": "unauthorized",
        "status": 401,
        "message": "The bearer token is not valid.",
    }


def test_a_basic_auth_header_is_not_a_bearer_token(client):
    response = client.get("/api/skills", headers={"Authorization": "Basic YTpi"})
    assert response.status_code == 401


def test_health_needs_no_token(client):
    response = client.get("/api/health")
    assert response.status_code == 200
    assert response.json["status"] == "ok"


def test_tokens_are_stored_as_their_sha256_only(services, token):
    with services.sessions() as session:
        stored = list(session.scalars(select(ApiToken.token_hash)))
    assert token_digest(token) in stored
    assert token not in stored


def test_a_node_token_cannot_use_owner_routes(client, services):
    with transaction(services.sessions) as session:
        node_token = create_node_token(session, "web01")
    response = client.get("/api/skills", headers={"Authorization": f"Bearer {node_token}"})
    assert response.status_code == 403
    assert response.json["code"] == "forbidden"


# --- Owner and agent tokens -------------------------------------------------------------------

WIPE = {"skillfleet.tier": "destructive", "skillfleet.execution": "node"}
OWNER_ONLY_MESSAGE = (
    "Only the owner's own token can do this; an agent token may call tools and read calls, "
    "runs, approvals and skills."
)


def upload(name: str, **extra: object) -> dict[str, object]:
    files = skill_files(name, metadata=WIPE)
    files["scripts/wipe.sh"] = b"#!/bin/bash\necho wiping\n"
    files.update(extra)  # type: ignore[arg-type]
    return {
        "data": {"file": (io.BytesIO(zip_bytes(files, top=name)), "s.zip")},
        "content_type": "multipart/form-data",
    }


@pytest.fixture
def world(client, auth, agent_auth, services) -> dict[str, str]:
    """Alice's things an agent might try to change: a skill, a pending approval in a chat, a
    finished run, a registered node and her owner token."""
    assert client.post("/api/skills", headers=auth, **upload("wiper")).status_code == 201
    call = {
        "arguments": {
            "skill_name": "wiper",
            "script": "scripts/wipe.sh",
            "arguments": {"node": "web01"},
        },
        "chat_id": "chat-1",
    }
    envelope = client.post("/api/tools/run_skill_script", headers=agent_auth, json=call).json
    assert envelope["status"] == "pending_approval"
    skill_hash = client.get("/api/skills/wiper", headers=auth).json["hash"]
    with transaction(services.sessions) as session:
        alice = session.scalar(select(Owner.id).where(Owner.name == "alice"))
        token_id = session.scalar(
            select(ApiToken.id).where(ApiToken.owner_id == alice, ApiToken.role == "owner")
        )
        session.add(finished_run(alice, skill_hash, RUN_ID))
    return {
        "approval": envelope["approval_id"],
        "call": envelope["call_id"],
        "hash": skill_hash,
        "token_id": str(token_id),
        "run": RUN_ID,
        "file": _uploaded(client, auth),
    }


def _uploaded(client, auth) -> str:
    body = {"file": (io.BytesIO(b"alice's file"), "a.txt")}
    answer = client.post("/api/files", headers=auth, data=body, content_type="multipart/form-data")
    assert answer.status_code == 201, answer.json
    return str(answer.json["id"])


RUN_ID = "7d1c4e0a-0000-4000-8000-000000000001"


def everything(services) -> dict[str, list[tuple[str, ...]]]:
    """Every row of every table (but when a token was last used) and every stored file."""
    rows = {}
    with services.sessions() as session:
        for table in Base.metadata.sorted_tables:
            rows[table.name] = sorted(
                tuple(str(v) for k, v in row._mapping.items() if k != "last_used_at")
                for row in session.execute(select(table))
            )
    skills_dir = services.settings.skills_dir
    rows["skill files"] = sorted(
        (p.relative_to(skills_dir).as_posix(),) for p in skills_dir.rglob("*")
    )
    return rows


# (method, path, request keywords): every route only the owner's own token may use.
OWNER_ONLY = [
    ("POST", "/api/approvals/{approval}", lambda: {"json": {"decision": "approve"}}),
    ("POST", "/api/approvals/{approval}", lambda: {"json": {"decision": "approve_for_chat"}}),
    ("POST", "/api/approvals/{approval}", lambda: {"json": {"decision": "deny"}}),
    ("GET", "/api/settings", dict),
    ("PUT", "/api/settings", lambda: {"json": {"auto_tools": ["skill:wiper@0123abcd"]}}),
    ("POST", "/api/skills", lambda: upload("fresh-skill")),
    ("POST", "/api/skills?replace=true", lambda: upload("wiper", **{"notes.md": b"mine now"})),
    ("POST", "/api/skills", lambda: {"json": {"github": "https://github.com/a/b/tree/main/s"}}),
    ("DELETE", "/api/skills/wiper", dict),
    ("PUT", "/api/skills/wiper/enabled", lambda: {"json": {"enabled": False}}),
    ("PUT", "/api/skills/wiper/execution", lambda: {"json": {"execution": "spark"}}),
    ("POST", "/api/skills/skill-authoring/duplicate", lambda: {"json": {"name": "my-copy"}}),
    ("GET", "/api/tokens", dict),
    ("POST", "/api/tokens", lambda: {"json": {"role": "owner", "label": "mine now"}}),
    ("DELETE", "/api/tokens/{token_id}", dict),
    ("GET", "/api/chats", dict),
    ("GET", "/api/chats/chat-1", dict),
    ("GET", "/api/chats/chat-1/grants", dict),
    ("DELETE", "/api/chats/chat-1", dict),
    ("GET", "/api/nodes", dict),
    ("POST", "/api/nodes/web01/sync", dict),
    ("GET", "/api/nodes/web01/manifest", dict),
    ("GET", "/api/nodes/web01/packages/wiper@{hash}.tar.gz", dict),
    ("PUT", "/api/skills/wiper/files/notes.md", lambda: {"json": {"content": "agent was here"}}),
    ("DELETE", "/api/skills/wiper/files/scripts/wipe.sh", dict),
    ("GET", "/api/review", dict),
    ("POST", "/api/jobs", lambda: {"json": {"name": "n", "cron": "* * * * *", "steps": []}}),
    ("POST", "/api/jobs/some-job/run", dict),
    ("DELETE", "/api/jobs/some-job", dict),
    ("DELETE", "/api/files/{file}", dict),
]


@pytest.mark.parametrize(("method", "path", "request_kwargs"), OWNER_ONLY)
def test_an_agent_token_on_an_owner_only_route_is_403_owner_only_and_changes_nothing(
    client, services, agent_auth, world, method, path, request_kwargs
):
    before = everything(services)

    response = client.open(
        path.format(**world), method=method, headers=agent_auth, **request_kwargs()
    )

    assert response.status_code == 403, response.json
    assert response.json == {"code": "owner_only", "status": 403, "message": OWNER_ONLY_MESSAGE}
    assert everything(services) == before


def test_an_agent_cannot_answer_the_approval_its_own_call_asked_for_but_the_owner_can(
    client, auth, agent_auth, world
):
    refused = client.post(
        f"/api/approvals/{world['approval']}", headers=agent_auth, json={"decision": "approve"}
    )
    assert refused.status_code == 403
    assert client.get(f"/api/calls/{world['call']}", headers=agent_auth).json["status"] == (
        "pending_approval"
    )

    answered = client.post(
        f"/api/approvals/{world['approval']}", headers=auth, json={"decision": "deny"}
    )

    assert answered.status_code == 200 and answered.json["status"] == "denied"
    assert client.get(f"/api/calls/{world['call']}", headers=agent_auth).json["status"] == (
        "denied"
    )


# (path): what an agent reads of its owner.
AGENT_READS = [
    "/api/tools",
    "/api/calls/{call}",
    "/api/approvals",
    "/api/approvals?status=pending",
    "/api/approvals/{approval}",
    "/api/skills",
    "/api/skills/wiper",
    "/api/skills/wiper/files/SKILL.md",
    "/api/runs/{run}",
    "/api/runs/{run}/events",
]


@pytest.mark.parametrize("path", AGENT_READS)
def test_an_agent_token_reads_its_owners_calls_approvals_skills_and_runs(
    client, agent_auth, world, path
):
    response = client.get(path.format(**world), headers=agent_auth)

    assert response.status_code == 200, response.data[:500]


def test_an_agent_sees_the_pending_approval_run_output_and_stream_of_its_owner(
    client, agent_auth, world
):
    [pending] = client.get("/api/approvals?status=pending", headers=agent_auth).json
    run = client.get(f"/api/runs/{world['run']}", headers=agent_auth).json
    events = client.get(f"/api/runs/{world['run']}/events", headers=agent_auth).data.decode()

    assert pending["id"] == world["approval"] and pending["status"] == "pending"
    assert run["status"] == "succeeded" and run["stdout"] == "wiping\n"
    assert 'event: stdout\ndata: {"text": "wiping\\n"}' in events
    assert "event: exit" in events


def test_an_agent_token_calls_tools(client, agent_auth, world):
    listed = client.post("/api/tools/list_skills", headers=agent_auth, json={"arguments": {}})
    loaded = client.post(
        "/api/tools/load_skill",
        headers=agent_auth,
        json={"arguments": {"skill_name": "wiper"}, "chat_id": "chat-2"},
    )

    assert listed.status_code == 200 and listed.json["status"] == "done"
    assert "wiper" in [skill["name"] for skill in listed.json["result"]["skills"]]
    assert loaded.status_code == 200 and loaded.json["status"] == "done"


def test_an_agent_may_cancel_a_queued_run_of_its_owner(client, services, agent_auth, world):
    with transaction(services.sessions) as session:
        alice = session.scalar(select(Owner.id).where(Owner.name == "alice"))
        session.add(finished_run(alice, world["hash"], run_id=QUEUED_RUN_ID, status="queued"))

    response = client.post(f"/api/runs/{QUEUED_RUN_ID}/cancel", headers=agent_auth)

    assert response.status_code == 202 and response.json["status"] == "cancelled"


QUEUED_RUN_ID = "7d1c4e0a-0000-4000-8000-000000000002"


def test_an_agent_token_reaches_nothing_of_another_owner(client, other_auth, world):
    # other_auth is bob's owner token: alice's agent's call, approval and run are not his.
    for path in ("/api/calls/{call}", "/api/approvals/{approval}", "/api/runs/{run}"):
        response = client.get(path.format(**world), headers=other_auth)
        assert response.status_code == 404, path


def test_a_node_token_cannot_use_agent_routes_either(client, services, world):
    with transaction(services.sessions) as session:
        node_token = create_node_token(session, "web01")
    headers = {"Authorization": f"Bearer {node_token}"}

    for path in ("/api/tools", "/api/calls/{call}", "/api/runs/{run}", "/api/approvals"):
        response = client.get(path.format(**world), headers=headers)
        assert response.status_code == 403, path
        assert response.json["code"] == "forbidden"

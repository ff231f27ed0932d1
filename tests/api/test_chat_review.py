"""Chat review for /create-skill: issue counts per chat, transcripts, reviewed-chat records."""

from __future__ import annotations

import dataclasses
import io
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from conftest import offer_node
from factories import owner_id_of, skill_files, zip_bytes
from sqlalchemy import func, select, update
from toolcalls import draft_arguments, tool

from api import create_app
from api.services import Services
from broker import runs
from broker.chatreview import TRANSCRIPT_CUT
from broker.results import CUT_NOTE, json_size
from relay import heartbeat, naming
from store.db import transaction
from store.lifecycle import calls as call_states
from store.limits import MAX_RESOURCE_BYTES, MAX_REVIEWED_CHATS, RESULT_CAP
from store.models import Approval, Chat, ChatReview, utcnow
from store.settings import Settings
from store.states import CallStatus


def test_list_chats_counts_each_chats_declined_and_failed_calls(client, auth, other_auth):
    tool(client, auth, "load_skill", {"skill_name": "nope"}, chat="bad")
    tool(client, auth, "draft_skill", draft_arguments("skill-authoring"), chat="bad")
    tool(client, auth, "list_skills", {}, chat="fine")
    chats = tool(client, auth, "list_chats", {}, chat="review")["result"]["chats"]
    by_id = {c["chat_id"]: c for c in chats}
    assert (by_id["bad"]["failed"], by_id["bad"]["declined"], by_id["bad"]["issues"]) == (1, 1, 2)
    assert by_id["fine"]["issues"] == 0
    transcript = tool(client, auth, "read_chat_transcript", {"chat_id": "bad"})["result"]
    assert [(c["tool"], c["status"]) for c in transcript["calls"]] == [
        ("load_skill", "failed"),
        ("draft_skill", "denied"),
    ]
    assert transcript["calls"][0]["arguments"] == {"skill_name": "nope"}
    theirs = tool(client, other_auth, "list_chats", {}, chat="x")["result"]["chats"]
    assert [c["chat_id"] for c in theirs] == ["x"]
    hidden = tool(client, other_auth, "read_chat_transcript", {"chat_id": "bad"}, chat="x")
    assert hidden["status"] == "failed" and hidden["error"]["code"] == "chat_not_found"
    queue = client.get("/api/review", headers=auth).json
    assert queue["chats_with_issues"] == 1


def test_marking_an_unknown_chat_records_nothing(client, auth):
    tool(client, auth, "list_skills", {}, chat="known")
    refused = tool(client, auth, "mark_chats_reviewed", {"chat_ids": ["known", "ghost"]})
    assert refused["status"] == "failed" and refused["error"]["code"] == "chat_not_found"
    unreviewed = tool(client, auth, "list_chats", {"only_unreviewed": True})["result"]["chats"]
    assert "known" in [c["chat_id"] for c in unreviewed]


def test_at_most_2000_reviewed_chats_are_kept_per_owner_and_the_oldest_drop(client, auth, services):
    owner = owner_id_of(services)
    names = [f"chat-{i:04d}" for i in range(MAX_REVIEWED_CHATS + 1)]
    with transaction(services.sessions) as session:
        session.add_all(Chat(owner_id=owner, external_id=name) for name in names)
    too_many = tool(client, auth, "mark_chats_reviewed", {"chat_ids": names})
    assert too_many["status"] == "failed" and too_many["error"]["code"] == "invalid_call"
    first = tool(client, auth, "mark_chats_reviewed", {"chat_ids": names[:MAX_REVIEWED_CHATS]})
    assert first["result"]["records"] == MAX_REVIEWED_CHATS
    last = tool(client, auth, "mark_chats_reviewed", {"chat_ids": names[-1:]})
    assert last["status"] == "done" and last["result"]["records"] == MAX_REVIEWED_CHATS
    with services.sessions() as session:
        reviewed = set(
            session.scalars(
                select(Chat.external_id).join(ChatReview, ChatReview.chat_id == Chat.id)
            )
        )
        count = session.scalar(select(func.count()).select_from(ChatReview))
    assert count == MAX_REVIEWED_CHATS
    assert names[0] not in reviewed and names[1] in reviewed and names[-1] in reviewed


@dataclasses.dataclass
class Live:
    """The API with real dispatch (not dry run) and one node whose worker the test plays."""

    client: Any
    services: Services
    node: str


@pytest.fixture
def live(settings: Settings, redis_client: redis.Redis, auth) -> Iterator[Live]:
    built = Services.build(dataclasses.replace(settings, dry_run=False))
    node = f"t-{uuid.uuid4().hex[:8]}"
    offer_node(built, node)
    queue = naming.node_queue(node)
    instance = heartbeat.Instance(role="node", queue=queue, name=node)
    heartbeat.beat(redis_client, instance)
    try:
        yield Live(create_app(services=built).test_client(), built, node)
    finally:
        heartbeat.stop(redis_client, instance)
        # The run messages nobody consumed and the queue's bindings: keys named after this
        # test's own queue.
        redis_client.delete(queue, *redis_client.scan_iter(match=f"*.{queue}"))
        built.engine.dispose()


def install(client, auth, name: str, tier: str, extra: dict[str, bytes] | None = None) -> None:
    files = skill_files(name, metadata={"skillfleet.tier": tier, "skillfleet.execution": "node"})
    files.update(extra or {})
    body = {"file": (io.BytesIO(zip_bytes(files, top=name)), f"{name}.zip")}
    response = client.post(
        "/api/skills", headers=auth, data=body, content_type="multipart/form-data"
    )
    assert response.status_code == 201, response.json


def start_run(live: Live, auth, name: str, chat: str) -> dict[str, Any]:
    arguments = {"skill_name": name, "script": "scripts/hello.py", "arguments": {"node": live.node}}
    return tool(live.client, auth, "run_skill_script", arguments, chat=chat)


def test_list_chats_counts_expired_approvals_and_timed_out_runs(live: Live, auth):
    client, services = live.client, live.services
    install(client, auth, "wiper", "destructive")
    install(client, auth, "reader", "read")
    # An approval nobody answered in time: the call expires.
    asked = start_run(live, auth, "wiper", "slow-owner")
    assert asked["status"] == "pending_approval", asked
    with transaction(services.sessions) as session:
        session.execute(
            update(Approval)
            .where(Approval.id == asked["approval_id"])
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
    assert client.get(f"/api/calls/{asked['call_id']}", headers=auth).json["status"] == "expired"
    # A run past its time limit, ended as the node worker ends it (claim, then finish).
    started = start_run(live, auth, "reader", "slow-script")
    assert started["status"] == "running", started
    assert runs.claim(services.sessions, started["run_id"], "node-worker", []) is not None
    ended = runs.Outcome("timed_out", None, "line 0\n", "", "The script ran past its limit.")
    assert runs.finish(services.sessions, started["run_id"], ended, "process", [])
    call = client.get(f"/api/calls/{started['call_id']}", headers=auth).json
    assert (call["status"], call["error_code"]) == ("failed", "timed_out")
    tool(client, auth, "list_skills", {}, chat="fine")

    chats = tool(client, auth, "list_chats", {}, chat="review")["result"]["chats"]
    counts = {
        c["chat_id"]: (c["declined"], c["expired"], c["failed"], c["timed_out"], c["issues"])
        for c in chats
    }
    assert counts["slow-owner"] == (0, 1, 0, 0, 1)
    assert counts["slow-script"] == (0, 0, 0, 1, 1)
    assert counts["fine"] == (0, 0, 0, 0, 0)
    unreviewed = tool(client, auth, "list_chats", {"only_unreviewed": True})["result"]["chats"]
    assert {"slow-owner", "slow-script"} <= {c["chat_id"] for c in unreviewed}
    assert client.get("/api/review", headers=auth).json["chats_with_issues"] == 2


def test_a_transcript_of_large_results_keeps_every_call_and_fits_the_result_cap(live: Live, auth):
    client, services = live.client, live.services
    big = ("x" * 99 + "\n").encode() * (MAX_RESOURCE_BYTES // 100)
    install(client, auth, "bulky", "read", {"references/big.md": big})
    read = {"skill_name": "bulky", "path": "references/big.md"}
    for _ in range(2):  # each result is stored cut at the result cap
        stored = tool(client, auth, "read_skill_resource", read, chat="big")["result"]
        assert json_size(stored) <= RESULT_CAP and stored["note"] == CUT_NOTE
    # A call whose stored result is larger than the cap, as a row written before results were
    # capped holds: answered through the call's state module.
    started = start_run(live, auth, "bulky", "big")
    huge = {"stdout": "y" * (2 * RESULT_CAP), "exit_code": 0}
    with transaction(services.sessions) as session:
        assert call_states.answer(session, started["call_id"], CallStatus.DONE, result=huge)
    tool(client, auth, "load_skill", {"skill_name": "nope"}, chat="big")

    envelope = tool(client, auth, "read_chat_transcript", {"chat_id": "big"}, chat="review")
    assert envelope["status"] == "done", envelope
    transcript = envelope["result"]
    assert json_size(transcript) <= RESULT_CAP
    calls = transcript["calls"]
    assert transcript["count"] == 4 and [(c["tool"], c["status"]) for c in calls] == [
        ("read_skill_resource", "done"),
        ("read_skill_resource", "done"),
        ("run_skill_script", "done"),
        ("load_skill", "failed"),
    ]
    # Small arguments and errors stay whole; each large result is cut, saying so.
    assert calls[0]["arguments"] == read and calls[3]["arguments"] == {"skill_name": "nope"}
    assert calls[3]["error"]["code"] == "skill_not_found"
    for entry in calls[:3]:
        assert entry["result"]["truncated"] is True
        assert entry["result"]["note"] == TRANSCRIPT_CUT
    assert calls[2]["result"]["text"].startswith('{"stdout":"yyy')
    # Each share is about a third of the cap, not one call's whole 48 KB.
    assert all(json_size(c["result"]) > RESULT_CAP // 4 for c in calls[:3])

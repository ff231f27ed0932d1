"""Chat review for /create-skill: issue counts per chat, transcripts, reviewed-chat records."""

from __future__ import annotations

from factories import owner_id_of
from sqlalchemy import func, select
from toolcalls import draft_arguments, tool

from store.db import transaction
from store.limits import MAX_REVIEWED_CHATS
from store.models import Chat, ChatReview


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

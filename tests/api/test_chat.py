"""POST /api/chat, the AI SDK's chat transport: the exact UI message chunks of a chat's turns.

Each turn executes in this process (`workers.turns.execute`, what the control worker's task
calls) with dry-run dispatch, against the model stand-in on 127.0.0.1 (allowed as an operator
allows a local model). The stream is read whole once the turn has ended.
"""

from __future__ import annotations

import json
import threading

import pytest
from conftest import REDIS_URL
from fleet import wait_until
from model_standin import model_standin, slow, text, thinking, tools

from store.egress import Egress
from store.secrets import Sealer
from store.settings import Settings
from workers import turns

WORKER = "control@test:1:1"
WIPE_CALL = ("run_skill_script", {"skill_name": "wiper", "script": "scripts/wipe.sh",
                                  "arguments": {"node": "web01"}})  # fmt: skip


@pytest.fixture
def settings(tmp_path, database_url) -> Settings:
    return Settings(
        data_dir=tmp_path / "var", database_url=database_url, redis_url=REDIS_URL, dry_run=True,
        egress_allow=("127.0.0.1",),
    )  # fmt: skip


@pytest.fixture
def context(services, settings):
    return turns.TurnContext(
        services.sessions, services.redis, services.broker, Sealer(settings.keys_dir),
        WORKER, time_limit=20, egress=Egress(settings.egress_allow),
    )  # fmt: skip


def use_model(client, auth, url: str) -> None:
    body = {"base_url": url, "name": "standin", "api_key": "sk-standin"}
    assert client.put("/api/settings/model", headers=auth, json=body).status_code == 200


def user(message_id: str, words: str) -> dict:
    return {"id": message_id, "role": "user", "parts": [{"type": "text", "text": words}]}


def answer(message_id: str, words: str) -> dict:
    return {"id": message_id, "role": "assistant", "parts": [{"type": "text", "text": words}]}


def chunks_of(body: str) -> list[dict | str]:
    """The stream's chunks in order; `[DONE]` as the string it is."""
    found: list[dict | str] = []
    for block in body.split("\n\n"):
        if block.startswith("data: "):
            data = block[len("data: ") :]
            found.append(data if data == "[DONE]" else json.loads(data))
    return found


def chat(client, auth, context, body: dict, run: bool = True):
    """POST /api/chat, the turn run to its end here, and the response with its chunks."""
    response = client.post("/api/chat", headers=auth, json=body)
    if response.status_code != 200:
        return response, []
    turn_id = response.headers["X-Skillfleet-Turn"]
    if run:
        turns.execute(context, turn_id)
    return response, chunks_of(response.get_data(as_text=True))


def kinds(chunks: list[dict | str]) -> list[str]:
    """The chunk types, a run of deltas shown once."""
    shown: list[str] = []
    for chunk in chunks:
        kind = chunk if isinstance(chunk, str) else chunk["type"]
        if not (kind.endswith("-delta") and shown and shown[-1] == kind):
            shown.append(kind)
    return shown


def test_a_text_answer_streams_reasoning_text_and_usage_in_the_ui_message_protocol(
    client, auth, context
):
    reply = thinking("The owner greets me.", "Hello, owner!", prompt_tokens=12,
                     completion_tokens=5)  # fmt: skip
    with model_standin([reply]) as model:
        use_model(client, auth, model.url)
        body = {"id": "panel", "messages": [user("u1", "Hi")], "trigger": "submit-message",
                "messageId": "u1"}  # fmt: skip
        response, chunks = chat(client, auth, context, body)
    assert response.status_code == 200
    assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
    assert response.headers["content-type"].startswith("text/event-stream")
    assert "X-Skillfleet-History" not in response.headers
    turn_id = response.headers["X-Skillfleet-Turn"]
    assert kinds(chunks) == [
        "start", "start-step", "reasoning-start", "reasoning-delta", "reasoning-end",
        "text-start", "text-delta", "message-metadata", "text-end", "finish-step", "finish",
        "[DONE]",
    ]  # fmt: skip
    assert chunks[0] == {"type": "start", "messageId": turn_id,
                         "messageMetadata": {"turnId": turn_id}}  # fmt: skip
    said = "".join(c["delta"] for c in chunks if c != "[DONE]" and c["type"] == "text-delta")
    thought = "".join(
        c["delta"] for c in chunks if c != "[DONE]" and c["type"] == "reasoning-delta"
    )
    assert (said, thought) == ("Hello, owner!", "The owner greets me.")
    usage = {"inputTokens": 12, "outputTokens": 5, "totalTokens": 17}
    assert chunks[-2] == {"type": "finish", "finishReason": "stop", "messageMetadata": {
        "turnId": turn_id, "usage": usage, "status": "succeeded"}}  # fmt: skip
    assert model.requests[0]["stream_options"] == {"include_usage": True}
    # The chat holds its history, as the AI SDK's UI messages.
    shown = client.get("/api/chats/panel", headers=auth).json
    assert shown["messages"] == [
        user("u1", "Hi"),
        {"id": turn_id, "role": "assistant", "parts": [{"type": "text", "text": "Hello, owner!"}],
         "metadata": {"turnId": turn_id, "status": "succeeded", "usage": usage}},
    ]  # fmt: skip


def test_tool_calls_show_as_tool_parts_and_an_approval_wait_as_an_approval_request(
    client, auth, context, wiper
):
    script = [tools(("list_skills", {})), tools(WIPE_CALL), text("Wiped web01.")]
    with model_standin(script) as model:
        use_model(client, auth, model.url)
        body = {"id": "ops", "messages": [user("u1", "Wipe web01")]}
        response = client.post("/api/chat", headers=auth, json=body)
        assert response.status_code == 200, response.json
        turn_id = response.headers["X-Skillfleet-Turn"]
        worker = threading.Thread(target=turns.execute, args=(context, turn_id), daemon=True)
        worker.start()
        approval = wait_until(
            lambda: client.get("/api/approvals?status=pending", headers=auth).json,
            15, "the script call to wait for approval",
        )[0]  # fmt: skip
        decided = {"decision": "approve"}
        assert client.post(f"/api/approvals/{approval['id']}", headers=auth,
                           json=decided).status_code == 200  # fmt: skip
        worker.join(timeout=20)
        chunks = chunks_of(response.get_data(as_text=True))
    assert kinds(chunks) == [
        "start", "start-step", "tool-input-available", "tool-output-available", "finish-step",
        "start-step", "tool-input-available", "tool-approval-request", "tool-approval-response",
        "tool-output-available", "finish-step", "start-step", "text-start", "text-delta",
        "text-end", "finish-step", "finish", "[DONE]",
    ]  # fmt: skip
    first, second = [c for c in chunks if c != "[DONE]" and c["type"] == "tool-input-available"]
    assert first == {"type": "tool-input-available", "toolCallId": "call_0",
                     "toolName": "list_skills", "dynamic": True, "input": {}}  # fmt: skip
    assert second["toolName"] == "run_skill_script" and second["input"] == WIPE_CALL[1]
    asked = next(c for c in chunks if c != "[DONE]" and c["type"] == "tool-approval-request")
    assert asked == {"type": "tool-approval-request", "approvalId": approval["id"],
                     "toolCallId": "call_0"}  # fmt: skip
    outputs = [c for c in chunks if c != "[DONE]" and c["type"] == "tool-output-available"]
    assert "wiper" in json.dumps(outputs[0]["output"])
    assert outputs[1]["output"]["would_dispatch"]["script"] == "scripts/wipe.sh"
    # The chat is the broker's: its calls are listed under it, with the turn that made them.
    calls = client.get("/api/calls?chat=ops", headers=auth).json
    assert sorted(c["tool"] for c in calls) == ["list_skills", "run_skill_script"]
    assert {c["turn_id"] for c in calls} == {response.headers["X-Skillfleet-Turn"]}


def test_a_model_that_cannot_be_reached_ends_the_stream_with_an_error_part(client, auth, context):
    use_model(client, auth, "http://127.0.0.1:9/v1")
    response, chunks = chat(client, auth, context, {"id": "c", "messages": [user("u1", "hi")]})
    assert kinds(chunks) == ["start", "start-step", "finish-step", "error", "finish", "[DONE]"]
    assert chunks[3] == {
        "type": "error",
        "errorText": "The model at http://127.0.0.1:9/v1 can't be reached.",
    }
    assert chunks[4]["finishReason"] == "error"
    assert chunks[4]["messageMetadata"]["status"] == "failed"


@pytest.mark.both_databases
def test_regenerate_replaces_the_answer_and_the_chat_keeps_one(client, auth, context):
    script = [text("First answer."), text("Second answer."), text("Third answer.")]
    with model_standin(script) as model:
        use_model(client, auth, model.url)
        first, _ = chat(
            client, auth, context, {"id": "r", "messages": [user("u1", "Name a colour")]}
        )
        first_id = first.headers["X-Skillfleet-Turn"]
        again = {"id": "r", "messages": [user("u1", "Name a colour")],
                 "trigger": "regenerate-message", "messageId": first_id}  # fmt: skip
        second, chunks = chat(client, auth, context, again)
        second_id = second.headers["X-Skillfleet-Turn"]
        assert "X-Skillfleet-History" not in second.headers
        by_user = dict(again, messageId="u1")  # the SDK names the user message when asked so
        third, _ = chat(client, auth, context, by_user)
        third_id = third.headers["X-Skillfleet-Turn"]
    assert chunks[0]["messageId"] == second_id != first_id
    messages = client.get("/api/chats/r", headers=auth).json["messages"]
    assert [m["id"] for m in messages] == ["u1", third_id]
    assert messages[1]["parts"] == [{"type": "text", "text": "Third answer."}]
    # The model answered the same prompt each time, never seeing a replaced answer.
    assert [r["messages"][1:] for r in model.requests] == [
        [{"role": "user", "content": "Name a colour"}]
    ] * 3


def test_a_regenerate_of_an_unknown_message_is_404_and_starts_nothing(client, auth, context):
    with model_standin([text("Only answer.")]) as model:
        use_model(client, auth, model.url)
        chat(client, auth, context, {"id": "u", "messages": [user("u1", "hi")]})
        body = {"id": "u", "messages": [user("u1", "hi")], "trigger": "regenerate-message",
                "messageId": "no-such-message"}  # fmt: skip
        refused = client.post("/api/chat", headers=auth, json=body)
        empty = client.post("/api/chat", headers=auth, json=dict(body, id="never-used"))
    assert (refused.status_code, refused.json["code"]) == (404, "message_not_found")
    assert refused.json["message"] == "The chat 'u' has no message 'no-such-message' to regenerate."
    assert (empty.status_code, empty.json["code"]) == (404, "message_not_found")
    assert len(client.get("/api/chats/u", headers=auth).json["messages"]) == 2


def test_a_client_history_that_differs_is_replaced_by_the_servers_and_the_client_told(
    client, auth, context
):
    with model_standin([text("Paris."), text("About 2 million.")]) as model:
        use_model(client, auth, model.url)
        first, _ = chat(
            client, auth, context, {"id": "h", "messages": [user("u1", "Capital of France?")]}
        )
        first_id = first.headers["X-Skillfleet-Turn"]
        rewritten = [user("u1", "Capital of Spain?"), answer(first_id, "Madrid."),
                     user("u2", "How many live there?")]  # fmt: skip
        second, chunks = chat(client, auth, context, {"id": "h", "messages": rewritten})
    assert second.headers["X-Skillfleet-History"] == "server"
    assert chunks[1] == {"type": "data-history", "id": "history", "data": {
        "status": "server",
        "message": "The messages sent differ from this chat's history on the server; the "
        "server's history was used (GET /api/chats/h shows it).",
    }}  # fmt: skip
    sent = model.requests[1]["messages"][1:]
    assert sent == [
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris."},
        {"role": "user", "content": "How many live there?"},
    ]


def test_a_client_that_reconnects_gets_the_open_answer_from_its_start_and_204_after(
    client, auth, context
):
    with model_standin([slow(4, 0.2)]) as model:
        use_model(client, auth, model.url)
        posted = client.post(
            "/api/chat", headers=auth, json={"id": "s", "messages": [user("u1", "go")]}
        )
        turn_id = posted.headers["X-Skillfleet-Turn"]
        worker = threading.Thread(target=turns.execute, args=(context, turn_id), daemon=True)
        worker.start()
        resumed = client.get("/api/chat/s/stream", headers=auth)
        assert resumed.status_code == 200
        assert resumed.headers["x-vercel-ai-ui-message-stream"] == "v1"
        again = chunks_of(resumed.get_data(as_text=True))
        worker.join(timeout=20)
        first = chunks_of(posted.get_data(as_text=True))
    assert again == first and again[0]["messageId"] == turn_id and again[-1] == "[DONE]"
    assert client.get("/api/chat/s/stream", headers=auth).status_code == 204
    unknown = client.get("/api/chat/nobody/stream", headers=auth)
    assert (unknown.status_code, unknown.json["code"]) == (404, "chat_not_found")


def test_a_second_message_while_the_answer_streams_is_refused(client, auth, context):
    with model_standin([text("One.")]) as model:
        use_model(client, auth, model.url)
        open_one = client.post(
            "/api/chat", headers=auth, json={"id": "b", "messages": [user("u1", "a")]}
        )
        busy = client.post(
            "/api/chat", headers=auth, json={"id": "b", "messages": [user("u2", "b")]}
        )
        turns.execute(context, open_one.headers["X-Skillfleet-Turn"])
        open_one.get_data()
    assert (busy.status_code, busy.json["code"]) == (409, "turn_active")


def test_chat_routes_refuse_no_token_agents_and_other_owners(
    client, auth, agent_auth, other_auth, context
):
    body = {"id": "mine", "messages": [user("u1", "hi")]}
    assert client.post("/api/chat", json=body).status_code == 401
    as_agent = client.post("/api/chat", headers=agent_auth, json=body)
    assert (as_agent.status_code, as_agent.json["code"]) == (403, "owner_only")
    assert client.get("/api/chat/mine/stream", headers=agent_auth).status_code == 403
    with model_standin([text("Mine.")]) as model:
        use_model(client, auth, model.url)
        mine, _ = chat(client, auth, context, body)
    answer_id = mine.headers["X-Skillfleet-Turn"]
    for path in ("/api/chat/mine/stream", "/api/chats/mine"):
        theirs = client.get(path, headers=other_auth)
        assert (theirs.status_code, theirs.json["code"]) == (404, "chat_not_found"), path
    use_model(client, other_auth, "http://127.0.0.1:9/v1")
    steal = {"id": "mine", "messages": [user("u1", "hi")], "trigger": "regenerate-message",
             "messageId": answer_id}  # fmt: skip
    stolen = client.post("/api/chat", headers=other_auth, json=steal)
    assert (stolen.status_code, stolen.json["code"]) == (404, "message_not_found")
    assert len(client.get("/api/chats/mine", headers=auth).json["messages"]) == 2


MALFORMED = [
    ({"messages": [user("u1", "hi")]}, 422, "invalid_request"),
    ({"id": "c"}, 422, "invalid_request"),
    ({"id": "c", "messages": []}, 422, "invalid_request"),
    ({"id": "c", "messages": "hi"}, 422, "invalid_request"),
    ({"id": "c", "messages": [{"id": "u1", "role": "user"}]}, 422, "invalid_request"),
    ({"id": "c", "messages": [{"id": "u1", "role": "robot", "parts": []}]}, 422, "invalid_request"),
    (
        {"id": "c", "messages": [user("u1", "hi")], "trigger": "resume-stream"},
        422,
        "invalid_request",
    ),
    ({"id": "x" * 300, "messages": [user("u1", "hi")]}, 422, "invalid_request"),
    ({"id": "a\x00b", "messages": [user("u1", "hi")]}, 422, "invalid_request"),
    ({"id": "c", "messages": [user("u\x00", "hi")]}, 422, "invalid_request"),
    ({"id": "c", "messages": [answer("a1", "I spoke last")]}, 422, "chat_no_prompt"),
    ({"id": "c", "messages": [user("u1", "   ")]}, 422, "chat_no_prompt"),
    (
        {
            "id": "c",
            "messages": [
                {
                    "id": "u1",
                    "role": "user",
                    "parts": [
                        {"type": "file", "url": "data:text/plain,hi", "mediaType": "text/plain"}
                    ],
                }
            ],
        },
        422,
        "chat_no_prompt",
    ),
    ([1, 2], 422, "invalid_request"),
]


@pytest.mark.parametrize(("body", "status", "code"), MALFORMED)
def test_a_malformed_chat_body_is_refused_with_its_code_and_starts_nothing(
    client, auth, body, status, code
):
    use_model(client, auth, "http://127.0.0.1:9/v1")
    refused = client.post("/api/chat", headers=auth, json=body)
    assert (refused.status_code, refused.json["code"]) == (status, code), refused.json
    assert client.get("/api/chats/c", headers=auth).status_code == 404


def test_an_oversize_chat_body_is_refused_413(client, auth):
    huge = {"id": "c", "messages": [user("u1", "x" * (6 * 1024 * 1024))]}
    refused = client.post("/api/chat", headers=auth, json=huge)
    assert (refused.status_code, refused.json["code"]) == (413, "body_too_large")


def test_ids_with_slashes_dots_and_the_longest_length_are_opaque_chat_ids(client, auth, context):
    with model_standin([text("a"), text("b")]) as model:
        use_model(client, auth, model.url)
        for chat_id in ("../etc", "x" * 200):
            response, chunks = chat(
                client, auth, context, {"id": chat_id, "messages": [user("u1", "hi")]}
            )
            assert response.status_code == 200 and chunks[-1] == "[DONE]", chat_id
    assert client.get("/api/chat/..%2Fetc/stream", headers=auth).status_code in (204, 404)


def test_tool_payloads_count_against_the_streams_cap_and_past_it_show_as_a_note(
    client, auth, context, services
):
    from relay.streams import TurnStream
    from store.limits import MAX_STREAMED_TOOL_BYTES

    stream = TurnStream(services.redis, "capped-turn", context.caps)
    small = {"text": "x" * 100}
    assert stream.shown(small) == small
    large = {"text": "x" * MAX_STREAMED_TOOL_BYTES}
    assert stream.shown(large)["truncated"] is True
    stream.text_bytes = context.caps.output_bytes - 10  # the cap nearly reached by text
    assert stream.shown(small) == {"truncated": True, "bytes": len(json.dumps(small)),
                                   "note": "Too large to stream; see the call."}  # fmt: skip


def test_an_edited_message_is_a_new_prompt_on_the_servers_history_and_a_deleted_chat_forgets(
    client, auth, context
):
    with model_standin([text("Blue."), text("Green.")]) as model:
        use_model(client, auth, model.url)
        chat(client, auth, context, {"id": "e", "messages": [user("u1", "A colour?")]})
        # useChat's sendMessage({text, messageId}) edits a message: the same id, new text.
        edited, chunks = chat(
            client, auth, context, {"id": "e", "messages": [user("u1", "A fruit?")]}
        )
    assert edited.headers["X-Skillfleet-History"] == "server"
    messages = client.get("/api/chats/e", headers=auth).json["messages"]
    turn_id = edited.headers["X-Skillfleet-Turn"]
    assert [(m["id"], m["role"]) for m in messages] == [
        ("u1", "user"), (messages[1]["id"], "assistant"),
        (f"prompt-{turn_id}", "user"), (turn_id, "assistant"),
    ]  # fmt: skip
    assert messages[2]["parts"] == [{"type": "text", "text": "A fruit?"}]
    assert client.delete("/api/chats/e", headers=auth).status_code == 204
    assert client.get("/api/chats/e", headers=auth).status_code == 404
    with model_standin([text("Fresh.")]) as model:
        use_model(client, auth, model.url)
        chat(client, auth, context, {"id": "e", "messages": [user("u9", "Again")]})
    assert model.requests[0]["messages"][1:] == [{"role": "user", "content": "Again"}]
    assert len(client.get("/api/chats/e", headers=auth).json["messages"]) == 2

"""Agent turns through the real broker, database, Redis and a local OpenAI-compatible server.

Each turn executes in this process (`workers.turns.execute`, what the control worker's task
calls) with dry-run dispatch, so scripts are decided by the broker but not started. The model
stand-in listens on 127.0.0.1, which the settings allow as an operator lists a local model
server in SKILLFLEET_EGRESS_ALLOW.
"""

from __future__ import annotations

import io
import json
import threading
import time

import pytest
from conftest import REDIS_URL, WIPE
from factories import owner_id_of, skill_files, zip_bytes
from fleet import wait_until
from model_standin import model_standin, slow, text, tools
from netguard import watched_connections
from sqlalchemy import select
from trickle import trickling

from relay.naming import turn_stream
from relay.streams import read_stream
from store import modelsettings
from store.db import transaction
from store.egress import Egress
from store.lifecycle import turns as turnstates
from store.limits import MAX_CHAT_HISTORY_TURNS
from store.models import ModelSource, ToolCall, Turn
from store.secrets import Sealer
from store.settings import Settings
from workers import jobruns, turns
from workers.prompts import system_prompt

WORKER = "control@test:1:1"
LOCAL_MODEL = ("127.0.0.1",)
WIPE_CALL = ("run_skill_script", {"skill_name": "wiper", "script": "scripts/wipe.sh",
                                  "arguments": {"node": "web01"}})  # fmt: skip


@pytest.fixture
def settings(tmp_path, database_url) -> Settings:
    return Settings(
        data_dir=tmp_path / "var", database_url=database_url, redis_url=REDIS_URL, dry_run=True,
        egress_allow=LOCAL_MODEL,
    )  # fmt: skip


@pytest.fixture
def context(services, settings):
    return turns.TurnContext(
        services.sessions, services.redis, services.broker, Sealer(settings.keys_dir),
        WORKER, time_limit=20, egress=Egress(settings.egress_allow),
    )  # fmt: skip


def use_model(client, auth, url: str) -> None:
    body = {"base_url": url, "name": "standin", "api_key": "sk-standin-secret"}
    response = client.put("/api/settings/model", headers=auth, json=body)
    assert response.status_code == 200, response.json
    assert first_form(response.json) == {"base_url": url, "name": "standin", "api_key_set": True}
    assert response.json["source"] == "default" and response.json["model"] == "standin"


def first_form(shown: dict) -> dict:
    """The fields the model setting had before it named a source, as it still shows them."""
    return {key: shown[key] for key in ("base_url", "name", "api_key_set")}


def start(client, auth, prompt: str, chat: str = "chat-1", mode: str = "execute") -> str:
    body = {"chat_id": chat, "prompt": prompt, "mode": mode}
    response = client.post("/api/turns", headers=auth, json=body)
    assert response.status_code == 202, response.json
    assert response.json["status"] == "queued"
    return str(response.json["turn_id"])


def in_background(context, turn_id: str) -> threading.Thread:
    thread = threading.Thread(target=turns.execute, args=(context, turn_id), daemon=True)
    thread.start()
    return thread


def sse(client, auth, turn_id: str, last_id: str | None = None) -> list[tuple[str, str, dict]]:
    headers = dict(auth, **({"Last-Event-ID": last_id} if last_id else {}))
    response = client.get(f"/api/turns/{turn_id}/events", headers=headers)
    assert response.status_code == 200
    frames = []
    for block in response.get_data(as_text=True).strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        frames.append((fields["id"], fields["event"], json.loads(fields["data"])))
    return frames


def tool_results(request: dict) -> list[dict]:
    """The tool results a request to the model carried, as the model read them."""
    return [json.loads(m["content"]) for m in request["messages"] if m["role"] == "tool"]


def calls_of(services, turn_id: str) -> list[ToolCall]:
    with services.sessions() as session:
        query = select(ToolCall).where(ToolCall.turn_id == turn_id)
        return list(session.scalars(query.order_by(ToolCall.created_at)))


def test_a_turn_lists_loads_asks_for_approval_waits_and_finishes_after_the_answer(
    client, auth, services, context, wiper
):
    script = [
        tools(("list_skills", {})),
        tools(("load_skill", {"skill_name": "wiper"})),
        tools(WIPE_CALL),
        text("Wiped web01 as you approved."),
    ]
    with model_standin(script) as model:
        use_model(client, auth, model.url)
        turn_id = start(client, auth, "Please wipe web01.")
        thread = in_background(context, turn_id)
        approval = wait_until(
            lambda: client.get("/api/approvals?status=pending", headers=auth).json,
            15, "the turn's script call to wait for approval",
        )[0]  # fmt: skip
        assert client.get(f"/api/turns/{turn_id}", headers=auth).json["status"] == "running"
        answered = client.post(
            f"/api/approvals/{approval['id']}", headers=auth, json={"decision": "approve"}
        )
        assert answered.status_code == 200, answered.json
        thread.join(timeout=20)
    turn = client.get(f"/api/turns/{turn_id}", headers=auth).json
    assert turn["status"] == "succeeded", turn
    assert turn["text"] == "Wiped web01 as you approved." and turn["calls"] == 3
    calls = calls_of(services, turn_id)
    assert [(c.tool, c.status) for c in calls] == [
        ("list_skills", "done"), ("load_skill", "done"), ("run_skill_script", "done")
    ]  # fmt: skip
    assert calls[2].approval_id == approval["id"] and calls[2].rule == "destructive-always-asks"
    # The model saw the governed tools and got every result back, the approved run's included.
    first = model.requests[0]
    names = {tool["function"]["name"] for tool in first["tools"]}
    assert {"list_skills", "load_skill", "run_skill_script"} <= names
    assert first["model"] == "standin" and first["messages"][-1]["content"] == "Please wipe web01."
    last = model.requests[3]["messages"]
    results = [json.loads(m["content"]) for m in last if m["role"] == "tool"]
    assert [r["status"] for r in results] == ["done", "done", "done"]
    assert "wiper" in json.dumps(results[0]["result"])
    assert results[2]["result"]["would_dispatch"]["script"] == "scripts/wipe.sh"
    # The stream: tool events in order, the approval it waited for, the text and the end.
    frames = sse(client, auth, turn_id)
    kinds = [kind for _id, kind, _data in frames]
    assert kinds[0] == "status" and kinds[-1] == "end"
    assert [k for k in kinds if k not in ("text", "step")] == [
        "status", "tool_call", "tool_result", "tool_call", "tool_result",
        "tool_call", "approval", "tool_result", "end",
    ]  # fmt: skip
    approval_frame = next(data for _id, kind, data in frames if kind == "approval")
    assert approval_frame["approval_id"] == approval["id"]
    assert "".join(d["text"] for _id, k, d in frames if k == "text") == turn["text"]
    assert frames[-1][2] == {"status": "succeeded"}
    # A client that reconnects with Last-Event-ID gets only what it missed.
    middle = len(frames) // 2
    assert sse(client, auth, turn_id, last_id=frames[middle][0]) == frames[middle + 1 :]


def test_a_turns_model_requests_share_one_connection_the_model_keeps_open(client, auth, context):
    """A model that keeps connections open, as hosted ones do, gets every request of a turn on
    the first one: one TLS handshake a turn, not one a round."""
    script = [tools(("list_skills", {})), tools(("list_skills", {})), text("Nothing here.")]
    with model_standin(script, keep_alive=True) as model:
        use_model(client, auth, model.url)
        turn_id = start(client, auth, "What skills do I have?")
        assert turns.execute(context, turn_id) == "succeeded"
    assert len(model.requests) == 3
    assert len(set(model.ports)) == 1, model.ports


def test_the_51st_tool_call_of_a_turn_is_refused_and_the_model_hears_why(
    client, auth, services, context
):
    many = tools(*[("list_skills", {}) for _ in range(51)])
    with model_standin([many, text("I stopped at the limit.")]) as model:
        use_model(client, auth, model.url)
        turn_id = start(client, auth, "List the skills 51 times.")
        assert turns.execute(context, turn_id) == "succeeded"
    calls = calls_of(services, turn_id)
    assert [c.status for c in calls] == ["done"] * 50 + ["denied"]
    assert calls[-1].error_code == "policy_denied" and calls[-1].rule == "turn-call-limit"
    results = [
        json.loads(m["content"]) for m in model.requests[1]["messages"] if m["role"] == "tool"
    ]
    assert len(results) == 51 and results[49]["status"] == "done"
    assert results[50]["status"] == "denied"
    assert "already made 50 tool calls" in results[50]["error"]["message"]
    assert client.get(f"/api/turns/{turn_id}", headers=auth).json["calls"] == 51


def test_a_stopped_turn_ends_stopped_with_what_it_said_so_far(client, auth, services, context):
    redis = services.redis
    with model_standin([slow(300, 0.1)]) as model:
        use_model(client, auth, model.url)
        turn_id = start(client, auth, "Talk for a long time.")
        thread = in_background(context, turn_id)
        wait_until(
            lambda: any(e.kind == "text" for e in read_stream(redis, turn_stream(turn_id))),
            10, "the model's first words",
        )  # fmt: skip
        stopped = client.post(f"/api/turns/{turn_id}/stop", headers=auth)
        assert stopped.status_code == 202
        thread.join(timeout=10)
        assert not thread.is_alive()
    turn = client.get(f"/api/turns/{turn_id}", headers=auth).json
    assert turn["status"] == "stopped" and turn["error_code"] == "stopped"
    assert turn["text"].startswith("word0 ") and len(turn["text"].split()) < 300
    assert sse(client, auth, turn_id)[-1][1:] == (
        "end",
        {"status": "stopped", "error": {"code": "stopped", "message": "The turn was stopped."}},
    )
    again = client.post(f"/api/turns/{turn_id}/stop", headers=auth)
    assert again.status_code == 409 and again.json["code"] == "turn_finished"


def test_a_queued_turn_stopped_never_runs(client, auth, services, context):
    with model_standin([text("never sent")]) as model:
        use_model(client, auth, model.url)
        turn_id = start(client, auth, "Hello")
        assert client.post(f"/api/turns/{turn_id}/stop", headers=auth).json["status"] == "stopped"
        assert turns.execute(context, turn_id) is None
        assert model.requests == []
    assert sse(client, auth, turn_id)[-1][2]["status"] == "stopped"


def test_a_turn_past_its_time_limit_ends_timed_out(client, auth, services, context):
    context.time_limit = 1
    with model_standin([slow(100, 0.1)]) as model:
        use_model(client, auth, model.url)
        turn_id = start(client, auth, "Talk for a long time.")
        assert turns.execute(context, turn_id) == "timed_out"
    turn = client.get(f"/api/turns/{turn_id}", headers=auth).json
    assert (
        turn["status"] == "timed_out" and turn["error_message"] == "The turn ran out of time (1 s)."
    )


def test_a_turn_without_a_model_is_refused_with_no_model_and_nothing_is_queued(
    client, auth, agent_auth, services
):
    response = client.post("/api/turns", headers=agent_auth, json={"chat_id": "c", "prompt": "hi"})
    assert response.status_code == 409 and response.json["code"] == "no_model"
    with services.sessions() as session:
        assert session.scalars(select(Turn)).all() == []


def test_a_second_turn_in_a_busy_chat_is_refused(client, auth, agent_auth):
    use_model(client, auth, "http://127.0.0.1:9/v1")
    start(client, agent_auth, "first", chat="busy")
    response = client.post(
        "/api/turns", headers=agent_auth, json={"chat_id": "busy", "prompt": "2"}
    )
    assert response.status_code == 409 and response.json["code"] == "turn_active"


def test_model_settings_are_owner_only_and_the_key_is_kept_encrypted(
    client, auth, agent_auth, services, settings
):
    refused = client.put(
        "/api/settings/model", headers=agent_auth, json={"base_url": "http://x/v1", "name": "m"}
    )
    assert refused.status_code == 403 and refused.json["code"] == "owner_only"
    use_model(client, auth, "http://127.0.0.1:8000/v1")
    with services.sessions() as session:
        [row] = session.scalars(select(ModelSource)).all()
    assert "sk-standin-secret" not in row.api_key
    assert Sealer(settings.keys_dir).unseal(row.api_key) == "sk-standin-secret"
    key_file = settings.keys_dir / "secrets.key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    # Sending no key keeps the stored one; a bad URL is refused and changes nothing.
    kept = client.put(
        "/api/settings/model", headers=auth,
        json={"base_url": "http://127.0.0.1:1/v1", "name": "other"},
    )  # fmt: skip
    assert first_form(kept.json) == {
        "base_url": "http://127.0.0.1:1/v1", "name": "other", "api_key_set": True
    }  # fmt: skip
    bad = client.put("/api/settings/model", headers=auth, json={"base_url": "ftp://h", "name": "m"})
    assert bad.status_code == 422 and bad.json["code"] == "invalid_setting"
    assert client.get("/api/settings/model", headers=auth).json["name"] == "other"


def test_a_model_that_cannot_be_reached_fails_the_turn_with_one_clear_line(client, auth, context):
    use_model(client, auth, "http://127.0.0.1:9/v1")
    turn_id = start(client, auth, "hi")
    assert turns.execute(context, turn_id) == "failed"
    turn = client.get(f"/api/turns/{turn_id}", headers=auth).json
    assert turn["error_code"] == "model_failed"
    assert turn["error_message"] == "The model at http://127.0.0.1:9/v1 can't be reached."


# Model addresses the operator did not allow (it allows 127.0.0.1 only), and why each is refused.
REFUSED_MODELS = [
    ("http://127.0.0.2:8000/v1", "'127.0.0.2' is 127.0.0.2, a loopback address"),
    ("http://[::1]:11434/v1", "'::1' is ::1, a loopback address"),
    ("http://2130706434/v1", "'2130706434' is 127.0.0.2, a loopback address"),
    ("http://10.0.0.7/v1", "'10.0.0.7' is 10.0.0.7, a private address"),
    ("http://169.254.169.254/latest/v1", "is 169.254.169.254, a link-local address"),
    ("http://metadata.google.internal/v1", "is a name of a local network"),
    ("http://localhost:11434/v1", "'localhost' is a name of a local network"),
    ("http://192.0.0.8/v1", "is 192.0.0.8, the IPv4 dummy address"),
]


def test_a_model_address_on_loopback_private_or_metadata_is_refused_and_settings_unchanged(
    client, auth, services, settings
):
    use_model(client, auth, "http://127.0.0.1:8000/v1")  # the operator allows this one

    with watched_connections() as connections:
        answers = [
            client.put(
                "/api/settings/model",
                headers=auth,
                json={"base_url": url, "name": "other", "api_key": "sk-other"},
            )  # fmt: skip
            for url, _reason in REFUSED_MODELS
        ]

    for answer, (url, reason) in zip(answers, REFUSED_MODELS, strict=True):
        assert answer.status_code == 422, url
        assert answer.json["code"] == "model_url_refused", url
        assert answer.json["message"].startswith("'model.base_url' is refused: "), url
        assert reason in answer.json["message"], url
        assert "SKILLFLEET_EGRESS_ALLOW" in answer.json["message"], url
    shown = first_form(client.get("/api/settings/model", headers=auth).json)
    assert shown == {"base_url": "http://127.0.0.1:8000/v1", "name": "standin", "api_key_set": True}
    with services.sessions() as session:
        [row] = session.scalars(select(ModelSource)).all()
    assert Sealer(settings.keys_dir).unseal(row.api_key) == "sk-standin-secret"
    assert {port for _host, port in connections} <= {5432, 6379}


def test_a_model_name_that_now_resolves_to_a_private_address_fails_the_turn_unsent(
    client, auth, services, settings, context
):
    # Public when the owner set it; the name now answers 10.0.0.1 (DNS changes).
    with transaction(services.sessions) as session:
        modelsettings.save(
            session, Sealer(settings.keys_dir), owner_id_of(services),
            "https://models.example.org/v1", "m", "sk-secret", keep_key=False,
        )  # fmt: skip
    context.egress = Egress(LOCAL_MODEL, resolver=lambda host, port: ["10.0.0.1"])
    turn_id = start(client, auth, "hi")

    with watched_connections() as connections:
        assert turns.execute(context, turn_id) == "failed"

    turn = client.get(f"/api/turns/{turn_id}", headers=auth).json
    assert turn["error_code"] == "model_url_refused"
    assert turn["error_message"].startswith(
        "The model at https://models.example.org/v1 is refused: "
        "'models.example.org' resolves to 10.0.0.1, a private address"
    )
    assert {port for _host, port in connections} <= {5432, 6379}


def test_a_local_model_server_is_used_only_while_the_operator_allows_it(client, auth, context):
    with model_standin([text("Hello from the local model.")] * 2) as model:
        use_model(client, auth, model.url)
        allowed = start(client, auth, "hi")
        assert turns.execute(context, allowed) == "succeeded"
        context.egress = Egress()  # a worker whose operator lists no local model server
        refused = start(client, auth, "hi again")
        assert turns.execute(context, refused) == "failed"

    assert len(model.requests) == 1
    turn = client.get(f"/api/turns/{refused}", headers=auth).json
    assert turn["error_code"] == "model_url_refused"
    assert "'127.0.0.1' is 127.0.0.1, a loopback address" in turn["error_message"]


def test_a_model_server_trickling_its_headers_ends_the_turn_at_its_time_limit(
    client, auth, context
):
    context.time_limit = 2
    with trickling("head", every=0.5) as slow:
        use_model(client, auth, f"{slow.url}/v1")
        turn_id = start(client, auth, "hi")
        started = time.monotonic()
        assert turns.execute(context, turn_id) == "timed_out"
        took = time.monotonic() - started
        assert slow.left.wait(10), "the model's connection was kept open after the turn"

    assert slow.requests == 1 and slow.sent >= 2  # it answered, a byte at a time
    assert 2 <= took < 6
    turn = client.get(f"/api/turns/{turn_id}", headers=auth).json
    assert turn["error_message"] == "The turn ran out of time (2 s)."


def test_a_job_prompt_step_runs_an_agent_turn_end_to_end(client, auth, services, settings):
    job_context = jobruns.JobContext(
        services.sessions, services.redis, services.broker, worker=WORKER, step_limit=5,
        sealer=Sealer(settings.keys_dir), turn_limit=20, egress=Egress(settings.egress_allow),
    )  # fmt: skip
    body = {"name": "morning", "cron": "0 7 * * *", "time_zone": "UTC",
            "steps": [{"prompt": "What skills do I have?"}, {"tool": "refresh_skills"}],
            "grants": {"tools": [], "skills": []}}  # fmt: skip
    job = client.post("/api/jobs", headers=auth, json=body).json
    with model_standin([tools(("list_skills", {})), text("You have the built-ins.")]) as model:
        use_model(client, auth, model.url)
        started = client.post(f"/api/jobs/{job['id']}/run", headers=auth).json
        assert jobruns.execute(job_context, started["job_run_id"]) == "succeeded"
    [run] = client.get(f"/api/jobs/{job['id']}/runs", headers=auth).json
    prompt_step = run["steps"][0]
    assert run["status"] == "succeeded" and prompt_step["status"] == "done"
    assert prompt_step["kind"] == "prompt" and prompt_step["calls"] == 1
    turn = client.get(f"/api/turns/{prompt_step['turn_id']}", headers=auth).json
    assert turn["text"] == "You have the built-ins." and turn["job_run_id"] == run["id"]
    [call] = calls_of(services, turn["turn_id"])
    assert call.job_run_id == run["id"] and call.tool == "list_skills" and call.status == "done"
    assert "nobody is watching" in model.requests[0]["messages"][0]["content"]


def test_a_job_prompt_step_without_a_model_fails_with_no_model(client, auth, services, settings):
    job_context = jobruns.JobContext(
        services.sessions, services.redis, services.broker, worker=WORKER, step_limit=5,
        sealer=Sealer(settings.keys_dir),
    )  # fmt: skip
    body = {"name": "m", "cron": "0 7 * * *", "time_zone": "UTC",
            "steps": [{"prompt": "hi"}], "grants": {"tools": [], "skills": []}}  # fmt: skip
    job = client.post("/api/jobs", headers=auth, json=body).json
    started = client.post(f"/api/jobs/{job['id']}/run", headers=auth).json
    assert jobruns.execute(job_context, started["job_run_id"]) == "failed"
    [run] = client.get(f"/api/jobs/{job['id']}/runs", headers=auth).json
    assert run["error_code"] == "no_model" and run["error_message"] == jobruns.NO_MODEL


def test_a_garbage_last_event_id_is_refused_and_a_future_one_replays_the_turn_from_the_start(
    client, auth, context
):
    with model_standin([text("All good.")]) as model:
        use_model(client, auth, model.url)
        turn_id = start(client, auth, "How are things?")
        assert turns.execute(context, turn_id) == "succeeded"
    path = f"/api/turns/{turn_id}/events"
    for garbage in ("garbage", "1-2-3", "99999999999999999999999-0", "-1-0", "12"):
        refused = client.get(path, headers={**auth, "Last-Event-ID": garbage})
        assert refused.status_code == 400, (garbage, refused.json)
        assert refused.json["code"] == "invalid_event_id"
        assert "Last-Event-ID" in refused.json["message"]
    future = f"{int(time.time() * 1000) + 10**9}-0"
    assert sse(client, auth, turn_id, last_id=future) == sse(client, auth, turn_id)
    assert sse(client, auth, turn_id)[-1][1:] == ("end", {"status": "succeeded"})


def test_a_finished_turn_whose_stream_expired_replays_from_its_row(client, auth, services, context):
    with model_standin([text("All good.")]) as model:
        use_model(client, auth, model.url)
        turn_id = start(client, auth, "How are things?")
        assert turns.execute(context, turn_id) == "succeeded"
    services.redis.delete(turn_stream(turn_id))  # what an hour does
    assert [(kind, data) for _id, kind, data in sse(client, auth, turn_id)] == [
        ("text", {"text": "All good."}),
        ("end", {"status": "succeeded"}),
    ]


def test_a_turn_whose_control_worker_vanished_is_interrupted_and_the_owner_told(
    client, auth, services, redis_client
):
    from factories import owner_id_of

    from relay import events, naming

    owner = owner_id_of(services)
    redis_client.delete(naming.owner_events(owner))
    use_model(client, auth, "http://127.0.0.1:9/v1")
    turn_id = start(client, auth, "hello")
    with transaction(services.sessions) as session:
        assert turnstates.claim(session, turn_id, "control@gone:1:1") is not None
    assert turns.reap(services.sessions, services.redis) == [turn_id]
    turn = client.get(f"/api/turns/{turn_id}", headers=auth).json
    assert turn["status"] == "interrupted" and turn["error_code"] == "interrupted"
    [event] = events.read(redis_client, owner)
    assert event.kind == "turn.interrupted" and event.data["turn_id"] == turn_id
    assert sse(client, auth, turn_id)[-1][2]["status"] == "interrupted"


LOAD_WIPER = ("load_skill", {"skill_name": "wiper"})
READ_GUIDE = ("read_skill_resource", {"skill_name": "wiper", "path": "references/guide.md"})


def test_a_skill_loaded_in_one_turn_is_in_the_next_turns_context_and_a_repeat_load_says_so(
    client, auth, context, wiper
):
    first = [tools(LOAD_WIPER, READ_GUIDE), text("Loaded.")]
    second = [tools(LOAD_WIPER), text("I still have it.")]
    with model_standin(first + second) as model:
        use_model(client, auth, model.url)
        assert turns.execute(context, start(client, auth, "Load wiper.")) == "succeeded"
        assert turns.execute(context, start(client, auth, "Wipe web01.")) == "succeeded"
    skill, resource = (r["result"]["content"] for r in tool_results(model.requests[1]))
    assert skill.startswith('<skill_content name="wiper">') and "Follow these steps." in skill
    assert resource == (
        '<skill_resource name="wiper" path="references/guide.md">\n# Guide\n\nRead me.\n\n'
        "</skill_resource>"
    )
    # Turn 2 starts from the history's prompts and answers, without turn 1's tool results, and
    # with the skill and the resource exactly as turn 1 got them.
    messages = model.requests[2]["messages"]
    assert [(m["role"], m["content"]) for m in messages[1:]] == [
        ("user", "Load wiper."), ("assistant", "Loaded."), ("user", "Wipe web01."),
    ]  # fmt: skip
    assert messages[0]["role"] == "system"
    assert skill in messages[0]["content"] and resource in messages[0]["content"]
    [repeat] = tool_results(model.requests[3])
    assert repeat["status"] == "done" and repeat["result"]["already_loaded"] is True
    assert '<skill_content name="wiper">' in repeat["result"]["note"]


def test_a_loaded_skill_stays_in_context_after_its_turn_left_the_chats_history(
    client, auth, context, wiper
):
    later = [f"Question {n}." for n in range(MAX_CHAT_HISTORY_TURNS + 1)]
    script = [tools(LOAD_WIPER), text("Loaded.")] + [text("Fine.") for _ in later]
    with model_standin(script) as model:
        use_model(client, auth, model.url)
        for prompt in ["Load wiper.", *later]:
            assert turns.execute(context, start(client, auth, prompt)) == "succeeded"
    [loaded] = tool_results(model.requests[1])
    messages = model.requests[-1]["messages"]
    shown = [m["content"] for m in messages[1:]]
    assert "Load wiper." not in shown and shown[:2] == ["Question 0.", "Fine."]
    assert len(shown) == 2 * MAX_CHAT_HISTORY_TURNS + 1  # the history was cut
    assert loaded["result"]["content"] in messages[0]["content"]


def test_a_skill_changed_or_disabled_since_it_was_loaded_is_not_carried(
    client, auth, context, wiper
):
    script = [
        tools(LOAD_WIPER, READ_GUIDE), text("Loaded."),
        text("Nothing carried."),
        tools(LOAD_WIPER), text("Loaded the new one."),
    ]  # fmt: skip
    with model_standin(script) as model:
        use_model(client, auth, model.url)
        assert turns.execute(context, start(client, auth, "Load wiper.")) == "succeeded"
        disabled = client.put(
            "/api/skills/wiper/enabled", headers=auth,
            json={"enabled": False, "hash": wiper["hash"]},
        )  # fmt: skip
        assert disabled.status_code == 200, disabled.json
        assert turns.execute(context, start(client, auth, "Anything?")) == "succeeded"
        files = skill_files("wiper", metadata=WIPE)
        files["references/guide.md"] = b"# Guide\n\nThe new guide.\n"
        replaced = client.post(
            "/api/skills?replace=true", headers=auth, content_type="multipart/form-data",
            data={"file": (io.BytesIO(zip_bytes(files, top="wiper")), "s.zip")},
        )  # fmt: skip
        assert replaced.status_code == 201, replaced.json
        assert turns.execute(context, start(client, auth, "Load it again.")) == "succeeded"
    assert "<skill_" not in model.requests[2]["messages"][0]["content"]  # disabled
    assert "<skill_" not in model.requests[3]["messages"][0]["content"]  # another hash
    [again] = tool_results(model.requests[4])
    assert again["result"]["hash"] == replaced.json["hash"] != wiper["hash"]
    assert again["result"]["content"].startswith('<skill_content name="wiper">')


def test_a_plan_turn_starts_with_the_plan_prompt_and_its_change_calls_are_refused(
    client, auth, context, wiper
):
    with model_standin([tools(WIPE_CALL), text("Here is the plan.")]) as model:
        use_model(client, auth, model.url)
        turn_id = start(client, auth, "Plan the tidy-up.", mode="plan")
        assert turns.execute(context, turn_id) == "succeeded"
    system = model.requests[0]["messages"][0]
    assert system["role"] == "system" and system["content"] == system_prompt("plan")
    [refused] = tool_results(model.requests[1])
    assert refused["status"] == "denied", refused

"""Turns on model sources: a minted LiteLLM key minted again once when refused, reasoning
effort only where the source takes it, and the context tier bounding the history sent.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from conftest import REDIS_URL
from factories import owner_id_of
from litellm_standin import MASTER_KEY, litellm_standin
from model_standin import model_standin, text

from broker.modelaccess import LiteLLM
from store.db import transaction
from store.egress import Egress
from store.models import Turn, utcnow
from store.secrets import Sealer
from store.settings import Settings
from workers import jobruns, turns

WORKER = "control@test:1:1"


@pytest.fixture
def litellm():
    with litellm_standin() as proxy:
        yield proxy


@pytest.fixture
def settings(tmp_path, database_url, litellm) -> Settings:
    return Settings(
        data_dir=tmp_path / "var", database_url=database_url, redis_url=REDIS_URL, dry_run=True,
        egress_allow=("127.0.0.1",), litellm_url=litellm.url, litellm_master_key=MASTER_KEY,
    )  # fmt: skip


@pytest.fixture
def context(services, settings):
    return turns.TurnContext(
        services.sessions, services.redis, services.broker, Sealer(settings.keys_dir),
        WORKER, time_limit=20, egress=Egress(settings.egress_allow),
        litellm=LiteLLM.of(settings),
    )  # fmt: skip


def start(client, auth, prompt: str, chat: str = "chat-1") -> str:
    response = client.post("/api/turns", headers=auth, json={"chat_id": chat, "prompt": prompt})
    assert response.status_code == 202, response.json
    return str(response.json["turn_id"])


def pick(client, auth, **body) -> None:
    answer = client.put("/api/settings/model", headers=auth, json=body)
    assert answer.status_code == 200, answer.json


def test_a_turn_on_a_refused_virtual_key_mints_a_new_one_once_and_succeeds(
    client, auth, context, litellm
):
    team = {"name": "team", "kind": "litellm", "virtual_key": True}
    assert client.post("/api/model-sources", headers=auth, json=team).status_code == 201
    pick(client, auth, source="team", model="local-llama")
    first = start(client, auth, "hi")
    assert turns.execute(context, first) == "succeeded"
    litellm.revoke()
    second = start(client, auth, "hi again")
    assert turns.execute(context, second) == "succeeded"
    assert litellm.minted == ["sk-virtual-1", "sk-virtual-2"]
    assert client.get(f"/api/turns/{second}", headers=auth).json["text"] == "Hello from LiteLLM."


def test_a_virtual_key_refused_again_after_a_new_mint_fails_the_turn_as_a_refused_key(
    client, auth, context, litellm
):
    client.post("/api/model-sources", headers=auth,
                json={"name": "team", "kind": "litellm", "virtual_key": True})  # fmt: skip
    pick(client, auth, source="team", model="local-llama")
    litellm.refuse_everything = True
    turn_id = start(client, auth, "hi")
    assert turns.execute(context, turn_id) == "failed"
    turn = client.get(f"/api/turns/{turn_id}", headers=auth).json
    assert turn["error_code"] == "model_key_refused"
    assert "HTTP 401 (Unauthorized)" in turn["error_message"]
    assert len(litellm.minted) == 2 and len(litellm.chats) == 2


@pytest.mark.parametrize(
    ("flag", "model", "sent"),
    [(None, "gpt-5-mini", True), (None, "openai/o3", True), (None, "llama3", False),
     (True, "llama3", True), (False, "gpt-5", False)],
)  # fmt: skip
def test_reasoning_effort_goes_only_where_the_source_takes_it(
    client, auth, context, flag, model, sent
):
    with model_standin([text("ok")]) as standin:
        client.post("/api/model-sources", headers=auth,
                    json={"name": "m", "base_url": standin.url,
                          "takes_reasoning_effort": flag})  # fmt: skip
        pick(client, auth, source="m", model=model, reasoning_effort="low")
        assert turns.execute(context, start(client, auth, "hi")) == "succeeded"
    request = standin.requests[0]
    assert request["model"] == model
    assert request.get("reasoning_effort") == ("low" if sent else None)


def test_the_context_tier_drops_the_oldest_history_and_keeps_the_system_prompt_and_prompt(
    client, auth, services, context
):
    owner = client.get("/api/settings/model", headers=auth)  # the owner exists
    assert owner.status_code == 200
    now = utcnow()
    with transaction(services.sessions) as session:
        for age, letter in ((3, "a"), (2, "b"), (1, "c")):
            session.add(Turn(
                id=str(uuid.uuid4()), owner_id=owner_id_of(services), chat_id="long",
                prompt=f"question {letter}", status="succeeded", text=letter * 60_000,
                created_at=now - timedelta(minutes=age),
            ))  # fmt: skip
    with model_standin([text("ok"), text("ok")]) as standin:
        client.post("/api/model-sources", headers=auth, json={"name": "m", "base_url": standin.url})
        pick(client, auth, source="m", model="llama3", context="medium")
        assert turns.execute(context, start(client, auth, "now", chat="long")) == "succeeded"
        pick(client, auth, source="m", model="llama3", context=None)
        assert turns.execute(context, start(client, auth, "unbounded", chat="long")) == "succeeded"
    bounded, unbounded = (r["messages"] for r in standin.requests)
    assert bounded[0]["role"] == "system" and bounded[-1]["content"] == "now"
    assert [m["content"] for m in bounded if m["role"] == "user"] == ["question c", "now"]
    assert sum(len(m["content"] or "") for m in bounded) // 4 <= 32_768 * 3 // 4
    asked = [m["content"] for m in unbounded if m["role"] == "user"]
    assert asked == ["question a", "question b", "question c", "now", "unbounded"]


def test_a_jobs_prompt_step_runs_on_the_jobs_own_model(client, auth, services, settings, litellm):
    job_context = jobruns.JobContext(
        services.sessions, services.redis, services.broker, worker=WORKER, step_limit=5,
        sealer=Sealer(settings.keys_dir), turn_limit=20, egress=Egress(settings.egress_allow),
        litellm=LiteLLM.of(settings),
    )  # fmt: skip
    with model_standin([text("from the default")]) as default:
        client.post("/api/model-sources", headers=auth, json={"name": "d", "base_url": default.url})
        pick(client, auth, source="d", model="llama3")
        team = {"name": "team", "kind": "litellm", "virtual_key": True}
        assert client.post("/api/model-sources", headers=auth, json=team).status_code == 201
        body = {"name": "j", "cron": "0 7 * * *", "steps": [{"prompt": "hi"}],
                "source": "team", "model": "gpt-5-mini", "reasoning_effort": "high"}  # fmt: skip
        job = client.post("/api/jobs", headers=auth, json=body).json
        started = client.post(f"/api/jobs/{job['id']}/run", headers=auth).json
        assert jobruns.execute(job_context, started["job_run_id"]) == "succeeded"
    assert default.requests == []
    [request] = litellm.chats
    assert request["model"] == "gpt-5-mini" and request["reasoning_effort"] == "high"

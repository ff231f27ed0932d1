"""Turns with real processes: the API over HTTP, the control worker's task, SSE over HTTP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REDIS_URL
from fleet import fleet
from model_standin import model_standin, text, tools

from relay import naming
from store.settings import Settings

pytestmark = pytest.mark.fleet


def follow(client, turn_id: str) -> list[tuple[str | None, dict]]:
    """The turn's SSE frames over HTTP, up to its end."""
    frames: list[tuple[str | None, dict]] = []
    with client.stream("GET", f"/api/turns/{turn_id}/events") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        kind = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                frames.append((kind, json.loads(line[6:])))
                if kind == "end":
                    break
    return frames


def test_the_control_worker_runs_a_posted_turn_and_its_events_stream_over_sse(
    tmp_path: Path, database_url: str
):
    settings = Settings(
        data_dir=tmp_path / "var", database_url=database_url, redis_url=REDIS_URL,
        egress_allow=("127.0.0.1",),  # the model stand-in, as an operator allows a local model
    )  # fmt: skip
    script = [
        tools(("list_skills", {}), ("load_skill", {"skill_name": "skill-authoring"})),
        text("You have the skill-authoring skill."),
        text("Still following it."),  # the chat's next turn
    ]
    with model_standin(script) as model, fleet(settings) as running:
        running.start("control", "worker", "control")
        running.wait_for_queue(naming.CONTROL)
        with running.http() as client:
            body = {"base_url": model.url, "name": "standin", "api_key": "sk-fleet"}
            assert client.put("/api/settings/model", json=body).status_code == 200
            started = client.post(
                "/api/turns", json={"chat_id": "panel", "prompt": "What can you do?"}
            )
            assert started.status_code == 202, started.text
            turn_id = started.json()["turn_id"]
            frames = follow(client, turn_id)
            turn = client.get(f"/api/turns/{turn_id}").json()
            again = client.post("/api/turns", json={"chat_id": "panel", "prompt": "And now?"})
            assert again.status_code == 202, again.text
            assert follow(client, again.json()["turn_id"])[-1] == ("end", {"status": "succeeded"})
    kinds = [kind for kind, _data in frames if kind not in ("text", "step")]
    assert kinds == [
        "status", "tool_call", "tool_result", "tool_call", "tool_result", "end"
    ], running.log_text("control")  # fmt: skip
    assert frames[-1][1] == {"status": "succeeded"}
    assert turn["status"] == "succeeded" and turn["calls"] == 2
    assert turn["text"] == "You have the skill-authoring skill."
    assert model.headers[0].get("authorization", model.headers[0].get("Authorization")) == (
        "Bearer sk-fleet"
    )  # the key, decrypted by the worker from the shared data dir
    # The chat's next turn, on the worker, starts with the skill the first one loaded.
    messages = model.requests[1]["messages"]
    _listed, load = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
    loaded = load["result"]["content"]
    assert loaded.startswith('<skill_content name="skill-authoring">')
    assert loaded in model.requests[2]["messages"][0]["content"]

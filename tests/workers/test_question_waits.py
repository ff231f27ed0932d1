"""An agent turn and a job run wait for ask_owner's answer like they wait for an approval; a
stopped turn cancels its question.

Turns and job runs execute in this process (what the control worker's tasks call), with a
local OpenAI-compatible stand-in for the model, which the settings allow.
"""

from __future__ import annotations

from fleet import wait_until
from model_standin import model_standin, text, tools
from test_job_runs import create, run_now, shown_run
from test_turns import (
    calls_of,
    context,
    in_background,
    settings,
    start,
    tool_results,
    use_model,
)

from workers import jobruns

WORKER = "control@test:1:1"
__all__ = ["context", "settings"]  # the turns' fixtures (a model on 127.0.0.1 allowed), shared
ASK = ("ask_owner", {"question": "Which branch?", "choices": ["main", "dev"]})


def pending(client, auth) -> list[dict]:
    return list(client.get("/api/questions?status=pending", headers=auth).json)


def test_a_turn_waits_for_the_owners_answer_and_the_model_reads_it(client, auth, services, context):
    with model_standin([tools(ASK), text("Deploying dev.")]) as model:
        use_model(client, auth, model.url)
        turn_id = start(client, auth, "Deploy something.")
        thread = in_background(context, turn_id)
        [question] = wait_until(lambda: pending(client, auth), 15, "the turn's question")
        assert question["turn_id"] == turn_id
        answered = client.post(
            f"/api/questions/{question['id']}", headers=auth, json={"answer": "dev"}
        )
        assert answered.status_code == 200, answered.json
        thread.join(timeout=20)
        [_first, second] = model.requests
    turn = client.get(f"/api/turns/{turn_id}", headers=auth).json
    assert turn["status"] == "succeeded" and turn["text"] == "Deploying dev."
    [result] = tool_results(second)
    assert result["status"] == "done" and result["result"] == {"answer": "dev"}


def test_a_stopped_turn_cancels_its_question_and_the_call_says_why(client, auth, services, context):
    with model_standin([tools(ASK), text("never read")]) as model:
        use_model(client, auth, model.url)
        turn_id = start(client, auth, "Ask me something.")
        thread = in_background(context, turn_id)
        [question] = wait_until(lambda: pending(client, auth), 15, "the turn's question")
        assert client.post(f"/api/turns/{turn_id}/stop", headers=auth).status_code == 202
        thread.join(timeout=20)
    assert client.get(f"/api/turns/{turn_id}", headers=auth).json["status"] == "stopped"
    shown = client.get(f"/api/questions/{question['id']}", headers=auth).json
    assert shown["status"] == "cancelled"
    [call] = calls_of(services, turn_id)
    assert call.status == "failed" and call.error_code == "question_cancelled"
    assert "the turn was stopped" in (call.error_message or "")
    late = client.post(f"/api/questions/{question['id']}", headers=auth, json={"answer": "main"})
    assert late.status_code == 409


def test_a_job_run_waits_on_a_question_and_carries_on_after_the_answer(
    client, auth, services, wiper
):
    context = jobruns.JobContext(
        services.sessions, services.redis, services.broker, worker=WORKER, step_limit=5
    )
    job = create(client, auth, [{"tool": ASK[0], "arguments": ASK[1]}, {"tool": "list_skills"}])
    run = run_now(client, auth, context, job)
    assert run["status"] == "waiting" and run["step"] == 0
    [question] = pending(client, auth)
    assert question["job_run_id"] == run["id"]
    assert jobruns.execute(context, run["id"]) is None  # still waiting: nothing happens
    answered = client.post(
        f"/api/questions/{question['id']}", headers=auth, json={"answer": "main"}
    )
    assert answered.status_code == 200, answered.json
    assert jobruns.settled_waiting(services.sessions) == [run["id"]]
    assert jobruns.execute(context, run["id"]) == "succeeded"
    done = shown_run(client, auth, job, run["id"])
    assert [step["status"] for step in done["steps"]] == ["done", "done"]

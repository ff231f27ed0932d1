"""Job runs through the real broker and database: grants, waiting, expiry, history, the tick.

The run's steps execute in this process (`workers.jobruns.execute`, what the control worker's
task calls) with dry-run dispatch, so scripts are decided by the broker but not started.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select, update

from broker.approvals import expire_due
from relay import events
from store.cron import next_time
from store.db import transaction
from store.models import Approval, Job, JobRun, ToolCall, utcnow
from workers import jobruns

WIPE_STEP = {
    "tool": "run_skill_script",
    "arguments": {"skill_name": "wiper", "script": "scripts/wipe.sh",
                  "arguments": {"node": "web01"}},
}  # fmt: skip
WORKER = "control@test:1:1"


@pytest.fixture
def context(services):
    return jobruns.JobContext(
        services.sessions, services.redis, services.broker, worker=WORKER, step_limit=5
    )


@pytest.fixture
def feed(services, redis_client):
    """The owner's event feed, emptied first (Redis outlives the test database)."""
    from factories import owner_id_of

    from relay import naming
    from workers.notify import WEBHOOK_KINDS

    owner = owner_id_of(services)
    redis_client.delete(naming.owner_events(owner))
    # Notices only: the feed also carries state changes for frontends (approval.created...).
    notices = (*WEBHOOK_KINDS, "job_run.waiting")
    return lambda: [(e.kind, e.data) for e in events.read(redis_client, owner) if e.kind in notices]


def create(client, auth, steps, grants=None, skills=("wiper",), cron="0 3 * * *") -> dict:
    body = {
        "name": "nightly",
        "cron": cron,
        "time_zone": "Europe/Berlin",
        "steps": steps,
        "grants": grants or {"tools": [], "skills": []},
        "skills": list(skills),
    }
    response = client.post("/api/jobs", headers=auth, json=body)
    assert response.status_code == 201, response.json
    return dict(response.json)


def run_now(client, auth, context, job: dict) -> dict:
    started = client.post(f"/api/jobs/{job['id']}/run", headers=auth)
    assert started.status_code == 202, started.json
    jobruns.execute(context, started.json["job_run_id"])
    return shown_run(client, auth, job, started.json["job_run_id"])


def shown_run(client, auth, job: dict, run_id: str) -> dict:
    runs = client.get(f"/api/jobs/{job['id']}/runs", headers=auth).json
    return next(run for run in runs if run["id"] == run_id)


def calls_of(services, run_id: str) -> list[ToolCall]:
    with services.sessions() as session:
        query = select(ToolCall).where(ToolCall.job_run_id == run_id)
        return list(session.scalars(query.order_by(ToolCall.created_at)))


def test_a_granted_destructive_step_runs_without_asking(client, auth, services, context, wiper):
    job = create(client, auth, [WIPE_STEP], grants={"tools": [], "skills": ["wiper"]})
    run = run_now(client, auth, context, job)
    assert run["status"] == "succeeded", run
    assert [step["status"] for step in run["steps"]] == ["done"]
    [call] = calls_of(services, run["id"])
    assert call.rule == "job-granted" and call.status == "done"
    assert client.get("/api/approvals", headers=auth).json == []


def test_an_ungranted_destructive_step_waits_and_always_saves_the_grant_to_the_job(
    client, auth, services, context, wiper, feed
):
    job = create(client, auth, [{"tool": "list_skills"}, WIPE_STEP])
    run = run_now(client, auth, context, job)
    assert run["status"] == "waiting" and run["step"] == 1 and run["approval_id"]
    [approval] = client.get("/api/approvals?status=pending", headers=auth).json
    assert approval["id"] == run["approval_id"] and approval["job_run_id"] == run["id"]
    assert feed()[0][0] == "approval.waiting" and feed()[0][1]["approval_id"] == approval["id"]
    assert feed()[1:] == [
        (
            "job_run.waiting",
            {"job_id": job["id"], "job_name": "nightly", "job_run_id": run["id"],
             "status": "waiting", "message": "Step 2 (run_skill_script) waits for your approval.",
             "approval_id": approval["id"]},
        )
    ]  # fmt: skip
    assert jobruns.execute(context, run["id"]) is None  # still waiting: nothing happens
    answered = client.post(
        f"/api/approvals/{approval['id']}", headers=auth, json={"decision": "approve_for_chat"}
    )
    assert answered.status_code == 200, answered.json
    assert jobruns.settled_waiting(services.sessions) == [run["id"]]
    assert jobruns.execute(context, run["id"]) == "succeeded"
    assert shown_run(client, auth, job, run["id"])["status"] == "succeeded"
    shown = client.get(f"/api/jobs/{job['id']}", headers=auth).json
    assert shown["grants"]["skills"] == [f"wiper@{wiper['hash']}"]  # the job's, not the run's
    again = run_now(client, auth, context, job)
    assert again["status"] == "succeeded"
    assert calls_of(services, again["id"])[-1].rule == "job-granted"
    assert client.get("/api/approvals?status=pending", headers=auth).json == []


def test_an_approval_nobody_answers_in_30_minutes_leaves_the_run_unanswered(
    client, auth, services, context, wiper, feed
):
    job = create(client, auth, [WIPE_STEP, {"tool": "list_skills"}])
    run = run_now(client, auth, context, job)
    assert run["status"] == "waiting"
    with transaction(services.sessions) as session:
        session.execute(update(Approval).values(expires_at=utcnow() - timedelta(seconds=1)))
        assert expire_due(session) == 1
    assert jobruns.settled_waiting(services.sessions) == [run["id"]]
    assert jobruns.execute(context, run["id"]) == "unanswered"
    ended = shown_run(client, auth, job, run["id"])
    assert ended["status"] == "unanswered" and ended["error_code"] == "approval_expired"
    assert ended["finished_at"] and len(calls_of(services, run["id"])) == 1  # step 2 never ran
    assert [kind for kind, _ in feed()] == [
        "approval.waiting", "job_run.waiting", "job_run.unanswered"
    ]  # fmt: skip
    assert jobruns.settled_waiting(services.sessions) == []


def test_a_denied_step_fails_the_run(client, auth, services, context, wiper, feed):
    job = create(client, auth, [WIPE_STEP])
    run = run_now(client, auth, context, job)
    client.post(f"/api/approvals/{run['approval_id']}", headers=auth, json={"decision": "deny"})
    assert jobruns.execute(context, run["id"]) == "failed"
    ended = shown_run(client, auth, job, run["id"])
    assert ended["status"] == "failed" and ended["error_code"] == "owner_denied"
    assert feed()[-1][0] == "job_run.failed"


def test_the_first_failed_step_stops_the_run(client, auth, services, context, wiper):
    broken = {"tool": "run_skill_script",
              "arguments": {"skill_name": "wiper", "script": "scripts/gone.sh"}}  # fmt: skip
    job = create(client, auth, [{"tool": "list_skills"}, broken, {"tool": "list_skills"}])
    run = run_now(client, auth, context, job)
    assert run["status"] == "failed" and run["error_code"] == "script_not_found"
    assert [step["status"] for step in run["steps"]] == ["done", "failed"]
    assert len(calls_of(services, run["id"])) == 2


def test_a_prompt_step_without_a_model_fails_with_no_model(client, auth, services, context, feed):
    job = create(
        client, auth, [{"prompt": "Summarise the night."}, {"tool": "list_skills"}], skills=()
    )
    run = run_now(client, auth, context, job)
    assert run["status"] == "failed" and run["error_code"] == "no_model"
    assert run["error_message"].count(".") == 1 and "No model is configured" in run["error_message"]
    assert calls_of(services, run["id"]) == []
    assert feed()[-1][1]["status"] == "failed"


def test_only_the_newest_50_runs_are_kept(client, auth, services, context):
    job = create(client, auth, [{"tool": "list_skills"}], skills=())
    ids = [run_now(client, auth, context, job)["id"] for _ in range(51)]
    runs = client.get(f"/api/jobs/{job['id']}/runs", headers=auth).json
    assert len(runs) == 50
    assert [run["id"] for run in runs] == ids[:0:-1]  # newest first; the first one is gone
    assert all(run["status"] == "succeeded" for run in runs)


def test_a_call_names_only_an_active_run_of_its_own_owner(client, auth, other_auth, context):
    job = create(client, auth, [{"tool": "list_skills"}], skills=())
    run = run_now(client, auth, context, job)
    body = {"arguments": {}, "job_run_id": run["id"]}
    ended = client.post("/api/tools/list_skills", headers=auth, json=body)
    assert ended.status_code == 409 and ended.json["code"] == "job_run_ended"
    others = client.post("/api/tools/list_skills", headers=other_auth, json=body)
    assert others.status_code == 404 and others.json["code"] == "job_run_not_found"
    made_up = {"arguments": {}, "job_run_id": "job-7"}
    assert client.post("/api/tools/list_skills", headers=auth, json=made_up).status_code == 404


def test_a_job_run_uses_only_the_job_s_skills(client, auth, services, context, wiper):
    job = create(client, auth, [{"tool": "list_skills"}], skills=())
    started = client.post(f"/api/jobs/{job['id']}/run", headers=auth).json["job_run_id"]
    body = {"arguments": WIPE_STEP["arguments"], "job_run_id": started}
    refused = client.post("/api/tools/run_skill_script", headers=auth, json=body).json
    assert refused["status"] == "failed" and refused["error"]["code"] == "skill_not_in_job"
    builtin = {"arguments": {"skill_name": "skill-authoring"}, "job_run_id": started}
    assert client.post("/api/tools/load_skill", headers=auth, json=builtin).json["status"] == "done"


def due_job(services, job_id: str):
    with services.sessions() as session:
        job = session.get(Job, job_id)
        assert job is not None and job.next_run_at is not None
        return job.next_run_at


def runs_of(services, job_id: str) -> list[JobRun]:
    with services.sessions() as session:
        query = select(JobRun).where(JobRun.job_id == job_id).order_by(JobRun.created_at)
        return list(session.scalars(query))


@pytest.mark.both_databases
def test_the_tick_starts_each_due_time_once_and_skips_a_job_still_running(client, auth, services):
    job = create(client, auth, [{"tool": "list_skills"}], skills=(), cron="*/5 * * * *")
    due = due_job(services, job["id"])
    assert jobruns.tick(services.sessions, due - timedelta(seconds=1)) == []
    [first] = jobruns.tick(services.sessions, due + timedelta(seconds=2))
    assert jobruns.tick(services.sessions, due + timedelta(seconds=3)) == []  # once per time
    assert due_job(services, job["id"]) == due + timedelta(minutes=5)
    assert jobruns.tick(services.sessions, due + timedelta(minutes=5)) == []  # still queued
    runs = runs_of(services, job["id"])
    assert [(r.status, r.trigger, r.due_at) for r in runs] == [
        ("queued", "schedule", due),
        ("skipped", "schedule", due + timedelta(minutes=5)),
    ]
    assert runs[1].error_code == "still_running" and first in runs[1].error_message


def test_after_downtime_the_tick_starts_only_the_latest_time_instead_of_a_backlog(
    client, auth, services
):
    job = create(client, auth, [{"tool": "list_skills"}], skills=(), cron="*/5 * * * *")
    due = due_job(services, job["id"])
    later = due + timedelta(hours=3, minutes=1)  # 36 times passed while nothing ticked
    [started] = jobruns.tick(services.sessions, later)
    [run] = runs_of(services, job["id"])
    assert run.id == started and run.status == "queued" and run.due_at == due + timedelta(hours=3)
    assert due_job(services, job["id"]) == due + timedelta(hours=3, minutes=5)


def test_a_time_long_past_when_the_tick_comes_back_is_recorded_missed(client, auth, services):
    job = create(client, auth, [{"tool": "list_skills"}], skills=(), cron="0 3 * * *")
    due = due_job(services, job["id"])
    assert jobruns.tick(services.sessions, due + timedelta(hours=2)) == []
    [missed] = runs_of(services, job["id"])
    assert missed.status == "skipped" and missed.error_code == "missed"
    assert missed.due_at == due
    assert due_job(services, job["id"]) == next_time("0 3 * * *", "Europe/Berlin", due)


def test_a_disabled_job_is_never_due(client, auth, services):
    job = create(client, auth, [{"tool": "list_skills"}], skills=(), cron="* * * * *")
    body = {k: job[k] for k in ("name", "cron", "time_zone", "steps", "grants", "skills")}
    client.put(f"/api/jobs/{job['id']}", headers=auth, json={**body, "enabled": False})
    assert jobruns.tick(services.sessions, utcnow() + timedelta(days=1)) == []
    assert runs_of(services, job["id"]) == []


@pytest.mark.both_databases
def test_a_run_whose_worker_died_is_interrupted_and_never_run_again(
    client, auth, services, context, feed
):
    job = create(client, auth, [{"tool": "list_skills"}], skills=())
    run_id = client.post(f"/api/jobs/{job['id']}/run", headers=auth).json["job_run_id"]
    from store.lifecycle import jobruns as jobstate

    with transaction(services.sessions) as session:
        assert jobstate.claim(session, run_id, "control@gone:1:1") is not None
    assert jobruns.reap(services.sessions, services.redis) == [run_id]
    assert jobruns.execute(context, run_id) is None
    ended = shown_run(client, auth, job, run_id)
    assert (
        ended["status"] == "interrupted" and "will not be started again" in ended["error_message"]
    )
    assert calls_of(services, run_id) == []
    assert feed()[-1][0] == "job_run.interrupted"


def replace_wiper(client, auth, text: str) -> dict:
    import io

    from factories import skill_files, zip_bytes

    files = skill_files("wiper", metadata={"skillfleet.tier": "destructive"})
    files["scripts/wipe.sh"] = text.encode()
    response = client.post(
        "/api/skills?replace=true",
        headers=auth,
        data={"file": (io.BytesIO(zip_bytes(files, top="wiper")), "s.zip")},
        content_type="multipart/form-data",
    )
    assert response.status_code == 201, response.json
    return dict(response.json)


def test_a_step_pinned_to_a_version_runs_that_version_after_the_skill_moved_on(
    client, auth, services, context, wiper
):
    pinned = {**WIPE_STEP, "arguments": {**WIPE_STEP["arguments"],
                                          "skill_name": f"wiper@{wiper['hash']}"}}  # fmt: skip
    grants = {"tools": [], "skills": [f"wiper@{wiper['hash']}"]}
    job = create(client, auth, [pinned], grants=grants)
    assert run_now(client, auth, context, job)["status"] == "succeeded"
    moved = replace_wiper(client, auth, "#!/bin/bash\necho something else\n")
    # The job's grant names the pinned version, and that version is what the step runs.
    lagging = run_now(client, auth, context, job)
    assert lagging["status"] == "succeeded", lagging
    [call] = calls_of(services, lagging["id"])
    assert (call.skill_hash, call.rule, call.status) == (wiper["hash"], "job-granted", "done")
    assert moved["hash"] != wiper["hash"]
    [pin] = client.get(f"/api/jobs/{job['id']}", headers=auth).json["pins"]
    assert (pin["current_hash"], pin["lagging"]) == (moved["hash"], True)

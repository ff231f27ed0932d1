"""Jobs over the API: create, read, change, delete; every bad request is refused whole."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import pytest
from factories import skill_files, zip_bytes
from sqlalchemy import delete, select

from store.db import transaction
from store.models import Grant, SkillVersion

WIPE = {"skillfleet.tier": "destructive", "skillfleet.execution": "node"}
READ = {"skillfleet.tier": "read", "skillfleet.execution": "node"}


def install(client, auth, name: str, metadata: dict[str, str]) -> dict:
    files = skill_files(name, metadata=metadata)
    files["scripts/wipe.sh"] = b'#!/bin/bash\necho wiping "$SKILLFLEET_ARGS"\n'
    response = client.post(
        "/api/skills",
        headers=auth,
        data={"file": (io.BytesIO(zip_bytes(files, top=name)), "s.zip")},
        content_type="multipart/form-data",
    )
    assert response.status_code == 201, response.json
    return dict(response.json)


def nightly(**changes: object) -> dict:
    body: dict = {
        "name": "nightly cleanup",
        "cron": "30 2 * * *",
        "time_zone": "Europe/Berlin",
        "steps": [
            {"tool": "list_skills", "arguments": {}},
            {
                "tool": "run_skill_script",
                "arguments": {
                    "skill_name": "wiper",
                    "script": "scripts/wipe.sh",
                    "arguments": {"node": "web01"},
                },
            },
        ],  # fmt: skip
        "grants": {"tools": [], "skills": ["wiper"]},
        "skills": ["wiper"],
        "enabled": True,
    }
    body.update(changes)
    return body


@pytest.fixture
def wiper(client, auth):
    return install(client, auth, "wiper", WIPE)


def test_a_job_is_created_with_its_id_and_next_run_in_utc(client, auth, wiper):
    response = client.post("/api/jobs", headers=auth, json=nightly())
    assert response.status_code == 201, response.json
    job = response.json
    assert job["id"] and job["cron"] == "30 2 * * *" and job["time_zone"] == "Europe/Berlin"
    next_run = datetime.fromisoformat(job["next_run_at"])
    assert next_run.utcoffset().total_seconds() == 0
    assert next_run.minute == 30 and next_run.hour in (0, 1)  # 02:30 in Berlin
    assert job["grants"] == {"tools": [], "skills": [f"wiper@{wiper['hash']}"]}
    assert job["skills"] == ["wiper"]
    shown = client.get(f"/api/jobs/{job['id']}", headers=auth).json
    assert shown == job
    assert [j["id"] for j in client.get("/api/jobs", headers=auth).json] == [job["id"]]


def test_a_job_is_replaced_disabled_and_deleted(client, auth, wiper):
    job = client.post("/api/jobs", headers=auth, json=nightly()).json
    changed = client.put(
        f"/api/jobs/{job['id']}",
        headers=auth,
        json=nightly(cron="0 9 * * 1", time_zone="America/New_York", enabled=False, skills="*",
                     grants={"tools": [], "skills": []}),
    )  # fmt: skip
    assert changed.status_code == 200, changed.json
    assert changed.json["cron"] == "0 9 * * 1" and changed.json["next_run_at"] is None
    assert changed.json["grants"] == {"tools": [], "skills": []}
    assert changed.json["skills"] == "*"
    assert client.delete(f"/api/jobs/{job['id']}", headers=auth).status_code == 204
    gone = client.get(f"/api/jobs/{job['id']}", headers=auth)
    assert gone.status_code == 404 and gone.json["code"] == "job_not_found"


def test_every_job_route_needs_a_token(client):
    for method, path in [
        ("GET", "/api/jobs"),
        ("POST", "/api/jobs"),
        ("GET", "/api/jobs/x"),
        ("PUT", "/api/jobs/x"),
        ("DELETE", "/api/jobs/x"),
        ("POST", "/api/jobs/x/run"),
        ("GET", "/api/jobs/x/runs"),
    ]:
        response = client.open(path, method=method, json={})
        assert response.status_code == 401, (method, path)
        assert response.json["code"] == "unauthorized"


def test_another_owners_job_is_not_found_and_stays_unchanged(client, auth, other_auth, wiper):
    job = client.post("/api/jobs", headers=auth, json=nightly()).json
    path = f"/api/jobs/{job['id']}"
    assert client.get(path, headers=other_auth).status_code == 404
    assert (
        client.put(path, headers=other_auth, json=nightly(skills=None, grants={})).status_code
        == 404
    )
    assert client.delete(path, headers=other_auth).status_code == 404
    assert client.post(f"{path}/run", headers=other_auth).status_code == 404
    assert client.get(f"{path}/runs", headers=other_auth).status_code == 404
    assert client.get("/api/jobs", headers=other_auth).json == []
    assert client.get(path, headers=auth).json == job


PROMPT = "p" * 32_769


@pytest.mark.parametrize(
    ("changes", "code", "words"),
    [
        ({"steps": "not a list"}, "invalid_request", "Not a valid list"),
        ({"colour": "red"}, "invalid_request", "Unknown field"),
        ({"skills": 7}, "invalid_request", "every enabled skill"),
        ({"grants": {"tools": "delete_app"}}, "invalid_request", "Not a valid list"),
        ({"cron": "every night at two"}, "cron_invalid", "exactly 5 fields"),
        ({"cron": "30 25 * * *"}, "cron_invalid", "not a valid cron expression"),
        ({"time_zone": "Europe/Atlantis"}, "time_zone_unknown", "not an IANA time zone"),
        ({"steps": [{"tool": "list_skills"}] * 11}, "job_invalid", "1 to 10 steps, not 11"),
        ({"steps": []}, "job_invalid", "1 to 10 steps, not 0"),
        ({"steps": [{"prompt": PROMPT}]}, "job_invalid", "at most 32,768 characters"),
        ({"steps": [{"tool": "list_skills", "prompt": "x"}]}, "job_invalid", "must be"),
        ({"steps": [{"tool": "reboot_world"}]}, "job_invalid", "no tool named 'reboot_world'"),
        ({"grants": {"tools": ["list_skills"]}}, "grant_invalid", "is a read tool"),
        ({"grants": {"tools": ["nope"]}}, "grant_invalid", "not a tool"),
        ({"grants": {"tools": ["run_skill_script"]}}, "grant_invalid", "grant the skill"),
        ({"grants": {"skills": ["ghost"]}}, "grant_invalid", "no skill called"),
        ({"grants": {"skills": ["wiper@1234"]}}, "grant_invalid", "64-hex"),
        ({"skills": ["ghost"]}, "job_invalid", "no skill called"),
        ({"skills": []}, "job_invalid", "don't include"),
        ({"name": ""}, "job_invalid", "'name'"),
    ],
)
def test_bad_jobs_are_refused_whole(client, auth, wiper, changes, code, words):
    response = client.post("/api/jobs", headers=auth, json=nightly(**changes))
    assert response.status_code == 422, response.json
    assert response.json["code"] == code
    text = response.json["message"] + str(response.json.get("errors", ""))
    assert words in text
    assert client.get("/api/jobs", headers=auth).json == []


def test_a_read_skill_is_never_granted(client, auth, wiper):
    install(client, auth, "peek", READ)
    response = client.post("/api/jobs", headers=auth, json=nightly(grants={"skills": ["peek"]}))
    assert response.status_code == 422
    assert response.json["code"] == "grant_invalid" and "read skill" in response.json["message"]


def test_a_bad_change_leaves_the_job_as_it_was(client, auth, wiper):
    job = client.post("/api/jobs", headers=auth, json=nightly()).json
    refused = client.put(
        f"/api/jobs/{job['id']}", headers=auth, json=nightly(grants={"tools": ["list_skills"]})
    )
    assert refused.status_code == 422
    assert client.get(f"/api/jobs/{job['id']}", headers=auth).json == job


def test_running_a_job_now_answers_202_and_a_second_run_waits_its_turn(client, auth, wiper):
    job = client.post("/api/jobs", headers=auth, json=nightly()).json
    started = client.post(f"/api/jobs/{job['id']}/run", headers=auth)
    assert started.status_code == 202, started.json
    run_id = started.json["job_run_id"]
    [run] = client.get(f"/api/jobs/{job['id']}/runs", headers=auth).json
    assert run["id"] == run_id and run["status"] == "queued" and run["trigger"] == "manual"
    again = client.post(f"/api/jobs/{job['id']}/run", headers=auth)
    assert again.status_code == 409 and again.json["code"] == "job_running"


def test_a_change_made_from_an_old_reading_is_refused_and_undoes_nothing(client, auth, wiper):
    job = client.post("/api/jobs", headers=auth, json=nightly()).json
    read_first = job["updated_at"]
    revoked = client.put(
        f"/api/jobs/{job['id']}", headers=auth,
        json=nightly(grants={"tools": [], "skills": []}, updated_at=read_first),
    )  # fmt: skip
    assert revoked.status_code == 200, revoked.json

    # A client that read the job before the grant was revoked would put it back: refused.
    stale = client.put(
        f"/api/jobs/{job['id']}", headers=auth, json=nightly(enabled=False, updated_at=read_first)
    )
    assert stale.status_code == 409 and stale.json["code"] == "job_changed", stale.json
    assert "read it again" in stale.json["message"]
    now = client.get(f"/api/jobs/{job['id']}", headers=auth).json
    assert now == revoked.json and now["grants"]["skills"] == []
    # Made from the current reading, or without one, a change is saved.
    fresh = nightly(grants={"tools": [], "skills": []}, enabled=False, updated_at=now["updated_at"])
    assert client.put(f"/api/jobs/{job['id']}", headers=auth, json=fresh).status_code == 200
    assert client.put(f"/api/jobs/{job['id']}", headers=auth, json=nightly()).status_code == 200
    wrong_shape = client.put(
        f"/api/jobs/{job['id']}", headers=auth, json=nightly(updated_at="yesterday")
    )
    assert wrong_shape.status_code == 422


@pytest.mark.both_databases  # concurrent writes
def test_fifty_changes_from_one_reading_at_once_save_exactly_one(app, client, auth, wiper):
    job = client.post("/api/jobs", headers=auth, json=nightly()).json

    def change(number: int) -> int:
        body = nightly(name=f"change {number}", updated_at=job["updated_at"])
        return app.test_client().put(f"/api/jobs/{job['id']}", headers=auth, json=body).status_code

    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(change, range(50)))

    assert sorted(answers) == [200] + [409] * 49
    saved = client.get(f"/api/jobs/{job['id']}", headers=auth).json["name"]
    assert saved == f"change {answers.index(200)}"


@pytest.mark.both_databases  # concurrent writes
def test_fifty_run_nows_at_once_queue_exactly_one_run(app, client, auth, wiper):
    job = client.post("/api/jobs", headers=auth, json=nightly()).json

    def run_now(_: int) -> int:
        return app.test_client().post(f"/api/jobs/{job['id']}/run", headers=auth).status_code

    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(run_now, range(50)))

    assert sorted(answers) == [202] + [409] * 49
    assert len(client.get(f"/api/jobs/{job['id']}/runs", headers=auth).json) == 1


ZEROS = "0" * 64


def grant_rows(services) -> list[tuple[str, str]]:
    with services.sessions() as session:
        return sorted(
            (row.subject, row.key) for row in session.execute(select(Grant.subject, Grant.key))
        )


def test_a_grant_naming_no_version_the_skill_ever_had_is_refused_and_nothing_is_saved(
    services, client, auth, wiper
):
    refused = client.post(
        "/api/jobs", headers=auth, json=nightly(grants={"skills": [f"wiper@{ZEROS}"]})
    )
    assert refused.status_code == 422, refused.json
    assert refused.json["code"] == "grant_invalid"
    assert "no version the skill 'wiper' has or had" in refused.json["message"]
    assert client.get("/api/jobs", headers=auth).json == []
    assert grant_rows(services) == []
    job = client.post("/api/jobs", headers=auth, json=nightly()).json
    before = grant_rows(services)
    changed = client.put(
        f"/api/jobs/{job['id']}", headers=auth, json=nightly(grants={"skills": [f"wiper@{ZEROS}"]})
    )
    assert changed.status_code == 422 and changed.json["code"] == "grant_invalid"
    assert client.get(f"/api/jobs/{job['id']}", headers=auth).json == job
    assert grant_rows(services) == before


def replace_wiper(client, auth) -> dict:
    """A new version of the wiper skill, over the one installed."""
    files = skill_files("wiper", metadata=WIPE)
    files["scripts/wipe.sh"] = b'#!/bin/bash\necho "wiping differently"\n'
    replaced = client.post(
        "/api/skills?replace=true",
        headers=auth,
        data={"file": (io.BytesIO(zip_bytes(files, top="wiper")), "s.zip")},
        content_type="multipart/form-data",
    )
    assert replaced.status_code == 201, replaced.json
    return dict(replaced.json)


def test_a_grant_may_name_a_version_the_skill_had_before_it_changed(client, auth, wiper):
    assert replace_wiper(client, auth)["hash"] != wiper["hash"]
    old = f"wiper@{wiper['hash']}"
    created = client.post("/api/jobs", headers=auth, json=nightly(grants={"skills": [old]}))
    assert created.status_code == 201, created.json
    assert created.json["grants"]["skills"] == [old]


def test_a_job_sent_back_as_read_keeps_a_grant_saved_before_versions_were_recorded(
    services, client, auth, wiper
):
    job = client.post("/api/jobs", headers=auth, json=nightly()).json
    replace_wiper(client, auth)
    with transaction(services.sessions) as session:  # as in a database migrated from before
        session.execute(delete(SkillVersion).where(SkillVersion.hash == wiper["hash"]))
    read = client.get(f"/api/jobs/{job['id']}", headers=auth).json
    old = f"wiper@{wiper['hash']}"
    assert read["grants"]["skills"] == [old]
    kept = client.put(
        f"/api/jobs/{job['id']}",
        headers=auth,
        json=nightly(grants=read["grants"], cron="0 3 * * *"),
    )
    assert kept.status_code == 200, kept.json
    assert kept.json["grants"]["skills"] == [old]
    elsewhere = client.post("/api/jobs", headers=auth, json=nightly(grants=read["grants"]))
    assert elsewhere.status_code == 422 and elsewhere.json["code"] == "grant_invalid"

"""Jobs with real processes: beat ticks, the control worker runs, a killed worker's run ends."""

from __future__ import annotations

import signal
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from conftest import REDIS_URL
from fleet import fleet, wait_until
from sqlalchemy import func, select

from relay import events, naming
from relay.streams import read_events
from store.db import transaction
from store.models import Job, ToolCall, utcnow
from store.settings import Settings

pytestmark = pytest.mark.fleet

READ_NODE = {"skillfleet.tier": "read", "skillfleet.execution": "node"}


@pytest.fixture
def settings_for(tmp_path: Path, database_url: str):
    def build(**changes: object) -> Settings:
        return Settings(
            data_dir=tmp_path / "var", database_url=database_url, redis_url=REDIS_URL, **changes
        )

    return build


def newest_run(client, job_id: str) -> dict | None:
    runs = client.get(f"/api/jobs/{job_id}/runs").json()
    return runs[0] if runs else None


def first_run_from(client, job_id: str, due: datetime) -> dict | None:
    """The job's earliest run for a time at or after `due`, if it has one."""
    runs = client.get(f"/api/jobs/{job_id}/runs").json()
    timed = [r for r in runs if r["due_at"]]  # a run-now run has none
    later = [r for r in timed if datetime.fromisoformat(r["due_at"]) >= due]
    return min(later, key=lambda r: datetime.fromisoformat(r["due_at"]), default=None)


def test_beat_and_the_control_worker_start_a_due_job_and_set_its_next_time(settings_for):
    with fleet(settings_for(run_timeout=20)) as running:
        with running.http() as client:
            body = {"name": "every minute", "cron": "* * * * *", "time_zone": "Asia/Kolkata",
                    "steps": [{"tool": "list_skills"}, {"tool": "refresh_skills"}]}  # fmt: skip
            job = client.post("/api/jobs", json=body).json()
            # Due this minute already: beat's tick as it starts sends it, no wait for the next.
            due = utcnow().replace(second=0, microsecond=0)
            with transaction(running.services.sessions) as session:
                session.get(Job, job["id"]).next_run_at = due
            running.start("control", "worker", "control")
            running.start("beat", "beat")
            # The run of that time, or, when beat's first tick comes after the minute turned (its
            # start takes seconds on a busy machine), of the minute it came in: a late tick runs
            # the latest time only. Another may follow it as the minutes turn.
            run = wait_until(
                lambda: (
                    (r := first_run_from(client, job["id"], due))
                    and r["status"] == "succeeded"
                    and r
                ),
                75,
                "beat's tick to start the job and the control worker to run it",
            )
            assert run["trigger"] == "schedule"
            assert [step["status"] for step in run["steps"]] == ["done", "done"]
            later = client.get(f"/api/jobs/{job['id']}").json()["next_run_at"]
            assert datetime.fromisoformat(later) > datetime.fromisoformat(run["due_at"])


def test_beat_ticks_as_it_starts_so_a_time_that_came_meanwhile_runs_in_its_own_minute(
    settings_for,
):
    with fleet(settings_for(run_timeout=20)) as running:
        with running.http() as client:
            body = {"name": "every minute", "cron": "* * * * *", "steps": [{"tool": "list_skills"}]}
            job = client.post("/api/jobs", json=body).json()
            running.start("control", "worker", "control")
            # Minute ticks come at :00; early in a minute, only a tick on start answers within it.
            while (now := utcnow()).second >= 30:
                time.sleep(1)
            due = now.replace(second=0, microsecond=0)
            with transaction(running.services.sessions) as session:
                session.get(Job, job["id"]).next_run_at = due
            running.start("beat", "beat")
            run = wait_until(
                lambda: (r := newest_run(client, job["id"])) and r["status"] == "succeeded" and r,
                60,
                "the tick beat sends as it starts to start the job",
            )
            assert datetime.fromisoformat(run["due_at"]) == due
            assert datetime.fromisoformat(run["started_at"]) < due + timedelta(minutes=1)


def test_a_killed_control_worker_leaves_its_job_run_interrupted_never_run_again(
    settings_for, tmp_path: Path, scratch: Path
):
    marker = scratch / "runs.log"  # where the run's uid may write
    script = (
        "import os, time\n"
        f"open({str(marker)!r}, 'a').write(os.environ['SKILLFLEET_RUN_ID'] + '\\n')\n"
        "print('started', flush=True)\n"
        "time.sleep(45)\n"
    )
    quick = {"heartbeat_seconds": 0.5, "worker_alive_seconds": 2.0, "housekeeping_seconds": 0.5}
    with fleet(settings_for(visibility_timeout=3, run_timeout=60, **quick)) as running:
        node = f"t-{uuid.uuid4().hex[:8]}"
        running.start("control", "worker", "control")
        running.start("beat", "beat")
        running.start_node(node)
        running.wait_for_queue(naming.CONTROL)
        running.import_skill("slow", READ_NODE, {"scripts/slow.py": script})
        with running.http() as client:
            step = {
                "tool": "run_skill_script",
                "arguments": {
                    "skill_name": "slow",
                    "script": "scripts/slow.py",
                    "arguments": {"node": node},
                },
            }
            body = {"name": "slow", "cron": "0 3 * * *", "steps": [step], "skills": ["slow"]}
            job = client.post("/api/jobs", json=body).json()
            run_id = client.post(f"/api/jobs/{job['id']}/run").json()["job_run_id"]
            run = wait_until(
                lambda: (r := newest_run(client, job["id"])) and r["call_id"] and r,
                30,
                "the job's script step to start",
            )
            script_run = client.get(f"/api/calls/{run['call_id']}").json()["run_id"]
            wait_until(
                lambda: any(e.kind == "stdout" for e in read_events(running.redis, script_run)),
                30,
                "the script to print",
            )
            running.kill("control", signal.SIGKILL)
            running.start("control-again", "worker", "control")
            ended = wait_until(
                lambda: (r := newest_run(client, job["id"])) and r["status"] == "interrupted" and r,
                40,
                "the reaper to answer the job run interrupted",
            )
            assert ended["id"] == run_id and ended["error_code"] == "interrupted"
            # The killed worker's unacknowledged message may come back to the new worker; the
            # run's claim makes that harmless, and the run stays interrupted either way.
            time.sleep(5)
            assert newest_run(client, job["id"])["status"] == "interrupted"
        owner_id = ended_owner(running, run_id)
        kinds = [e.kind for e in events.read(running.redis, owner_id)]
        assert kinds[-1] == "job_run.interrupted"
        with running.services.sessions() as session:
            calls = session.scalar(
                select(func.count()).select_from(ToolCall).where(ToolCall.job_run_id == run_id)
            )
        assert calls == 1  # the step was not run again
    assert marker.read_text().split() == [script_run]


def ended_owner(running, run_id: str) -> int:
    from store.models import JobRun

    with running.services.sessions() as session:
        run = session.get(JobRun, run_id)
        assert run is not None
        return run.owner_id

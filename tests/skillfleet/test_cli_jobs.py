"""`skillfleet jobs`: create from a file, list, show, edit, enable, disable, delete; run and
wait, which ends at a step waiting for approval, at --timeout or at the run's end, each with
its own exit code; read the history."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fleet import Fleet, fleet, sqlite_settings

from skillfleet.cli_jobs import EXIT_FAILED, EXIT_SUCCEEDED, EXIT_TIMEOUT, EXIT_WAITING

pytestmark = pytest.mark.fleet

SKILLFLEET = str(Path(sys.executable).with_name("skillfleet"))
NODE = f"t-{uuid.uuid4().hex[:8]}"
DESTRUCTIVE = {"skillfleet.tier": "destructive", "skillfleet.execution": "node"}
READ = {"skillfleet.tier": "read", "skillfleet.execution": "node"}
# Ends once the file named in its arguments exists (exit 0), or after a minute (exit 1).
HOLD = (
    "import json, os, sys, time\n"
    "until = json.loads(os.environ['SKILLFLEET_ARGS'])['until']\n"
    "deadline = time.monotonic() + 60\n"
    "while not os.path.exists(until) and time.monotonic() < deadline:\n"
    "    time.sleep(0.05)\n"
    "sys.exit(0 if os.path.exists(until) else 1)\n"
)
LIST_STEP = {"tool": "list_skills"}


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    """One fleet for the module (a control worker and a node worker); each test is an owner of
    its own."""
    folder = tmp_path_factory.mktemp("cli-jobs")
    with fleet(sqlite_settings(folder, sqlite_template)) as started:
        started.start("control", "worker", "control")
        started.start_node(NODE)
        started.wait_for_queue("control", "control")
        yield started


@pytest.fixture
def running(shared: Fleet) -> Fleet:
    return shared.with_new_owner()


def skillfleet(started: Fleet, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(started.env, SKILLFLEET_TOKEN=started.owner_token)
    return subprocess.run([SKILLFLEET, *args], env=env, capture_output=True, text=True, timeout=90)


def cli(started: Fleet, *args: str) -> subprocess.CompletedProcess[str]:
    return skillfleet(started, "jobs", *args)


def script_step(skill: str, script: str, **arguments: Any) -> dict[str, Any]:
    arguments["node"] = NODE
    call = {"skill_name": skill, "script": script, "arguments": arguments}
    return {"tool": "run_skill_script", "arguments": call}


def create_job(started: Fleet, tmp_path: Path, steps: list[dict], **fields: Any) -> str:
    spec = tmp_path / f"job-{uuid.uuid4().hex[:6]}.json"
    spec.write_text(json.dumps({"name": "nightly", "cron": "30 2 * * *", "steps": steps, **fields}))
    created = cli(started, "create", str(spec))
    assert created.returncode == 0, created.stderr
    return created.stdout.split()[2]


def shown(started: Fleet, job_id: str) -> dict[str, Any]:
    """The job as the API shows it (`jobs show` prints the same)."""
    with started.http() as client:
        answer = client.get(f"/api/jobs/{job_id}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_a_job_is_created_run_and_listed_from_the_command_line(running, tmp_path: Path):
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps({"name": "catalog", "cron": "0 9 * * 1",
                                "time_zone": "America/New_York",
                                "steps": [{"tool": "list_skills"}]}))  # fmt: skip
    created = cli(running, "create", str(spec))
    assert created.returncode == 0, created.stderr
    assert created.stdout.startswith("Created job ") and "next run 20" in created.stdout
    job_id = created.stdout.split()[2]
    listed = cli(running, "list")
    assert "catalog" in listed.stdout and "America/New_York" in listed.stdout
    assert json.loads(cli(running, "show", job_id).stdout) == shown(running, job_id)
    assert shown(running, job_id)["steps"] == [{"tool": "list_skills"}]
    ran = cli(running, "run", job_id, "--wait")
    assert ran.returncode == EXIT_SUCCEEDED == 0, ran.stderr
    run_id = ran.stdout.strip()
    assert "succeeded" in ran.stderr
    history = cli(running, "runs", job_id)
    assert run_id in history.stdout and "succeeded" in history.stdout and "manual" in history.stdout


def test_a_bad_job_file_is_refused_with_the_api_s_reason(running, tmp_path: Path):
    spec = tmp_path / "job.json"
    spec.write_text(
        json.dumps({"name": "x", "cron": "at noon", "steps": [{"tool": "list_skills"}]})
    )
    refused = cli(running, "create", str(spec))
    assert refused.returncode == 1
    assert "cron_invalid" in refused.stderr and "exactly 5 fields" in refused.stderr
    assert len(cli(running, "list").stdout.strip().splitlines()) == 1  # the header alone
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    assert "is not valid JSON" in cli(running, "create", str(broken)).stderr


def test_waiting_for_a_run_stops_at_its_approval_and_says_how_to_answer_it(running, tmp_path: Path):
    skill = running.import_skill("prune", DESTRUCTIVE, {"scripts/prune.py": "print('pruned')\n"})
    steps = [LIST_STEP, script_step("prune", "scripts/prune.py")]
    job_id = create_job(running, tmp_path, steps, skills=["prune"])

    waited = cli(running, "run", job_id, "--wait")
    assert waited.returncode == EXIT_WAITING == 75, waited.stderr
    run_id = waited.stdout.strip()
    with running.http() as client:
        [approval] = client.get("/api/approvals", params={"status": "pending"}).json()
    assert approval["job_run_id"] == run_id
    assert f"step 2 waits for your approval {approval['id']}" in waited.stderr
    assert f"It asks to call run_skill_script: {approval['warning']}" in waited.stderr
    for command in (
        f"skillfleet approvals approve {approval['id']} ",
        f"skillfleet approvals approve {approval['id']} --for-job ",
        f"skillfleet approvals deny {approval['id']} ",
        f"skillfleet jobs wait {job_id} {run_id}",
    ):
        assert command in waited.stderr, waited.stderr

    busy = cli(running, "run", job_id)
    assert busy.returncode == 1
    assert f"follow that run with `skillfleet jobs wait {job_id} {run_id}`" in busy.stderr

    listed = skillfleet(running, "approvals", "list")
    assert listed.returncode == 0, listed.stderr
    assert "ASKED BY" in listed.stdout.splitlines()[0]
    assert approval["asked_by"] in listed.stdout and approval["asked_by"].startswith("job ")

    # The command as printed answers it, and the job's grant lets the next run go through.
    approved = skillfleet(running, "approvals", "approve", approval["id"], "--for-job")
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout == f"{approval['id']}: approved_for_chat (the grant went to the job)\n"
    ended = cli(running, "wait", job_id)
    assert ended.returncode == EXIT_SUCCEEDED, ended.stderr
    assert ended.stdout.strip() == run_id and "succeeded" in ended.stderr
    assert shown(running, job_id)["grants"]["skills"] == [f"prune@{skill['hash']}"]
    again = cli(running, "run", job_id, "--wait")
    assert again.returncode == EXIT_SUCCEEDED, again.stderr


def test_a_run_that_ends_without_succeeding_exits_with_its_own_code(running, tmp_path: Path):
    running.import_skill("prune", DESTRUCTIVE, {"scripts/prune.py": "print('pruned')\n"})
    job_id = create_job(
        running, tmp_path, [script_step("prune", "scripts/prune.py")], skills=["prune"]
    )
    waited = cli(running, "run", job_id, "--wait")
    assert waited.returncode == EXIT_WAITING, waited.stderr
    run_id = waited.stdout.strip()
    approval_id = waited.stderr.split("waits for your approval ")[1].split()[0]
    denied = skillfleet(running, "approvals", "deny", approval_id)
    assert denied.returncode == 0, denied.stderr
    ended = cli(running, "wait", job_id, run_id)
    assert ended.returncode == EXIT_FAILED == 3, ended.stderr
    assert "failed: The owner declined this call. (owner_denied)" in ended.stderr


def test_waiting_past_timeout_exits_124_and_the_run_goes_on(running, tmp_path: Path, scratch: Path):
    running.import_skill("holder", READ, {"scripts/hold.py": HOLD})
    release = scratch / "release"  # where the run's uid may look
    steps = [script_step("holder", "scripts/hold.py", until=str(release))]
    job_id = create_job(running, tmp_path, steps, skills=["holder"])
    waited = cli(running, "run", job_id, "--wait", "--timeout", "1")
    assert waited.returncode == EXIT_TIMEOUT == 124, waited.stderr
    run_id = waited.stdout.strip()
    assert f"Stopped waiting after 1 s: run {run_id} is still " in waited.stderr
    assert f"`skillfleet jobs wait {job_id} {run_id}`" in waited.stderr
    release.touch()
    ended = cli(running, "wait", job_id, run_id)
    assert ended.returncode == EXIT_SUCCEEDED, ended.stderr


def test_a_job_is_edited_disabled_enabled_and_deleted_from_the_command_line(
    running, tmp_path: Path
):
    skill = running.import_skill("prune", DESTRUCTIVE, {"scripts/prune.py": "print('pruned')\n"})
    job_id = create_job(running, tmp_path, [LIST_STEP], skills=["prune"])

    edited = cli(running, "edit", job_id, "--name", "weekly", "--cron", "0 8 * * 1",
                 "--time-zone", "Europe/Berlin", "--grant-skill", "prune")  # fmt: skip
    assert edited.returncode == 0, edited.stderr
    assert edited.stdout.startswith(f"Updated job {job_id} (weekly); next run 20")
    job = shown(running, job_id)
    assert (job["name"], job["cron"], job["time_zone"]) == ("weekly", "0 8 * * 1", "Europe/Berlin")
    assert job["grants"]["skills"] == [f"prune@{skill['hash']}"]
    assert job["steps"] == [LIST_STEP] and job["skills"] == ["prune"]  # the rest stays

    # A FILE replaces the fields it holds; `jobs show`'s output is such a file.
    job["steps"] = [LIST_STEP, {"tool": "refresh_skills"}]
    job["reasoning_effort"], job["context"] = "low", "large"
    copy = tmp_path / "shown.json"
    copy.write_text(json.dumps(job))
    assert cli(running, "edit", job_id, str(copy)).returncode == 0
    assert shown(running, job_id)["steps"] == job["steps"]
    assert cli(running, "edit", job_id, "--step", '{"tool": "list_skills"}').returncode == 0
    after = shown(running, job_id)
    assert after["steps"] == [LIST_STEP]
    assert (after["reasoning_effort"], after["context"]) == ("low", "large")  # the model stays
    revoked = cli(running, "edit", job_id, "--revoke-skill", "prune")
    assert revoked.returncode == 0, revoked.stderr
    assert shown(running, job_id)["grants"]["skills"] == []

    disabled = cli(running, "disable", job_id)
    assert disabled.returncode == 0, disabled.stderr
    assert f"Disabled job {job_id} (weekly); it runs only when you run it" in disabled.stdout
    assert shown(running, job_id)["next_run_at"] is None
    enabled = cli(running, "enable", job_id)
    assert (
        enabled.returncode == 0
        and "Enabled job" in enabled.stdout
        and "next run 20" in enabled.stdout
    )
    assert shown(running, job_id)["enabled"] is True

    deleted = cli(running, "delete", job_id)
    assert (
        deleted.stdout.strip() == f"Deleted job {job_id} (weekly), its grants and its run history."
    )
    gone = cli(running, "show", job_id)
    assert gone.returncode == 1 and "job_not_found" in gone.stderr


def test_an_edit_the_api_refuses_is_told_in_the_option_s_words_and_changes_nothing(
    running, tmp_path: Path
):
    job_id = create_job(running, tmp_path, [LIST_STEP])
    before = shown(running, job_id)
    refused = cli(running, "edit", job_id, "--name", "renamed", "--grant-skill", "nope")
    assert refused.returncode == 1
    assert "--grant-skill names 'nope', which you have no skill called." in refused.stderr
    assert "grants.skills" not in refused.stderr and "Nothing was changed." in refused.stderr
    not_held = cli(running, "edit", job_id, "--revoke-skill", "nope")
    assert not_held.returncode == 1 and "no grant of the skill 'nope'" in not_held.stderr
    bad_step = cli(running, "edit", job_id, "--step", "list_skills")
    assert bad_step.returncode == 1 and "--step 1 is not valid JSON" in bad_step.stderr
    nothing = cli(running, "edit", job_id)
    assert nothing.returncode == 2 and "Nothing to change" in nothing.stderr
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"id": "another-job", "name": "x"}))
    mixed_up = cli(running, "edit", job_id, str(other))
    assert mixed_up.returncode == 1 and "is job another-job's" in mixed_up.stderr
    assert shown(running, job_id) == before

"""`skillfleet jobs`: create from a file, list, show, run and wait, read the history."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REDIS_URL
from fleet import Fleet, fleet

from relay import naming
from store.settings import Settings

pytestmark = pytest.mark.fleet

SKILLFLEET = str(Path(sys.executable).with_name("skillfleet"))


@pytest.fixture
def running(tmp_path: Path, database_url: str) -> Iterator[Fleet]:
    settings = Settings(data_dir=tmp_path / "var", database_url=database_url, redis_url=REDIS_URL)
    with fleet(settings) as started:
        started.start("control", "worker", "control")
        started.wait_for_queue(naming.CONTROL)
        yield started


def cli(started: Fleet, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(started.env, SKILLFLEET_TOKEN=started.owner_token)
    return subprocess.run(
        [SKILLFLEET, "jobs", *args], env=env, capture_output=True, text=True, timeout=90
    )


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
    shown = json.loads(cli(running, "show", job_id).stdout)
    assert shown["steps"] == [{"tool": "list_skills"}]
    ran = cli(running, "run", job_id, "--wait")
    assert ran.returncode == 0, ran.stderr
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

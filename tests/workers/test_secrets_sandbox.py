"""A sandboxed script gets the owner's secrets as its guest's environment, sent with its program
(never on a command line), and what it prints of them comes back as [secret:NAME]."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace

import pytest
from test_sandbox_runner import IMAGE, engine, job, never, skill  # noqa: F401 - fixtures

from relay.streams import RunStream
from workers.runners.guests import guest_program
from workers.runners.sandbox import ContainerSandboxRunner

VALUE = f"vm-{uuid.uuid4().hex}"
SHOW = "import os\nprint('seen', os.environ['API_TOKEN'])\n"


@pytest.mark.parametrize("script", ["scripts/show.py", "scripts/show.js"])
def test_the_guest_program_carries_the_secret_in_its_environment(tmp_path, script):
    folder = skill(tmp_path, {script: SHOW})
    the_job = replace(job(folder, script), secrets={"API_TOKEN": VALUE})

    program = guest_program(the_job, folder)

    assert json.dumps(VALUE) in program or VALUE in program
    assert guest_program(job(folder, script), folder).count(VALUE) == 0


@pytest.mark.docker
def test_the_container_opt_in_gives_the_secret_and_redacts_its_value(
    tmp_path,
    engine,  # noqa: F811
    redis_client,
):
    runner = ContainerSandboxRunner(IMAGE, engine)
    folder = skill(tmp_path, {"scripts/show.py": SHOW})
    the_job = replace(job(folder, "scripts/show.py"), secrets={"API_TOKEN": VALUE})

    outcome = runner.run(the_job, folder, RunStream(redis_client, the_job.run_id), never)

    assert (outcome.status, outcome.stdout) == ("succeeded", "seen [secret:API_TOKEN]\n")
    runner.settle()
    runner.volumes.keep = 0
    runner.volumes.prune()

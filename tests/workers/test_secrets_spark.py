"""A Spark script gets the owner's secrets as container environment, never on its command line,
and what it prints of them comes back as [secret:NAME]."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import replace

import pytest
from test_spark_runner import engine, job, never, runner, skill  # noqa: F401 - fixtures

from relay import naming
from relay.streams import RunStream
from workers.runners.spark import SparkRunner

pytestmark = pytest.mark.docker

VALUE = f"spark-{uuid.uuid4().hex}"
SHOW = (
    "import hashlib, os, sys\n"
    "value = os.environ['API_TOKEN']\n"
    "print('seen', value, 'sha256', hashlib.sha256(value.encode()).hexdigest())\n"
    "print(' '.join(sys.argv))\n"
)


def test_the_secret_is_container_environment_and_its_value_is_redacted(
    tmp_path,
    runner: SparkRunner,  # noqa: F811
    redis_client,
):
    folder = skill(tmp_path, "show.py", SHOW)
    the_job = replace(job(folder, "scripts/show.py"), secrets={"API_TOKEN": VALUE})
    options = runner.container_options(the_job, "a-volume")
    assert options["environment"]["API_TOKEN"] == VALUE
    assert VALUE not in " ".join(runner.command(the_job)) and VALUE not in repr(the_job)

    outcome = runner.run(the_job, folder, RunStream(redis_client, the_job.run_id), never)

    assert outcome.status == "succeeded", outcome.stderr
    digest = hashlib.sha256(VALUE.encode()).hexdigest()
    assert outcome.stdout.startswith(f"seen [secret:API_TOKEN] sha256 {digest}\n")
    assert VALUE not in outcome.stdout + outcome.stderr
    entries = repr(redis_client.xrange(naming.run_stream(the_job.run_id)))
    assert "[secret:API_TOKEN]" in entries and VALUE not in entries

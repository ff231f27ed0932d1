"""The standard environment and declared dependencies on the Spark: the runner image's
packages and runtimes, the skill's root on Python's import path, and a declared package in a
volume of its own, on the real Docker engine with the real runner image.

The fixture skills (tests/fixtures/standard-skills) are shaped like the public ones: a script
that reads its command line and imports pypdf and yaml, scripts that import each other as the
`scripts` package, a bun script, and packages declared inline (PEP 723) and in requirements.txt.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
import redis
from test_spark_runner import IMAGE, engine, labelled, never  # noqa: F401 - the module's engine fixture

from relay.streams import RunStream
from store.hashing import content_hash
from workers.runners.base import Job
from workers.runners.dependency_volumes import DEPS_LABEL
from workers.runners.environments import DependenciesUnavailable
from workers.runners.spark import SparkRunner

pytestmark = pytest.mark.docker

SKILLS = Path(__file__).parent.parent / "fixtures" / "standard-skills"


@pytest.fixture(scope="module")
def runner(engine: docker.DockerClient) -> Iterator[SparkRunner]:  # noqa: F811
    spark = SparkRunner(IMAGE, engine)
    yield spark
    spark.settle()
    spark.dependencies.remove_unused()


def copied(tmp_path: Path, name: str) -> Path:
    """The fixture skill as the package cache holds it."""
    folder = tmp_path / "cache" / f"{name}@hash"
    shutil.copytree(SKILLS / name, folder)
    return folder


def run(runner: SparkRunner, client: redis.Redis, folder: Path, script: str, *argv: str):
    job = Job(str(uuid.uuid4()), folder.name.split("@")[0], content_hash(folder), script, {},
              120, argv=argv)  # fmt: skip
    return runner.run(job, folder, RunStream(client, job.run_id), never)


def test_a_script_reading_its_command_line_makes_a_pdf_with_pypdf_and_prints_yaml(
    tmp_path, runner, redis_client
):
    outcome = run(runner, redis_client, copied(tmp_path, "pdf-pages"), "scripts/blank_pdf.py", "3")

    assert outcome.status == "succeeded", outcome.stderr
    assert outcome.stdout == "pages: 3\nwidth: 200.0\n\n"


def test_scripts_import_their_neighbours_as_the_scripts_package(tmp_path, runner, redis_client):
    folder = copied(tmp_path, "script-package")

    absolute = run(runner, redis_client, folder, "scripts/report.py")
    relative = run(runner, redis_client, folder, "scripts/relative.py")

    assert (absolute.status, absolute.stdout) == ("succeeded", "ABSOLUTE IMPORT!\n")
    assert (relative.status, relative.stdout) == ("succeeded", "RELATIVE IMPORT IN SCRIPTS!\n")


def test_a_typescript_script_runs_with_bun_and_reads_a_file_with_bun_file(
    tmp_path, runner, redis_client
):
    outcome = run(runner, redis_client, copied(tmp_path, "script-package"), "scripts/first_line.ts")

    assert outcome.status == "succeeded", outcome.stderr
    assert outcome.stdout.startswith("bun 1.") and outcome.stdout.endswith(": ---\n")


def test_the_image_has_node_22_or_later_for_javascript(tmp_path, runner, redis_client):
    folder = copied(tmp_path, "script-package")
    (folder / "scripts" / "version.mjs").write_text("console.log(process.versions.node)\n")

    outcome = run(runner, redis_client, folder, "scripts/version.mjs")

    assert outcome.status == "succeeded", outcome.stderr
    assert int(outcome.stdout.split(".")[0]) >= 22


def test_declared_packages_come_from_a_volume_built_once_for_the_skill_version(
    tmp_path,
    runner,
    redis_client,
    engine,  # noqa: F811
):
    folder = copied(tmp_path, "declared-deps")
    builds = runner.dependencies.builds

    inline = run(runner, redis_client, folder, "scripts/table.py")
    listed = run(runner, redis_client, folder, "scripts/colour.py")

    assert inline.status == "succeeded", inline.stderr
    assert inline.stdout == "pypdf     standard\ntabulate  declared\n"
    assert listed.status == "succeeded", listed.stderr
    assert listed.stdout == "'\\x1b[32mdeclared\\x1b[0m'\n"
    assert runner.dependencies.builds == builds + 1  # one volume for both scripts
    volumes = engine.volumes.list(filters={"label": DEPS_LABEL})
    assert len(volumes) >= 1


def test_a_declared_package_the_index_does_not_have_ends_the_run_before_any_container(
    tmp_path,
    runner,
    redis_client,
    engine,  # noqa: F811
):
    folder = copied(tmp_path, "declared-deps")
    (folder / "requirements.txt").write_text("skillfleet-no-such-package-4711\n")

    with pytest.raises(DependenciesUnavailable) as refused:
        run(runner, redis_client, folder, "scripts/colour.py")

    assert refused.value.code == "dependencies_unavailable"
    message = refused.value.message
    assert message.startswith("The skill's declared dependencies could not be installed: ")
    assert "skillfleet-no-such-package-4711 was not found in the package registry" in message
    assert labelled(engine) == []

"""`skillfleet up` tells the user how to get the Spark working when it can't start it."""

from __future__ import annotations

import pytest
from conftest import missing_service

from skillfleet.up import _spark_status
from store.settings import Settings

pytestmark = [pytest.mark.docker, pytest.mark.fleet]


def test_a_missing_runner_image_is_reported_with_the_command_that_builds_it(tmp_path):
    import docker

    try:
        docker.from_env(timeout=5).ping()
    except Exception:  # noqa: BLE001 - no engine here
        missing_service("a Docker engine")
    settings = Settings(data_dir=tmp_path, runner_image="skillfleet/not-built:never")
    note = _spark_status(settings)
    assert note is not None
    assert "skillfleet/not-built:never is missing" in note
    assert "bash workers/runner/build-offline.sh" in note


def test_the_present_runner_image_lets_the_spark_start(tmp_path):
    import docker

    try:
        docker.from_env(timeout=5).images.get("skillfleet/runner:latest")
    except Exception:  # noqa: BLE001 - no engine or no image here
        missing_service("a Docker engine with skillfleet/runner:latest")
    assert _spark_status(Settings(data_dir=tmp_path)) is None

"""A call pinning a skill's version runs that version on a real Spark worker: the worker
fetches the pinned hash's package (built from the version's kept files) and mounts it in the
run's container, whatever version the skill is at now."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from factories import skill_files, zip_bytes
from fleet import Fleet, fleet, sqlite_settings

from relay import naming

pytestmark = [pytest.mark.docker, pytest.mark.fleet]

SPARK = {"skillfleet.tier": "read", "skillfleet.execution": "spark"}


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    folder = tmp_path_factory.mktemp("pinned-spark")
    with fleet(sqlite_settings(folder, sqlite_template, run_timeout=60)) as started:
        started.start(naming.SPARK, "worker", "spark", env=started.node_env(naming.SPARK))
        started.wait_for_queue(naming.SPARK, naming.SPARK)
        yield started


def install(owner: Fleet, said: str) -> str:
    files = skill_files("sayer", metadata=SPARK)
    files["scripts/say.py"] = f"print({said!r})\n".encode()
    with owner.http() as client:
        response = client.post(
            "/api/skills",
            params={"replace": "true"},
            files={"file": ("s.zip", io.BytesIO(zip_bytes(files, top="sayer")))},
        )
    assert response.status_code == 201, response.text
    return str(response.json()["hash"])


def test_a_pinned_call_runs_its_version_in_a_spark_container(shared: Fleet):
    owner = shared.with_new_owner()
    first = install(owner, "one")
    install(owner, "two")
    answers = {}
    with owner.http(timeout=120) as client:
        for name in (f"sayer@{first}", "sayer"):
            body = {"arguments": {"skill_name": name, "script": "scripts/say.py"},
                    "chat_id": "pins"}  # fmt: skip
            envelope = client.post("/api/tools/run_skill_script", params={"wait": 60}, json=body)
            assert envelope.status_code == 200, envelope.text
            answers[name] = envelope.json()

    pinned, current = answers[f"sayer@{first}"], answers["sayer"]
    assert pinned["status"] == "done", pinned
    assert (pinned["result"]["stdout"], pinned["result"]["isolation"]) == ("one\n", "container")
    assert current["result"]["stdout"] == "two\n"

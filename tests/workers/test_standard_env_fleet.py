"""The standard environment and declared dependencies on a real node worker: the worker finds
(or builds) the standard environment, says so in its heartbeat, and every run's uid imports
its packages; the fixture skills (tests/fixtures/standard-skills) run end to end through the
API, the broker, Celery and the node's subprocesses.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from factories import zip_bytes
from fleet import Fleet, fleet, free_port, sqlite_settings, wait_until

from relay import heartbeat, naming
from workers.runners.environments import FEATURE_READY

pytestmark = pytest.mark.fleet

SKILLS = Path(__file__).parent.parent / "fixtures" / "standard-skills"
NODE = f"env-{uuid.uuid4().hex[:8]}"
OFFLINE = f"env-offline-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    folder = tmp_path_factory.mktemp("standard-env")
    with fleet(sqlite_settings(folder, sqlite_template, run_timeout=120)) as started:
        started.start_node(NODE)
        yield started


@pytest.fixture
def owner(shared: Fleet) -> Fleet:
    return shared.with_new_owner()


def import_fixture(client: httpx.Client, name: str, **changed: bytes) -> dict[str, Any]:
    """Import the fixture skill `name`, with files of `changed` (by name) replaced."""
    files = {
        path.relative_to(SKILLS / name).as_posix(): changed.get(path.name, path.read_bytes())
        for path in sorted((SKILLS / name).rglob("*"))
        if path.is_file()
    }
    data = zip_bytes(files, top=name)
    response = client.post("/api/skills", files={"file": (f"{name}.zip", io.BytesIO(data))})
    assert response.status_code == 201, response.text
    return dict(response.json())


def call(client: httpx.Client, skill: str, script: str, node: str = NODE, **arguments: Any):
    body = {
        "arguments": {
            "skill_name": skill,
            "script": script,
            "arguments": {"node": node, **arguments},
        },
        "chat_id": "standard-env",
    }
    response = client.post("/api/tools/run_skill_script", params={"wait": 60}, json=body)
    assert response.status_code == 200, response.text
    answer = dict(response.json())
    if answer["status"] == "running":  # a first build of declared packages may take longer
        answer = client.get(f"/api/calls/{answer['call_id']}", params={"wait": 60}).json()
    return answer


def features(shared: Fleet, node: str) -> set[str]:
    return heartbeat.live_features(shared.redis, naming.node_queue(node))


def test_the_node_says_in_its_heartbeat_that_runs_have_the_standard_environment(shared: Fleet):
    wait_until(lambda: FEATURE_READY in features(shared, NODE), 300, "the standard environment")

    with shared.http() as client:
        listed = {node["name"]: node for node in client.get("/api/nodes").json()}

    assert FEATURE_READY in listed[NODE]["features"]


def test_a_script_reading_its_command_line_imports_pypdf_and_yaml_on_a_node(owner: Fleet):
    wait_until(lambda: FEATURE_READY in features(owner, NODE), 300, "the standard environment")
    with owner.http() as client:
        import_fixture(client, "pdf-pages")
        answer = call(client, "pdf-pages", "scripts/blank_pdf.py", pages="2")

    assert answer["status"] == "done", answer
    assert answer["result"]["stdout"] == "pages: 2\nwidth: 200.0\n\n"


def test_scripts_import_their_neighbours_as_the_scripts_package_on_a_node(owner: Fleet):
    with owner.http() as client:
        import_fixture(client, "script-package")
        absolute = call(client, "script-package", "scripts/report.py")
        relative = call(client, "script-package", "scripts/relative.py")
        scripts = client.get("/api/skills/script-package").json()["files"]

    assert absolute["result"]["stdout"] == "ABSOLUTE IMPORT!\n", absolute
    assert relative["result"]["stdout"] == "RELATIVE IMPORT IN SCRIPTS!\n", relative
    assert "scripts/first_line.ts" in {entry["path"] for entry in scripts}


def test_declared_packages_are_installed_once_per_skill_version_and_shown_on_its_page(
    owner: Fleet,
):
    with owner.http() as client:
        import_fixture(client, "declared-deps")
        page = client.get("/api/skills/declared-deps").json()
        inline = call(client, "declared-deps", "scripts/table.py")
        listed = call(client, "declared-deps", "scripts/colour.py")

    assert page["dependencies"] == [
        {"file": "requirements.txt", "requirements": ["termcolor>=2.1"]},
        {"file": "scripts/table.py", "requirements": ["tabulate>=0.9"]},
    ]
    assert inline["status"] == "done", inline
    assert inline["result"]["stdout"] == "pypdf     standard\ntabulate  declared\n"
    assert listed["status"] == "done", listed
    assert listed["result"]["stdout"] == "'\\x1b[32mdeclared\\x1b[0m'\n"


def test_a_node_that_cannot_reach_its_package_index_fails_the_run_clearly(shared: Fleet):
    owner = shared.with_new_owner()
    closed = f"http://127.0.0.1:{free_port()}/simple"
    env = dict(shared.node_env(OFFLINE), SKILLFLEET_PACKAGE_INDEX=closed)
    env["UV_HTTP_RETRIES"] = "0"  # uv's own retries of a refused connection take 8 s
    shared.start(OFFLINE, "worker", "node", "--name", OFFLINE, env=env)
    shared.wait_for_queue(naming.node_queue(OFFLINE), OFFLINE)
    with owner.http() as client:
        # A version no node built yet (the nodes of a host share what they built).
        import_fixture(client, "declared-deps", **{"requirements.txt": b"termcolor>=2.2\n"})
        answer = call(client, "declared-deps", "scripts/table.py", node=OFFLINE)

    assert answer["status"] == "failed", answer
    assert answer["error"]["code"] == "dependencies_unavailable"
    assert answer["error"]["message"].startswith(
        "The skill's declared dependencies could not be installed: uv: "
    )

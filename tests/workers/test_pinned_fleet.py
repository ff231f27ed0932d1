"""A call that pins a skill's version runs that version on a real node, whatever is current.

API → broker → Celery → node worker → subprocess: the node fetches the package of the pinned
hash (built from the version's kept files), so the script, its arguments' schema and its tier
are the pinned version's; the approval card shows the version, and the skill moving on while
the owner decides does not void a pinned call.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from factories import skill_files, zip_bytes
from fleet import Fleet, fleet, sqlite_settings

pytestmark = pytest.mark.fleet

NODE = f"pinned-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    folder = tmp_path_factory.mktemp("pinned")
    with fleet(sqlite_settings(folder, sqlite_template, run_timeout=30)) as started:
        started.start_node(NODE)
        yield started


@pytest.fixture
def owner(shared: Fleet) -> Fleet:
    return shared.with_new_owner()


def install(client: httpx.Client, said: str, tier: str) -> str:
    """The skill `sayer` with a script that prints `said`; its content hash."""
    files = skill_files("sayer", metadata={"skillfleet.tier": tier, "skillfleet.execution": "node"})
    files["scripts/say.py"] = f"import sys\nprint({said!r}, *sys.argv[1:])\n".encode()
    data = zip_bytes(files, top="sayer")
    response = client.post(
        "/api/skills", params={"replace": "true"}, files={"file": ("s.zip", io.BytesIO(data))}
    )
    assert response.status_code == 201, response.text
    return str(response.json()["hash"])


def say(client: httpx.Client, name: str, wait: int = 30) -> dict:
    body = {
        "arguments": {"skill_name": name, "script": "scripts/say.py", "node": NODE,
                      "args": ["again"]},
        "chat_id": "pins",
    }  # fmt: skip
    response = client.post("/api/tools/run_skill_script", params={"wait": wait}, json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def test_a_pinned_call_runs_its_version_on_the_node_after_the_skill_moved_on(owner: Fleet):
    with owner.http() as client:
        first = install(client, "one", "read")
        second = install(client, "two", "read")
        pinned = say(client, f"sayer@{first}")
        current = say(client, "sayer")
        back = say(client, f"sayer@{second}")
        runs = {
            r["run_id"]: client.get(f"/api/runs/{r['run_id']}").json() for r in (pinned, current)
        }
        detail = client.get("/api/skills/sayer").json()

    assert pinned["status"] == "done", pinned
    assert pinned["result"]["stdout"] == "one again\n"
    assert current["result"]["stdout"] == "two again\n"
    assert back["result"]["stdout"] == "two again\n"  # the current version, pinned
    assert runs[pinned["run_id"]]["skill_hash"] == first
    assert runs[current["run_id"]]["skill_hash"] == second
    assert detail["hash"] == second  # running a pinned version changes nothing of the skill


def test_a_pinned_version_keeps_its_own_tier_and_card_and_runs_when_approved_later(
    owner: Fleet,
):
    with owner.http() as client:
        first = install(client, "careful", "change")
        install(client, "quick", "read")
        asked = say(client, f"sayer@{first}", wait=0)
        # The pinned version is a change skill: the owner is asked, on the exact version.
        assert asked["status"] == "pending_approval", asked
        card = client.get(f"/api/approvals/{asked['approval_id']}").json()
        assert card["arguments"]["skill_name"] == f"sayer@{first}"
        # The skill moving on while the owner decides does not void the pinned call.
        install(client, "later", "read")
        answer = client.post(f"/api/approvals/{asked['approval_id']}", json={"decision": "approve"})
        assert answer.status_code == 200, answer.text
        ended = client.get(f"/api/calls/{asked['call_id']}", params={"wait": 30}).json()

    assert ended["status"] == "done", ended
    assert ended["result"]["stdout"] == "careful again\n"


def test_a_pin_to_a_version_the_skill_never_had_runs_nothing(owner: Fleet):
    with owner.http() as client:
        install(client, "one", "read")
        refused = say(client, f"sayer@{'0' * 64}")
        runs = client.get("/api/runs").json()

    assert refused["status"] == "failed", refused
    assert refused["error"]["code"] == "version_not_found"
    assert refused["error"]["message"].startswith("HOST: 'sayer' has no version '00000000")
    assert runs == []

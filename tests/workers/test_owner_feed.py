"""The owner's event feed from real workers: a run's states and its call's end, in order."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import REDIS_URL
from fleet import Fleet, fleet
from sqlalchemy import select

from relay import naming
from store.models import ApiToken
from store.settings import Settings
from store.tokens import token_digest

pytestmark = pytest.mark.fleet

READ_NODE = {"skillfleet.tier": "read", "skillfleet.execution": "node"}
HELLO = "print('hello')\n"


@pytest.fixture
def running(tmp_path: Path, database_url: str) -> Iterator[Fleet]:
    settings = Settings(data_dir=tmp_path / "var", database_url=database_url, redis_url=REDIS_URL)
    with fleet(settings) as started:
        with started.services.sessions() as session:
            row = session.scalar(
                select(ApiToken).where(ApiToken.token_hash == token_digest(started.owner_token))
            )
            assert row is not None and row.owner_id is not None
        # Owner ids restart with each database: drop a stream an earlier test left.
        started.redis.delete(naming.owner_events(row.owner_id))
        yield started


def feed_until(
    client: httpx.Client, done: Callable[[list[dict]], bool], limit: float = 30
) -> list[dict]:
    events: list[dict] = []
    headers = {"Last-Event-ID": "0-0"}
    with client.stream("GET", "/api/events", headers=headers, timeout=limit) as response:
        assert response.status_code == 200
        kind = ""
        for line in response.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                events.append({"kind": kind, **json.loads(line[6:])})
                if done(events):
                    break
    return events


def test_a_run_announces_queued_running_and_succeeded_then_its_call_finishes(running: Fleet):
    node = f"f-{uuid.uuid4().hex[:6]}"
    running.start_node(node)
    running.import_skill("hello", READ_NODE, {"scripts/hello.py": HELLO})
    body = {
        "arguments": {
            "skill_name": "hello",
            "script": "scripts/hello.py",
            "arguments": {"node": node},
        },
        "chat_id": "feed",
    }
    with running.http() as client:
        envelope = client.post("/api/tools/run_skill_script", params={"wait": 30}, json=body).json()
        assert envelope["status"] == "done", envelope

        run_id = envelope["run_id"]

        def heard_all(found: list[dict[str, Any]]) -> bool:
            kinds = {(e["kind"], e.get("status")) for e in found if e.get("run_id") == run_id}
            return ("run.state", "queued") in kinds and any(
                e["kind"] == "call.finished" for e in found
            )

        events = feed_until(client, heard_all)

    mine = [e for e in events if e.get("run_id") == run_id or e["kind"] == "call.finished"]
    # "queued" is published once the rows are saved, which overlaps the message's way to the
    # worker: on a busy machine it may come after "running"; the run itself says its state.
    states = [e["status"] for e in mine if e["kind"] == "run.state"]
    assert sorted(states) == ["queued", "running", "succeeded"], mine
    assert states.index("running") < states.index("succeeded")
    ended = [e for e in mine if e["kind"] != "run.state" or e["status"] == "succeeded"]
    assert [(e["kind"], e["status"]) for e in ended] == [
        ("run.state", "succeeded"),
        ("call.finished", "done"),
    ]
    assert ended[0]["exit_code"] == 0 and ended[0]["node"] == node
    assert ended[1]["call_id"] == envelope["call_id"]


def test_the_owner_hears_a_silent_run_is_running_while_it_still_runs(
    running: Fleet, tmp_path: Path
):
    # "running" travels with the run's first stream entries; a script that prints nothing
    # must not keep it back until its end. It ends once the test has looked.
    node = f"f-{uuid.uuid4().hex[:6]}"
    running.start_node(node)
    release = tmp_path / "release"
    quiet = (
        "import json, os, time\n"
        "release = json.loads(os.environ['SKILLFLEET_ARGS'])['release']\n"
        "while not os.path.exists(release):\n    time.sleep(0.05)\n"
    )
    running.import_skill("quiet", READ_NODE, {"scripts/quiet.py": quiet})
    body = {"arguments": {"skill_name": "quiet", "script": "scripts/quiet.py",
                          "arguments": {"node": node, "release": str(release)}}}  # fmt: skip
    with running.http() as client:
        envelope = client.post("/api/tools/run_skill_script", json=body).json()
        assert envelope["status"] == "running", envelope
        run_id = envelope["run_id"]

        events = feed_until(
            client, lambda found: (found[-1].get("run_id"), found[-1].get("status"))
            == (run_id, "running"),
        )  # fmt: skip
        still = client.get(f"/api/runs/{run_id}").json()
        release.touch()

    assert [e["status"] for e in events if e.get("run_id") == run_id] == ["queued", "running"]
    assert still["status"] == "running"

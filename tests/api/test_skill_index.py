"""Each API process keeps what it read of the skills index, and forgets it once any process
changes a skill: two processes, one database, one Redis."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator

import pytest
from factories import skill_zip
from flask.testing import FlaskClient
from sqlalchemy import select
from toolcalls import tool

from api import create_app
from api.services import Services
from store.db import make_sessions, transaction
from store.models import Skill
from store.settings import Settings
from store.tokens import create_owner_token


@pytest.fixture
def two(settings: Settings) -> Iterator[tuple[Services, Services]]:
    """Two API processes' services on the same database and Redis."""
    first, second = Services.build(settings), Services.build(settings)
    yield first, second
    first.engine.dispose()
    second.engine.dispose()


@pytest.fixture
def auth(two: tuple[Services, Services]) -> dict[str, str]:
    with transaction(two[0].sessions) as session:
        return {"Authorization": f"Bearer {create_owner_token(session, 'alice')}"}


def listed(client: FlaskClient, auth: dict[str, str]) -> dict[str, str]:
    envelope = tool(client, auth, "list_skills", {"include_disabled": True}, chat=None)
    assert envelope["status"] == "done", envelope
    return {s["name"]: s["description"] for s in envelope["result"]["skills"] if s["enabled"]}


def test_a_change_through_one_process_is_seen_at_once_by_the_other(two, auth):
    reader, writer = (create_app(services=s).test_client() for s in two)
    assert "hello" not in listed(reader, auth)  # read, and kept
    archive = {
        "file": (io.BytesIO(skill_zip("hello", metadata={"skillfleet.tier": "read"})), "h.zip")
    }
    assert writer.post("/api/skills", headers=auth, data=archive).status_code == 201
    assert "hello" in listed(reader, auth)
    loaded = tool(reader, auth, "load_skill", {"skill_name": "hello"}, chat=None)
    assert loaded["status"] == "done", loaded

    off = writer.put("/api/skills/hello/enabled", headers=auth, json={"enabled": False})
    assert off.status_code == 200
    assert "hello" not in listed(reader, auth)
    refused = tool(reader, auth, "load_skill", {"skill_name": "hello"}, chat=None)
    assert refused["error"]["code"] == "skill_disabled"

    assert writer.delete("/api/skills/hello", headers=auth).status_code == 204
    gone = tool(reader, auth, "load_skill", {"skill_name": "hello"}, chat=None)
    assert gone["error"]["code"] == "skill_not_found"


def test_a_change_no_process_announced_is_seen_once_the_kept_answers_expire(two, auth):
    reader = create_app(services=two[0]).test_client()
    two[0].store.index.SECONDS = 2.0  # the next check comes in milliseconds, even under load
    before = listed(reader, auth)
    # Written past the watched sessions: as if the generation's bump were lost.
    with make_sessions(two[0].engine)() as session, session.begin():
        skill = session.scalar(select(Skill).where(Skill.name == "skill-authoring"))
        assert skill is not None
        skill.description = "Changed where no process was told."
    assert listed(reader, auth) == before  # kept: the index generation did not move
    deadline = time.monotonic() + 10
    while listed(reader, auth)["skill-authoring"] != "Changed where no process was told.":
        assert time.monotonic() < deadline, "the kept listing never expired"
        time.sleep(0.05)

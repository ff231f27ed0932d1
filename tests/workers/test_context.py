"""The control worker's broker is wired like the API's: the same settings mean the same broker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from factories import skill_md, write_skill
from sqlalchemy import func, select

from broker.calls import CallRequest
from relay import naming
from relay.app import create_celery
from relay.heartbeat import Instance
from store import nodes
from store.db import transaction
from store.discovery import read_only_skills
from store.models import Owner, Run
from store.settings import Settings
from store.skills import BUILTIN_DIR
from store.tokens import create_owner_token
from workers.context import job_context
from workers.jobruns import JobContext

SHELF_SKILL = "shelf-report"
READ_NODE = {"skillfleet.tier": "read", "skillfleet.execution": "node"}


@pytest.fixture
def shelf(tmp_path: Path) -> Path:
    """A folder of the operator's skills (`skills.paths`), holding one node skill."""
    shelf = tmp_path / "shelf"
    files = {
        "SKILL.md": skill_md(SHELF_SKILL, metadata=READ_NODE).encode(),
        "scripts/report.py": b"print('report')\n",
    }
    write_skill(shelf, SHELF_SKILL, files)
    return shelf


@pytest.fixture
def control(settings: Settings, shelf: Path, redis_client) -> Iterator[JobContext]:
    """The job runs' context of a control worker started with the dry-run settings and the
    shelf, on a database the API never opened."""
    app = create_celery(settings.with_overrides(skill_paths=(shelf,)))
    app.skillfleet_instance = Instance(role="control", queue=naming.CONTROL)
    context = job_context(app)
    yield context
    context.sessions.kw["bind"].dispose()


def owner(context: JobContext) -> int:
    """alice, with her node web01."""
    with transaction(context.sessions) as session:
        create_owner_token(session, "alice")
        nodes.register(session, "web01", "alice")
        found: int = session.scalars(select(Owner.id).where(Owner.name == "alice")).one()
        return found


def test_the_control_worker_lists_the_operators_read_only_skills(control: JobContext):
    outcome = control.broker.call(owner(control), CallRequest("list_skills"))

    assert outcome.status == "done", outcome.error
    skills = {skill["name"]: skill for skill in outcome.result["skills"]}
    assert skills[SHELF_SKILL]["author"] == "operator"
    assert "skill-authoring" in skills


def test_the_control_worker_in_dry_run_mode_records_a_run_and_queues_nothing(
    control: JobContext, shelf: Path, redis_client
):
    # Registered here too, so that this test sees only what dry-run mode does.
    control.broker.store.sync_read_only(read_only_skills(BUILTIN_DIR, [shelf]))
    arguments = {"skill_name": SHELF_SKILL, "script": "scripts/report.py", "node": "web01"}
    request = CallRequest("run_skill_script", arguments)

    outcome = control.broker.call(owner(control), request)

    assert outcome.status == "done", outcome.error
    assert outcome.result["dispatched"] is False
    assert outcome.result["would_dispatch"]["skill"] == SHELF_SKILL
    assert outcome.result["would_dispatch"]["node"] == "web01"
    with control.sessions() as session:
        assert session.scalar(select(func.count()).select_from(Run)) == 0
    assert redis_client.llen(naming.node_queue("web01")) == 0

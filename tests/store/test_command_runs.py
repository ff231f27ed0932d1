"""A run row names a skill's script or a command, never both nor neither, on each dialect."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy.exc import IntegrityError

from api.services import Services
from store.db import core_transaction, insert_row
from store.lifecycle import runs
from store.models import Run, utcnow

pytestmark = pytest.mark.both_databases


def row(**subject: Any) -> Run:
    return runs.new(
        {
            "id": str(uuid.uuid4()), "arguments": {}, "execution": "node", "queue": "node.web01",
            "node": "web01", "network": "none", "timeout_seconds": 30, "created_at": utcnow(),
            **subject,
        }
    )  # fmt: skip


SCRIPT = {"skill_name": "disk-report", "skill_hash": "a" * 64, "script": "scripts/df.sh"}


def test_a_command_run_and_a_script_run_are_saved_and_read_back(services: Services):
    command, script = row(command=["systemctl", "status", "nginx"]), row(**SCRIPT)
    with core_transaction(services.sessions) as connection:
        insert_row(connection, command)
        insert_row(connection, script)
    with services.sessions() as session:
        found = session.get(Run, command.id)
        other = session.get(Run, script.id)
    assert found is not None and other is not None
    assert (found.command, found.skill_name, found.script) == (
        ["systemctl", "status", "nginx"], None, None,
    )  # fmt: skip
    assert (other.command, other.skill_name) == (None, "disk-report")


@pytest.mark.parametrize(
    "subject",
    [{}, {**SCRIPT, "command": ["true"]}, {"command": ["true"], "skill_name": "disk-report"}],
    ids=["neither", "both", "command-and-a-skill-name"],
)
def test_a_run_naming_neither_or_both_is_refused(services: Services, subject: dict[str, Any]):
    with pytest.raises(IntegrityError), core_transaction(services.sessions) as connection:
        insert_row(connection, row(**subject))

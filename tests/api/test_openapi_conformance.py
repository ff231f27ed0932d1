"""schemathesis, with every check it has and in every phase, against the API as `skillfleet api`
serves it over HTTP (REST and /mcp), as two owners.

A 5xx; an answer whose status, content type, headers or body the document does not give; a
schema-valid request refused or a schema-violating one accepted; an undeclared method answered
with anything but 405 and `Allow`; an operation that answers without its token; one owner
reading the other's object; a deleted resource still found or a created one missing: each
fails the run. tests/api/schemathesis.toml
names the few rules a schema can't hold. Examples per operation are bounded, and drawn the
same way each time, so that the run takes about a minute and finds the same examples.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from factories import skill_files, zip_bytes
from fleet import LiveServer
from sqlalchemy import update

from store.db import transaction
from store.models import ApiToken
from store.tokens import Role, create_token, token_digest

CONFIG = Path(__file__).with_name("schemathesis.toml")
EXAMPLES_PER_OPERATION = 20
UNDRAWN_TOKEN_ID = 748_211_903
MIN_ACCEPTING = 40  # operations that accepted some valid request (47 of 69 did when written)
RUN_LIMIT = 480  # seconds: bounds only a failure


@pytest.fixture
def served(app: Any) -> Iterator[LiveServer]:
    server = LiveServer(app)
    yield server
    server.stop()


@pytest.fixture
def alices_things(client: Any, auth: dict[str, str]) -> None:
    """Something behind the ids the run reads from lists and follows: a skill of alice's, a
    chat with a call that ended, and a job. No call waits: a long poll on one (`?wait=` up to
    60 s) would outlast the request timeout."""
    upload = {"file": (io.BytesIO(zip_bytes(skill_files("notes"), top="notes")), "s.zip")}
    imported = client.post(
        "/api/skills", headers=auth, data=upload, content_type="multipart/form-data"
    )
    assert imported.status_code == 201, imported.json
    call = {"arguments": {}, "chat_id": "chat-1"}
    ended = client.post("/api/tools/list_skills", headers=auth, json=call)
    assert ended.json["status"] == "done", ended.json
    job = {"name": "nightly", "cron": "30 2 * * *", "steps": [{"tool": "list_skills"}]}
    assert client.post("/api/jobs", headers=auth, json=job).status_code == 201


@pytest.fixture
def run_token(services: Any, token: str) -> str:
    """An owner token of alice's with an id the run does not draw, so that it never deletes the
    token it calls with (it may delete alice's first one on its way)."""
    with transaction(services.sessions) as session:
        kept = create_token(session, "alice", Role.OWNER, label="schemathesis")
        moved = update(ApiToken).where(ApiToken.token_hash == token_digest(kept))
        session.execute(moved.values(id=UNDRAWN_TOKEN_ID))
    return kept


@pytest.fixture
def bob_token(other_auth: dict[str, str]) -> str:
    return other_auth["Authorization"].removeprefix("Bearer ")


def wfc_user(name: str, token: str) -> dict[str, Any]:
    """An owner as a Web Fuzzing Commons auth entry, the form schemathesis reads identities in."""
    return {"name": name, "fixedHeaders": [{"name": "Authorization", "value": f"Bearer {token}"}]}


@pytest.mark.slow
@pytest.mark.timeout(RUN_LIMIT + 60)
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_every_operation_keeps_to_the_document_under_every_check(
    served: LiveServer, run_token: str, bob_token: str, alices_things: None, tmp_path: Path
) -> None:
    report_path = tmp_path / "report.json"
    command = [
        sys.executable, "-m", "schemathesis.cli", "--config-file", str(CONFIG), "--no-color",
        "run", f"{served.url}/api/openapi.json",
        "--max-examples", str(EXAMPLES_PER_OPERATION),
        "--report", "json", "--report-json-path", str(report_path),
    ]  # fmt: skip
    owners = {"alice": run_token, "bob": bob_token}
    auth = tmp_path / "auth.json"
    auth.write_text(json.dumps({"auth": [wfc_user(name, token) for name, token in owners.items()]}))
    env = {**os.environ, "CONFORMANCE_AUTH": str(auth)}

    ran = subprocess.run(
        command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=RUN_LIMIT
    )

    assert ran.returncode == 0, ran.stdout[-30_000:] + ran.stderr[-5_000:]
    report = json.loads(report_path.read_text())
    operations = report["operations"]
    assert operations["tested"] == operations["total"] >= 65, operations
    assert {phase: found["status"] for phase, found in report["phases"].items()} == {
        "examples": "skip",  # the document gives no examples
        "coverage": "success",
        "fuzzing": "success",
        "stateful": "success",
    }
    # Not only refusals: most operations accepted some of the valid requests they were sent.
    accepting = [
        label
        for label, phases in report["valid_rates"].items()
        if any(rates["accepted"] for rates in phases.values())
    ]
    assert len(accepting) >= MIN_ACCEPTING, sorted(accepting)

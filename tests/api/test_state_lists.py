"""The API document and the CLI list each machine's states from its enum (store/states.py)."""

from __future__ import annotations

from typing import Any

import click
from flask.testing import FlaskClient

from skillfleet.cli_runs import runs
from store.states import ApprovalStatus, CallStatus, JobRunStatus, RunStatus, TurnStatus

SHOWN = {
    "Run": list(RunStatus),
    "JobRun": list(JobRunStatus),
    "Turn": list(TurnStatus),
    "Call": [s for s in CallStatus if s is not CallStatus.DECIDING],
    "ToolResult": [s for s in CallStatus if s is not CallStatus.DECIDING],
    "Approval": [s for s in ApprovalStatus if s is not ApprovalStatus.ANSWERING],
}


def _parameter(spec: dict[str, Any], path: str, name: str) -> dict[str, Any]:
    parameters = spec["paths"][path]["get"]["parameters"]
    return next(p for p in parameters if p["name"] == name)["schema"]


def test_the_openapi_document_lists_every_state_an_answer_can_hold(client: FlaskClient):
    spec = client.get("/api/openapi.json").json
    schemas = spec["components"]["schemas"]
    for name, states in SHOWN.items():
        assert schemas[name]["properties"]["status"]["enum"] == states, name
    assert _parameter(spec, "/api/runs", "status")["enum"] == list(RunStatus)
    assert _parameter(spec, "/api/calls", "status")["enum"] == SHOWN["Call"]
    assert _parameter(spec, "/api/approvals", "status")["enum"] == SHOWN["Approval"]


def test_a_list_filtered_by_a_state_no_machine_has_is_refused(client: FlaskClient, auth):
    answer = client.get("/api/runs?status=finished", headers=auth)
    assert answer.status_code == 422
    assert client.get("/api/runs?status=timed_out", headers=auth).status_code == 200


def test_the_cli_offers_every_run_state():
    option = next(p for p in runs.commands["list"].params if p.name == "status")
    assert isinstance(option.type, click.Choice)
    assert list(option.type.choices) == list(RunStatus)

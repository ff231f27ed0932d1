"""Traces: a real API process and a real node worker, started with the standard OTEL_*
variables pointing at an OTLP/HTTP receiver in the test, send one trace per tool call: the API's
request, the call and its policy decision, the owner's answer, the Celery task and the run on
the worker. No argument, output or query value is in any span; a collector that is down changes
nothing for the calls."""

from __future__ import annotations

import socket
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import TLS
from fleet import PYTHON, Fleet, fleet, free_port, sqlite_settings, wait_until
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from receiver import receiver

from relay import naming

pytestmark = pytest.mark.fleet

READ_NODE = {"skillfleet.tier": "read", "skillfleet.execution": "node"}
CHANGE_NODE = {"skillfleet.tier": "change", "skillfleet.execution": "node"}
# Prints its arguments: the output holds them too, and neither may reach a span.
ECHO = "import os\nprint(os.environ['SKILLFLEET_ARGS'], flush=True)\n"
NODE = f"t-{uuid.uuid4().hex[:8]}"
DOWN_NODE = f"d-{uuid.uuid4().hex[:8]}"
CLIENT = 3  # OTLP's SpanKind of a client call (a Redis command, a SQL statement)


@dataclass
class Span:
    service: str
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: int
    attributes: dict[str, Any]
    links: list[str]


def spans_of(bodies: list[bytes]) -> list[Span]:
    """Every span the receiver was sent, decoded from OTLP's protobuf."""
    found = []
    for body in bodies:
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            service = _values(resource.resource.attributes)["service.name"]
            for scope in resource.scope_spans:
                for span in scope.spans:
                    found.append(
                        Span(
                            service,
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex(),
                            span.name,
                            span.kind,
                            _values(span.attributes),
                            [link.trace_id.hex() for link in span.links],
                        )  # fmt: skip
                    )
    return found


def _values(attributes: Any) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for attribute in attributes:
        value = attribute.value
        kind = value.WhichOneof("value")
        values[attribute.key] = (
            list(value.array_value.values) if kind == "array_value" else getattr(value, kind)
        )
    return values


@dataclass
class Traced:
    fleet: Fleet
    url: str  # the traced API process
    posts: list[tuple[str, dict[str, str], bytes]]  # what the receiver got

    def http(self) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.fleet.owner_token}"}
        return httpx.Client(verify=TLS, base_url=self.url, headers=headers, timeout=60)

    def bodies(self) -> list[bytes]:
        return [body for path, _, body in list(self.posts) if path == "/v1/traces"]

    def spans(self) -> list[Span]:
        return spans_of(self.bodies())

    def told(self, text: str) -> bool:
        """Whether any span sent holds `text`."""
        return any(text.encode() in body for body in self.bodies())

    def trace_of_call(self, call_id: str, *names: str) -> list[Span]:
        """The spans of the trace holding the API's span of `call_id`, once it has spans
        named `names` from both processes."""

        def complete() -> list[Span] | None:
            spans = self.spans()
            calls = [s for s in spans if s.attributes.get("skillfleet.call_id") == call_id]
            root = next((s for s in calls if s.name == "skillfleet.call"), None)
            if root is None:
                return None
            trace = [s for s in spans if s.trace_id == root.trace_id]
            return trace if set(names) <= {s.name for s in trace} else None

        found: list[Span] = wait_until(complete, 30, f"the spans of call {call_id}", every=0.2)
        return found


def otel_env(env: dict[str, str], endpoint: str) -> dict[str, str]:
    return dict(
        env,
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
        OTEL_BSP_SCHEDULE_DELAY="100",  # spans leave within 0.1 s, not 5 s: the test waits less
        OTEL_EXPORTER_OTLP_TIMEOUT="2",
    )


def start_api(running: Fleet, label: str, env: dict[str, str]) -> str:
    port = free_port()
    log = open(running.logs / f"{label}.log", "ab")  # noqa: SIM115 - closed with the process
    process = subprocess.Popen(
        [PYTHON, "-m", "skillfleet", "api", "--workers", "1"],
        env=dict(env, SKILLFLEET_PORT=str(port)), stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    running.processes[label] = process
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"{label} exited; its log ends:\n{running.log_tail(label)}")
        try:
            return httpx.get(url + "/api/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(answers, 60, f"{label} to answer")
    return url


def start_node(running: Fleet, node: str, endpoint: str) -> None:
    env = otel_env(running.node_env(node), endpoint)
    running.start(node, "worker", "node", "--name", node, env=env)
    running.wait_for_queue(naming.node_queue(node), node)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Traced]:
    """The fleet, an OTLP/HTTP receiver, and an API process and a node worker sending to it."""
    folder = tmp_path_factory.mktemp("traces")
    with (
        receiver() as (port, posts),
        fleet(sqlite_settings(folder, sqlite_template, run_timeout=20)) as running,
    ):
        endpoint = f"http://127.0.0.1:{port}"
        url = start_api(running, "api", otel_env(running.env, endpoint))
        start_node(running, NODE, endpoint)
        yield Traced(running, url, posts)


@pytest.fixture
def traced(shared: Traced) -> Traced:
    return Traced(shared.fleet.with_new_owner(), shared.url, shared.posts)


def test_a_script_call_is_one_trace_from_the_api_request_to_the_run_on_the_node(
    traced: Traced,
) -> None:
    imported = traced.fleet.import_skill("echo", READ_NODE, {"scripts/echo.py": ECHO})
    marker = f"argument-{uuid.uuid4().hex}"
    body = {
        "arguments": {
            "skill_name": "echo", "script": "scripts/echo.py",
            "arguments": {"node": NODE, "note": marker},
        },
        "chat_id": "traced",
    }  # fmt: skip
    with traced.http() as client:
        answer = client.post("/api/tools/run_skill_script", params={"wait": 20}, json=body)
        # A query's values (a cursor here) stay out of the request's span; its names are kept.
        client.get("/api/runs", params={"cursor": marker})
    assert answer.status_code == 200, answer.text
    envelope = answer.json()
    assert envelope["status"] == "done" and marker in envelope["result"]["stdout"], envelope
    call_id, run_id = envelope["call_id"], envelope["run_id"]

    trace = traced.trace_of_call(
        call_id, "POST /api/tools/<tool>", "skillfleet.policy", "skillfleet.run",
        "run/skillfleet.execute_run",
    )  # fmt: skip
    by_name = {s.name: s for s in trace}
    request = by_name["POST /api/tools/<tool>"]
    assert request.parent_id == "" and request.service == "skillfleet-api"
    assert all(s.trace_id == request.trace_id for s in trace)
    call = by_name["skillfleet.call"]
    assert call.parent_id == request.span_id
    expected = {
        "skillfleet.call_id": call_id,
        "skillfleet.tool": "run_skill_script",
        "skillfleet.tier": "read",
        "skillfleet.decision": "allow",
        "skillfleet.run_id": run_id,
        "skillfleet.node": NODE,
        "skillfleet.skill_hash": imported["hash"],
        "skillfleet.status": "running",  # when the call was answered: the run went on
    }
    assert expected.items() <= call.attributes.items(), call.attributes
    policy = by_name["skillfleet.policy"]
    assert policy.parent_id == call.span_id
    assert policy.attributes["skillfleet.decision"] == "allow"
    run = by_name["skillfleet.run"]
    assert run.service == "skillfleet-worker-node"
    assert run.parent_id == by_name["run/skillfleet.execute_run"].span_id
    assert {
        "skillfleet.run_id": run_id,
        "skillfleet.node": NODE,
        "skillfleet.call_id": call_id,
        "skillfleet.skill_hash": imported["hash"],
        "skillfleet.status": "succeeded",
    }.items() <= run.attributes.items(), run.attributes
    services = {s.service for s in trace}
    assert services == {"skillfleet-api", "skillfleet-worker-node"}
    assert any(s.attributes.get("db.system") == "sqlite" for s in trace)  # SQLAlchemy's spans
    assert any(s.attributes.get("db.system") == "redis" for s in trace)  # and Redis's
    # skillfleet's own Redis commands only: the Celery transport's publish is Celery's span.
    assert "LPUSH" not in {s.name for s in trace}
    assert request.attributes["url.query"] == "wait"

    def listed() -> Span | None:
        found = [s for s in traced.spans() if s.name == "GET /api/runs"]
        return next((s for s in found if s.attributes.get("url.query") == "cursor"), None)

    runs = wait_until(listed, 30, "the span of the runs' list")
    assert "?" not in runs.attributes["http.target"] + runs.attributes["http.url"]
    # Neither the arguments, nor the output (the script printed them), nor the query's value.
    assert not traced.told(marker)
    # The heartbeats' and the stream hub's Redis commands made no traces of their own, and
    # SQLAlchemy's pool checkouts no spans.
    assert not [s for s in traced.spans() if s.parent_id == "" and s.kind == CLIENT]
    assert "connect" not in {s.name for s in trace}


def test_a_call_that_waits_for_the_owner_goes_on_in_its_trace_when_approved(
    traced: Traced,
) -> None:
    imported = traced.fleet.import_skill("tidy", CHANGE_NODE, {"scripts/echo.py": ECHO})
    marker = f"argument-{uuid.uuid4().hex}"
    body = {
        "arguments": {
            "skill_name": "tidy", "script": "scripts/echo.py",
            "arguments": {"node": NODE, "note": marker},
        },
        "chat_id": "asked",
    }  # fmt: skip
    with traced.http() as client:
        asked = client.post("/api/tools/run_skill_script", json=body).json()
        assert asked["status"] == "pending_approval", asked
        answered = client.post(
            f"/api/approvals/{asked['approval_id']}", json={"decision": "approve"}
        )
        assert answered.status_code == 200, answered.text
        ended = client.get(f"/api/calls/{asked['call_id']}", params={"wait": 20}).json()
    assert ended["status"] == "done", ended

    trace = traced.trace_of_call(
        asked["call_id"], "skillfleet.approval", "skillfleet.run", "run/skillfleet.execute_run"
    )
    by_name = {s.name: s for s in trace}
    call = by_name["skillfleet.call"]
    assert call.attributes["skillfleet.decision"] == "require_approval"
    assert call.attributes["skillfleet.status"] == "pending_approval"
    approval = by_name["skillfleet.approval"]
    assert approval.parent_id == call.span_id
    assert approval.attributes["skillfleet.approval_id"] == asked["approval_id"]
    assert approval.attributes["skillfleet.decision"] == "approve"
    # Linked to the owner's request, a trace of its own.
    assert approval.links and approval.links[0] != approval.trace_id
    run = by_name["skillfleet.run"]
    assert run.attributes["skillfleet.skill_hash"] == imported["hash"]
    assert run.attributes["skillfleet.status"] == "succeeded"
    assert not traced.told(marker)


@pytest.fixture
def unanswering() -> Iterator[str]:
    """A collector's address that takes connections and never answers: each export waits for
    its timeout."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(64)
        yield f"http://127.0.0.1:{listening.getsockname()[1]}"


@pytest.mark.parametrize("down", ["refusing", "unanswering"])
def test_a_collector_that_is_down_changes_nothing_for_the_calls(
    shared: Traced, unanswering: str, down: str
) -> None:
    endpoint = unanswering if down == "unanswering" else f"http://127.0.0.1:{free_port()}"
    running = shared.fleet.with_new_owner()
    node = f"{DOWN_NODE}-{down[0]}"
    url = start_api(running, f"api-{down}", otel_env(running.env, endpoint))
    start_node(running, node, endpoint)
    running.import_skill("echo", READ_NODE, {"scripts/echo.py": ECHO})
    body = {
        "arguments": {
            "skill_name": "echo", "script": "scripts/echo.py", "arguments": {"node": node},
        },
        "chat_id": "down",
    }  # fmt: skip
    headers = {"Authorization": f"Bearer {running.owner_token}"}
    with httpx.Client(verify=TLS, base_url=url, headers=headers, timeout=60) as client:
        for _ in range(3):
            answer = client.post("/api/tools/run_skill_script", params={"wait": 20}, json=body)
            assert answer.status_code == 200, answer.text
            assert answer.json()["status"] == "done", answer.text
            assert answer.json()["result"]["node"] == node
    running.kill(node, patience=5)
    running.kill(f"api-{down}", patience=5)

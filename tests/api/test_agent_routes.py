"""Every route of the API, walked with each kind of caller and held to the tables of docs/tokens.md.

The tables are the one statement of who reaches what: a route the OpenAPI document lists and the
table leaves out (or the other way round) fails here, and so does a route that answers an agent,
a caller without a token or another owner otherwise than the tables say. `/mcp` is served by the
ASGI tier, not Flask: tests/api/test_mcp_http.py walks its tokens over HTTP.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from factories import finished_run, skill_files, zip_bytes
from flask.testing import FlaskClient
from sqlalchemy import select

from api.services import Services
from store.db import transaction
from store.models import Owner, Turn

TOKENS_DOC = Path(__file__).resolve().parents[2] / "docs" / "tokens.md"
MCP_PATH = "/mcp"
ACCESS_TABLE = "| route | owner | agent |"
OPEN_TABLE = "| route | without a token |"
METHOD = r"(?:GET|POST|PUT|PATCH|DELETE)"
# `GET /api/x` or `GET/PUT /api/x`, in backticks, in a table's first cell.
DOC_ROUTE = re.compile(rf"`({METHOD}(?:/{METHOD})*) (/[^`\s]*)`")
PARAMETER = re.compile(r"<[^>]*>|\{[^}]*\}")
HTTP_METHODS = ("get", "post", "put", "patch", "delete")
# What no schema of the API takes: a JSON array for a body, "~" for every query parameter.
JUNK_BODY = ["not", "an", "object"]
JUNK_VALUE = "~"
MADE_UP_NUMBER = "987654"
WIPE = {"skillfleet.tier": "destructive", "skillfleet.execution": "node"}
RUN_ID = "7d1c4e0a-0000-4000-8000-00000000000a"
TURN_ID = "7d1c4e0a-0000-4000-8000-00000000000b"

Key = tuple[str, str]  # (METHOD, path with every parameter as *)


def shape(path: str) -> str:
    """A path with each parameter as `*`: `/api/runs/<id>` and `/api/runs/{run_id}` alike."""
    return PARAMETER.sub("*", path)


def doc_table(header: str) -> dict[Key, list[str]]:
    """The routes of the docs/tokens.md table under `header`, each with its row's cells."""
    lines = TOKENS_DOC.read_text(encoding="utf-8").splitlines()
    assert header in lines, f"docs/tokens.md has no table headed {header!r}"
    rows: dict[Key, list[str]] = {}
    for line in lines[lines.index(header) + 2 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        routes = DOC_ROUTE.findall(cells[0])
        assert routes, f"a row of docs/tokens.md names no route: {line}"
        for methods, path in routes:
            for method in methods.split("/"):
                key = (method, shape(path))
                assert key not in rows, f"{method} {path} is twice in docs/tokens.md"
                rows[key] = cells
    return rows


def agent_may(cells: list[str]) -> bool:
    """The agent column: "yes…" or "no…"."""
    answer = cells[2]
    assert answer.startswith(("yes", "no")), f"say yes or no for the agent: {cells}"
    return answer.startswith("yes")


@dataclass(frozen=True)
class Route:
    """One path and method of the OpenAPI document."""

    method: str
    path: str  # with {parameters}
    parameters: Mapping[str, str]  # path parameter -> its JSON Schema type
    queries: tuple[str, ...]

    @property
    def key(self) -> Key:
        return (self.method, shape(self.path))

    def filled(self, values: Mapping[str, str]) -> str:
        """The path with each parameter given its value from `values`, or a made-up one."""

        def value(match: re.Match[str]) -> str:
            name = match.group(1)
            found = values.get(name) or made_up(name, self.parameters[name])
            return quote(found, safe="/@")

        return re.sub(r"\{([^}]+)\}", value, self.path)

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


def made_up(name: str, kind: str) -> str:
    return MADE_UP_NUMBER if kind == "integer" else f"no-such-{name.replace('_', '-')}"


def routes_of(client: FlaskClient, served_by_flask: bool = True) -> list[Route]:
    """Every path and method of GET /api/openapi.json, the document the app serves; but for
    `/mcp` unless `served_by_flask` is False."""
    spec = client.get("/api/openapi.json").json
    found = []
    for path, item in spec["paths"].items():
        if served_by_flask and path == MCP_PATH:
            continue
        shared = item.get("parameters", [])
        for method in HTTP_METHODS:
            if method not in item:
                continue
            parameters = shared + item[method].get("parameters", [])
            found.append(
                Route(
                    method.upper(),
                    path,
                    {p["name"]: p["schema"]["type"] for p in parameters if p["in"] == "path"},
                    tuple(p["name"] for p in parameters if p["in"] == "query"),
                )
            )
    return found


@dataclass(frozen=True)
class Answer:
    status: int
    code: str | None

    def __str__(self) -> str:
        return f"{self.status} {self.code or ''}".strip()


def ask(
    client: FlaskClient,
    route: Route,
    headers: Mapping[str, str],
    values: Mapping[str, str],
    junk: bool = False,
) -> Answer:
    """One request to `route`: `{}` as the body of a write (or, with `junk`, a body and a query
    no schema takes). Only the status and the error code are read: a stream is closed unread."""
    body: Any = None if route.method == "GET" else (JUNK_BODY if junk else {})
    query = {name: JUNK_VALUE for name in route.queries} if junk else {}
    response = client.open(
        route.filled(values),
        method=route.method,
        headers=dict(headers),
        json=body,
        query_string=query,
    )
    try:
        error = response.status_code >= 400 and response.is_json
        return Answer(response.status_code, response.json.get("code") if error else None)
    finally:
        response.close()


def ids(values: Mapping[str, str]) -> str:
    return "with alice's ids" if values else "with made-up ids"


def refused(answer: Answer) -> bool:
    return answer.status == 403 and answer.code == "owner_only"


def reached(answer: Answer) -> bool:
    """Neither refused (401, 403) nor broken (5xx): 200, 404 or a 4xx about the request."""
    return answer.status not in (401, 403) and answer.status < 500


# --- Alice's things, for the path parameters ---------------------------------------------------


def upload(name: str) -> dict[str, Any]:
    files = skill_files(name, metadata=WIPE)
    files["scripts/wipe.sh"] = b"#!/bin/bash\necho wiping\n"
    return {
        "data": {"file": (io.BytesIO(zip_bytes(files, top=name)), "s.zip")},
        "content_type": "multipart/form-data",
    }


@pytest.fixture
def world(
    client: FlaskClient, auth: dict[str, str], agent_auth: dict[str, str], services: Services
) -> dict[str, str]:
    """Alice's things, by the name of the path parameter that names them: a skill, a call that
    waits for her approval in a chat, a run, a turn, a job, a spare token and a node."""
    assert client.post("/api/skills", headers=auth, **upload("wiper")).status_code == 201
    skill_hash = client.get("/api/skills/wiper", headers=auth).json["hash"]
    arguments = {"skill_name": "wiper", "script": "scripts/wipe.sh", "arguments": {"node": "web01"}}
    call = {"arguments": arguments, "chat_id": "chat-1"}
    envelope = client.post("/api/tools/run_skill_script", headers=agent_auth, json=call).json
    assert envelope["status"] == "pending_approval", envelope
    job = {"name": "nightly", "cron": "30 2 * * *", "steps": [{"tool": "list_skills"}]}
    created_job = client.post("/api/jobs", headers=auth, json=job)
    assert created_job.status_code == 201, created_job.json
    spare = client.post("/api/tokens", headers=auth, json={"role": "agent", "label": "spare"})
    assert spare.status_code == 201, spare.json
    with transaction(services.sessions) as session:
        alice = session.scalar(select(Owner.id).where(Owner.name == "alice"))
        assert alice is not None
        session.add(finished_run(alice, skill_hash, RUN_ID))
        session.add(finished_turn(alice))
    return {
        "name": "wiper",
        "path": "SKILL.md",
        "tool": "list_skills",
        "call_id": envelope["call_id"],
        "approval_id": envelope["approval_id"],
        "chat_id": "chat-1",
        "run_id": RUN_ID,
        "turn_id": TURN_ID,
        "job_id": created_job.json["id"],
        "token_id": str(spare.json["id"]),
        "node": "web01",
        "package": f"wiper@{skill_hash}.tar.gz",
    }


# The parameters above that name something of alice's own (not shared, like tools and nodes).
ALICES_OWN = ("name", "path", "call_id", "approval_id", "chat_id", "run_id", "turn_id", "job_id")


def finished_turn(owner_id: int) -> Turn:
    return Turn(id=TURN_ID, owner_id=owner_id, chat_id="chat-1", prompt="Wipe.", status="succeeded")


# --- The walks ----------------------------------------------------------------------------------


def test_the_table_names_every_route_of_the_openapi_document_and_no_other(client):
    documented = set(doc_table(ACCESS_TABLE))
    served = {route.key for route in routes_of(client, served_by_flask=False)}

    assert sorted(served - documented) == [], "routes missing from docs/tokens.md"
    assert sorted(documented - served) == [], "docs/tokens.md names routes the API lacks"


def test_every_api_route_outside_the_openapi_document_is_an_open_one(app, client):
    served = {route.key for route in routes_of(client)} | set(doc_table(OPEN_TABLE))
    rules = {
        (method, shape(rule.rule))
        for rule in app.url_map.iter_rules()
        if rule.rule.startswith("/api")
        for method in rule.methods or ()
        if method not in ("HEAD", "OPTIONS")
    }

    assert sorted(rules - served) == []


def test_an_agent_token_reaches_exactly_the_routes_the_table_gives_it(client, agent_auth, world):
    table = doc_table(ACCESS_TABLE)
    wrong = []
    for route in routes_of(client):
        may = agent_may(table[route.key])
        # Alice's real things, then made-up ids: a 404 is an answer, a 403 is a refusal.
        for values in (world, {}):
            answer = ask(client, route, agent_auth, values)
            if not (reached(answer) if may else refused(answer)):
                said = table[route.key][2]
                wrong.append(f"{route} {ids(values)}: the table says {said!r}; {answer}")

    assert not wrong, "\n".join(wrong)


def test_an_owner_only_route_refuses_an_agent_before_it_reads_ids_body_or_query(
    client, agent_auth, world
):
    table = doc_table(ACCESS_TABLE)
    wrong = []
    for route in routes_of(client):
        if agent_may(table[route.key]):
            continue
        for values in (world, {}):
            answer = ask(client, route, agent_auth, values, junk=True)
            if not refused(answer):
                wrong.append(f"{route} {ids(values)}: {answer}")

    assert not wrong, "\n".join(wrong)


def test_without_a_token_every_route_but_the_open_ones_answers_401(client, world):
    open_routes = doc_table(OPEN_TABLE)
    wrong = []
    for route in routes_of(client):
        answer = ask(client, route, {}, world)
        unauthorized = answer.status == 401 and answer.code == "unauthorized"
        if unauthorized == (route.key in open_routes):
            wrong.append(f"{route}: {answer}")

    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("path", ["/api/openapi.json", "/api/docs", "/"])
def test_the_api_description_its_docs_and_the_console_page_need_no_token(client, path):
    assert client.get(path).status_code == 200


def test_another_owner_reads_every_route_but_finds_nothing_of_alices(client, other_auth, world):
    # Isolation is tested route by route elsewhere; here only that no route of the walk leaks.
    wrong = []
    for route in routes_of(client):
        if route.method != "GET":
            continue
        answer = ask(client, route, other_auth, world)
        alices = any(name in ALICES_OWN for name in route.parameters)
        if not reached(answer) or (alices and answer.status != 404):
            wrong.append(f"{route}: {answer}")

    assert not wrong, "\n".join(wrong)


def test_a_route_in_the_table_is_matched_whatever_its_parameters_are_called():
    assert shape("/api/skills/<name>/files/<path>") == shape("/api/skills/{name}/files/{path}")
    assert DOC_ROUTE.findall("`GET/PUT /api/settings`, `DELETE /api/x/<id>` (why)") == [
        ("GET/PUT", "/api/settings"),
        ("DELETE", "/api/x/<id>"),
    ]


def test_a_made_up_id_is_a_number_where_the_route_takes_a_number():
    route = Route("DELETE", "/api/tokens/{token_id}", {"token_id": "integer"}, ())

    assert route.filled({}) == f"/api/tokens/{MADE_UP_NUMBER}"

"""A method a route does not take: 405 in the one error shape with `Allow`, on every route of the
OpenAPI document, before its body or its token is read, and nothing changes."""

from __future__ import annotations

import io
from typing import Any

import pytest
from factories import skill_files, store_snapshot, zip_bytes
from flask.testing import FlaskClient

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
MCP_PATH = "/mcp"  # served beside Flask: tests/api/test_mcp_http.py holds it to the same


def undeclared(client: FlaskClient) -> list[tuple[str, str, set[str]]]:
    """(method, path, the methods the path takes) for each method a path of the document lacks;
    path parameters are given names of alice's skill and file, or 1 for a number."""
    document = client.get("/api/openapi.json").json
    found = []
    for path, item in document["paths"].items():
        if path == MCP_PATH:
            continue
        declared = {method.upper() for method in item if method.upper() in METHODS}
        takes = declared | {"OPTIONS"} | ({"HEAD"} if "GET" in declared else set())
        filled = path.replace("{path}", "SKILL.md")
        for name in ("name", "skill"):
            filled = filled.replace("{" + name + "}", "mover")
        filled = "/".join("1" if part.startswith("{") else part for part in filled.split("/"))
        found += [(method, filled, takes) for method in METHODS if method not in declared]
    return found


@pytest.fixture
def mover(client: FlaskClient, auth: dict[str, str]) -> None:
    files = skill_files("mover")
    data = {"file": (io.BytesIO(zip_bytes(files, top="mover")), "s.zip")}
    answer = client.post("/api/skills", headers=auth, data=data, content_type="multipart/form-data")
    assert answer.status_code == 201, answer.json


def state(client: FlaskClient, auth: dict[str, str], services: Any) -> tuple[Any, ...]:
    """What a request could change: the store, the settings, the tokens, the jobs."""
    read = [client.get(path, headers=auth).json for path in ("/api/settings", "/api/tokens")]
    read.append(client.get("/api/jobs", headers=auth).json)
    return (store_snapshot(services.settings.skills_dir, services.sessions), *map(repr, read))


@pytest.mark.parametrize("with_token", [True, False], ids=["with a token", "without one"])
def test_every_method_a_route_lacks_is_405_with_allow_and_changes_nothing(
    client, auth, services, mover, with_token
):
    headers = {**(auth if with_token else {}), "Content-Type": "text/plain"}
    before = state(client, auth, services)
    wrong = []

    for method, path, takes in undeclared(client):
        answer = client.open(path, method=method, headers=headers, data="not JSON")
        allowed = set(answer.headers.get("Allow", "").split(", "))
        expected = {
            "code": "method_not_allowed",
            "status": 405,
            "message": f"This route does not take {method}; it takes {', '.join(sorted(takes))}.",
        }
        if answer.status_code != 405 or allowed != takes or answer.json != expected:
            wrong.append(f"{method} {path}: {answer.status_code} {answer.headers} {answer.json}")

    assert len(undeclared(client)) > 100  # every route, not a few
    assert wrong == [], "\n".join(wrong)
    assert state(client, auth, services) == before

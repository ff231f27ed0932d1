"""The hot route answers plain tool calls as the Flask route does, and leaves the rest to it."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from factories import skill_zip
from flask import Flask, request, request_started
from sqlalchemy import func, select
from werkzeug.test import Client, TestResponse

from api import create_app
from api.bodies import MAX_BODY_BYTES
from api.hotroute import HotRoute
from api.services import Services
from store.db import transaction
from store.models import ToolCall
from store.tokens import create_node_token

LOAD = {"arguments": {"skill_name": "probe"}}


@pytest.fixture
def probe(client, auth) -> None:
    """alice's `probe` skill."""
    files = {"file": (io.BytesIO(skill_zip("probe")), "probe.zip")}
    response = client.post("/api/skills", headers=auth, data=files)
    assert response.status_code == 201, response.json


@contextmanager
def flask_requests(app: Flask) -> Iterator[list[str]]:
    """The paths Flask's own request handling served while the block ran."""
    served: list[str] = []

    def started(_sender: Flask, **_extra: object) -> None:
        served.append(request.path)

    with request_started.connected_to(started, app):
        yield served


def both(app: Flask, path: str, **request: object) -> tuple[TestResponse, TestResponse]:
    """The answers of the hot route and of the Flask route alone to the same request."""
    route = app.wsgi_app
    assert isinstance(route, HotRoute)
    hot = Client(app).post(path, **request)
    flask_only = Client(route.inner).post(path, **request)
    return hot, flask_only


def calls_recorded(services: Services) -> int:
    with services.sessions() as session:
        return int(session.scalar(select(func.count()).select_from(ToolCall)) or 0)


def same_answer(hot: TestResponse, flask_only: TestResponse) -> None:
    assert hot.status_code == flask_only.status_code
    assert hot.headers["Content-Type"] == flask_only.headers["Content-Type"]
    assert hot.headers["Content-Length"] == str(len(hot.get_data()))
    hot_body, flask_body = hot.get_data(as_text=True), flask_only.get_data(as_text=True)
    hot_call = json.loads(hot_body).get("call_id")
    if hot_call is not None:  # each request made a call of its own
        flask_body = flask_body.replace(json.loads(flask_body)["call_id"], hot_call)
    assert hot_body == flask_body


def test_a_plain_call_is_answered_without_flask_and_just_as_flask_answers_it(
    app, auth, services, probe
):
    before = calls_recorded(services)
    with flask_requests(app) as served:
        hot, flask_only = both(app, "/api/tools/load_skill?wait=5", json=LOAD, headers=auth)

    assert served == ["/api/tools/load_skill"]  # the second request only
    assert hot.status_code == 200
    assert hot.json["status"] == "done"
    assert "Follow these steps." in hot.json["result"]["content"]
    same_answer(hot, flask_only)
    assert calls_recorded(services) == before + 2


def test_an_agent_token_calls_through_the_hot_route_and_another_owner_finds_nothing(
    app, auth, agent_auth, other_auth, probe
):
    with flask_requests(app) as served:
        agent = Client(app).post("/api/tools/load_skill", json=LOAD, headers=agent_auth)
        stranger = Client(app).post("/api/tools/load_skill", json=LOAD, headers=other_auth)

    assert served == []
    assert agent.json["status"] == "done"
    assert stranger.json["status"] == "failed"
    assert stranger.json["error"]["code"] == "skill_not_found"


def node_auth(services: Services) -> dict[str, str]:
    with transaction(services.sessions) as session:
        return {"Authorization": f"Bearer {create_node_token(session, 'web01')}"}


LOAD_PATH = "/api/tools/load_skill"


def sent(body: str | bytes, content_type: str = "application/json") -> dict[str, object]:
    return {"data": body, "headers": {"Content-Type": content_type}}


def bearer(token: str) -> dict[str, object]:
    return {"json": LOAD, "headers": {"Authorization": f"Bearer {token}"}}


# (path, request, whose token), each refused before any call is made.
HOSTILE = {
    "no token": (LOAD_PATH, {"json": LOAD}, None),
    "an empty bearer": (LOAD_PATH, bearer(""), None),
    "a wrong token": (LOAD_PATH, bearer("nope"), None),
    "a node token": (LOAD_PATH, {"json": LOAD}, "node"),
    "a text body": (LOAD_PATH, sent(json.dumps(LOAD), "text/plain"), "owner"),
    "broken JSON": (LOAD_PATH, sent('{"arguments": '), "owner"),
    "a JSON list": (LOAD_PATH, {"json": [LOAD]}, "owner"),
    "an unknown field": (LOAD_PATH, {"json": {**LOAD, "admin": True}}, "owner"),
    "a wrong mode": (LOAD_PATH, {"json": {**LOAD, "mode": "force"}}, "owner"),
    "a wait too long": (LOAD_PATH + "?wait=61", {"json": LOAD}, "owner"),
    "a wait not a number": (LOAD_PATH + "?wait=soon", {"json": LOAD}, "owner"),
    "a blank wait": (LOAD_PATH + "?wait=", {"json": LOAD}, "owner"),
    "a tool with ../": ("/api/tools/../skills", {"json": LOAD}, "owner"),
    "a tool with a NUL": ("/api/tools/load%00skill", {"json": LOAD}, "owner"),
    "a tool of 300 characters": ("/api/tools/" + "t" * 300, {"json": LOAD}, "owner"),
    "a tool with a slash": (LOAD_PATH + "/x", {"json": LOAD}, "owner"),
    "a body over the limit": (LOAD_PATH, sent(b"{" + b" " * MAX_BODY_BYTES + b"}"), "owner"),
}
# Not refused, but not plain either: Flask reads them its own way.
UNUSUAL = {
    "no body": (LOAD_PATH, {"headers": {"Content-Type": "application/json"}}),
    "a wait given twice": (LOAD_PATH + "?wait=1&wait=99", {"json": LOAD}),
    "a +json media type": (LOAD_PATH, sent(json.dumps(LOAD), "application/merge-patch+json")),
}


@pytest.mark.parametrize("case", UNUSUAL, ids=list(UNUSUAL))
def test_a_call_flask_reads_its_own_way_is_left_to_it(app, auth, probe, case):
    path, request = UNUSUAL[case]
    request = {**request, "headers": {**auth, **request.get("headers", {})}}  # type: ignore[dict-item]
    with flask_requests(app) as served:
        hot, flask_only = both(app, path, **request)

    assert len(served) == 2, "the hot route answered it"
    assert hot.status_code == 200
    same_answer(hot, flask_only)


@pytest.mark.parametrize("case", HOSTILE, ids=list(HOSTILE))
def test_a_call_that_is_not_plain_is_answered_by_the_flask_route_and_records_nothing(
    app, auth, services, probe, case
):
    path, request, who = HOSTILE[case]
    token = {"owner": auth, "node": node_auth(services) if who == "node" else {}, None: {}}[who]
    request = {**request, "headers": {**token, **request.get("headers", {})}}  # type: ignore[dict-item]
    before = calls_recorded(services)
    with flask_requests(app) as served:
        hot, flask_only = both(app, path, **request)

    assert len(served) == 2, "the hot route answered it"
    assert hot.status_code >= 400 and hot.json["code"], hot.get_data(as_text=True)[:200]
    same_answer(hot, flask_only)
    assert calls_recorded(services) == before


def test_an_error_raised_once_the_broker_has_the_call_is_answered_by_flasks_handlers(
    app, auth, probe
):
    body = {"arguments": ["skill_name", "probe"]}
    with flask_requests(app) as served:
        hot, flask_only = both(app, "/api/tools/load_skill", json=body, headers=auth)

    assert served == ["/api/tools/load_skill"]  # the Flask route's only
    assert hot.status_code == 400
    assert hot.json["code"] == "invalid_call"
    same_answer(hot, flask_only)


def test_with_cors_origins_every_call_is_served_by_flask_with_its_cors_headers(
    services, auth, probe
):
    origin = "https://console.example.org"
    cors_services = Services.build(services.settings.with_overrides(cors_origins=(origin,)))
    cors_app = create_app(services=cors_services)
    assert not isinstance(cors_app.wsgi_app, HotRoute)
    response = cors_app.test_client().post(
        "/api/tools/load_skill", json=LOAD, headers={**auth, "Origin": origin}
    )
    cors_services.engine.dispose()
    assert response.json["status"] == "done"
    assert response.headers["Access-Control-Allow-Origin"] == origin

"""The nodes routes: node tokens reach only their own node, the fleet view, sync requests."""

from __future__ import annotations

import hashlib
import io
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from conftest import offer_node
from factories import skill_zip
from flask.testing import FlaskClient

from api import create_app
from api.services import Services
from relay import heartbeat, naming
from relay.connections import database_number
from store.db import transaction
from store.signing import public_key_text, verify_manifest
from store.tokens import create_node_token

WAIT_SECONDS = 5.0


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def register(services: Services, name: str) -> dict[str, str]:
    """Register `name` for alice (the owner `auth` stands for) and issue its node token."""
    offer_node(services, name)
    with transaction(services.sessions) as session:
        return bearer(create_node_token(session, name))


def upload(client: FlaskClient, auth: dict[str, str], name: str) -> dict[str, Any]:
    body = {"file": (io.BytesIO(skill_zip(name)), "skill.zip")}
    response = client.post(
        "/api/skills", headers=auth, data=body, content_type="multipart/form-data"
    )
    assert response.status_code == 201, response.json
    return dict(response.json)


@pytest.fixture
def web01(services: Services) -> dict[str, str]:
    return register(services, "web01")


@pytest.fixture
def subscriber(live_redis: redis.Redis) -> Iterator[Any]:
    pubsub = live_redis.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(naming.nodes_sync(database_number(live_redis)))
    yield pubsub
    pubsub.close()


def next_message(pubsub: Any) -> dict[str, Any] | None:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.2)
        if message is not None:
            return dict(message)
    return None


def unique_node() -> str:
    """A node name no other test (or test run sharing this Redis) uses."""
    return f"node-{uuid.uuid4().hex[:10]}"


def channel(message: dict[str, Any] | None) -> str | None:
    return None if message is None else message["channel"].decode()


# -- manifest and packages ------------------------------------------------------------


def test_a_node_token_gets_its_own_node_s_signed_manifest(client, services, auth, web01):
    skill = upload(client, auth, "disk-report")
    response = client.get("/api/nodes/web01/manifest", headers=web01)
    assert response.status_code == 200, response.json
    manifest = verify_manifest(public_key_text(services.signing_key), response.json)
    assert manifest["node"] == "web01"
    assert {"name": "disk-report", "hash": skill["hash"]}.items() <= next(
        entry for entry in manifest["packages"] if entry["name"] == "disk-report"
    ).items()


def test_an_unchanged_manifest_is_answered_304_without_a_body(client, auth, web01):
    upload(client, auth, "disk-report")
    first = client.get("/api/nodes/web01/manifest", headers=web01)
    tag = first.headers["ETag"]
    again = client.get("/api/nodes/web01/manifest", headers={**web01, "If-None-Match": tag})
    assert (again.status_code, again.data, again.headers["ETag"]) == (304, b"", tag)


def test_a_changed_manifest_is_sent_again_whatever_tag_the_node_sends(
    client, services, auth, web01
):
    upload(client, auth, "disk-report")
    tag = client.get("/api/nodes/web01/manifest", headers=web01).headers["ETag"]
    skill = upload(client, auth, "net-report")
    changed = client.get("/api/nodes/web01/manifest", headers={**web01, "If-None-Match": tag})
    assert changed.status_code == 200 and changed.headers["ETag"] != tag
    manifest = verify_manifest(public_key_text(services.signing_key), changed.json)
    assert skill["hash"] in {entry["hash"] for entry in manifest["packages"]}
    other = client.get("/api/nodes/web01/manifest", headers={**web01, "If-None-Match": '"x"'})
    assert (other.status_code, other.headers["ETag"]) == (200, changed.headers["ETag"])


def test_a_manifest_tag_is_no_way_past_the_node_check(client, auth, web01, other_auth):
    tag = client.get("/api/nodes/web01/manifest", headers=web01).headers["ETag"]
    for headers in (other_auth, {"Authorization": "Bearer nope"}):
        refused = client.get("/api/nodes/web01/manifest", headers={**headers, "If-None-Match": tag})
        assert refused.status_code in (401, 404)


def test_a_node_token_asking_for_another_node_s_manifest_gets_404(client, web01):
    response = client.get("/api/nodes/web02/manifest", headers=web01)
    assert response.status_code == 404
    assert response.json["code"] == "node_not_found"


def test_an_owner_reads_its_own_node_s_manifest_and_no_other(client, services, auth, other_auth):
    register(services, "web02")
    response = client.get("/api/nodes/web02/manifest", headers=auth)
    assert response.status_code == 200
    assert response.json["manifest"]["node"] == "web02"
    for node in ("web02", "spark", "nowhere"):  # bob's token: none of these is his
        refused = client.get(f"/api/nodes/{node}/manifest", headers=other_auth)
        assert (refused.status_code, refused.json["code"]) == (404, "node_not_found")


def test_a_node_downloads_exactly_the_package_its_manifest_lists(client, auth, web01):
    skill = upload(client, auth, "disk-report")
    manifest = client.get("/api/nodes/web01/manifest", headers=web01).json["manifest"]
    entry = next(e for e in manifest["packages"] if e["name"] == "disk-report")
    response = client.get(f"/api/nodes/web01/packages/disk-report@{skill['hash']}", headers=web01)
    assert response.status_code == 200
    assert response.mimetype == "application/gzip"
    assert hashlib.sha256(response.data).hexdigest() == entry["sha256"]
    assert len(response.data) == entry["size"]


def test_a_node_token_cannot_download_another_node_s_packages(client, services, auth, web01):
    skill = upload(client, auth, "disk-report")
    path = f"/api/nodes/web02/packages/disk-report@{skill['hash']}"
    assert client.get(path, headers=web01).status_code == 404
    assert client.get(path, headers=register(services, "web02")).status_code == 200


@pytest.mark.parametrize(
    "package", ["disk-report@" + "0" * 64, "disk-report", "..@..", "nothing@" + "a" * 64]
)
def test_an_unknown_package_is_404_package_not_found(client, auth, web01, package):
    upload(client, auth, "disk-report")
    response = client.get(f"/api/nodes/web01/packages/{package}", headers=web01)
    assert response.status_code == 404
    assert response.json["code"] == "package_not_found"


def test_a_retired_hash_is_404_package_not_found(client, auth, web01):
    old = upload(client, auth, "disk-report")
    client.get("/api/nodes/web01/manifest", headers=web01)
    assert client.delete("/api/skills/disk-report", headers=auth).status_code == 204
    response = client.get(f"/api/nodes/web01/packages/disk-report@{old['hash']}", headers=web01)
    assert response.status_code == 404
    assert response.json["code"] == "package_not_found"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/nodes"),
        ("POST", "/api/nodes/web01/sync"),
        ("GET", "/api/skills"),
        ("GET", "/api/tools"),
    ],
)
def test_a_node_token_gets_403_on_owner_only_routes(client, web01, method, path):
    response = client.open(path, method=method, headers=web01)
    assert response.status_code == 403
    assert response.json["code"] == "forbidden"


@pytest.mark.parametrize(
    "path", ["/api/nodes", "/api/nodes/web01/manifest", "/api/nodes/web01/packages/a@b"]
)
def test_node_routes_need_a_token(client, path):
    assert client.get(path).status_code == 401


# -- the fleet view ---------------------------------------------------------------------


def test_the_node_list_shows_features_hashes_and_last_heartbeat(client, services, auth, live_redis):
    name = unique_node()
    register(services, name)
    instance = heartbeat.Instance(
        role="node",
        queue=naming.node_queue(name),
        name=name,
        features=["skills", "docker"],
        hashes={"disk-report": ["a" * 64]},
    )
    heartbeat.beat(live_redis, instance)
    try:
        listed = {n["name"]: n for n in client.get("/api/nodes", headers=auth).json}
    finally:
        heartbeat.stop(live_redis, instance)
    node = listed[name]
    assert node["registered"] is True and node["alive"] is True
    assert node["features"] == ["docker", "skills"]
    assert node["hashes"] == {"disk-report": ["a" * 64]}
    assert node["last_heartbeat"] is not None
    [worker] = node["workers"]
    assert worker["id"] == instance.id
    assert (worker["role"], worker["queue"], worker["serving"]) == ("node", f"node.{name}", True)
    assert worker["last_heartbeat"] == node["last_heartbeat"]


def test_a_registered_node_without_a_worker_is_listed_as_not_alive(
    client, services, auth, live_redis
):
    name = unique_node()
    register(services, name)
    listed = {n["name"]: n for n in client.get("/api/nodes", headers=auth).json}
    assert listed[name] == {
        "name": name,
        "registered": True,
        "alive": False,
        "health": "down",
        "queues": [],
        "workers": [],
        "features": [],
        "hashes": {},
        "last_heartbeat": None,
        "shared": False,
        "runs_as": None,
    }


def test_a_live_worker_of_a_node_offered_to_no_one_is_listed_to_no_owner(
    client, services, auth, other_auth, live_redis
):
    stray, bobs = unique_node(), unique_node()
    offer_node(services, bobs, "bob")
    workers = [
        heartbeat.Instance(role="node", queue=naming.node_queue(name), name=name)
        for name in (stray, bobs)
    ]
    for instance in workers:
        heartbeat.beat(live_redis, instance)
    try:
        alices = [n["name"] for n in client.get("/api/nodes", headers=auth).json]
        bob_sees = [n["name"] for n in client.get("/api/nodes", headers=other_auth).json]
    finally:
        for instance in workers:
            heartbeat.stop(live_redis, instance)
    assert stray not in alices and bobs not in alices
    assert stray not in bob_sees and bobs in bob_sees


def test_a_node_shared_by_two_owners_says_so_and_how_it_runs_scripts(
    client, services, auth, other_auth, live_redis
):
    name = unique_node()
    register(services, name)
    offer_node(services, name, "bob")
    instance = heartbeat.Instance(
        role="node", queue=naming.node_queue(name), name=name, features=["skills", "run-uids"]
    )
    heartbeat.beat(live_redis, instance)
    try:
        views = [
            {n["name"]: n for n in client.get("/api/nodes", headers=who).json}[name]
            for who in (auth, other_auth)
        ]
    finally:
        heartbeat.stop(live_redis, instance)
    for view in views:
        assert (view["shared"], view["runs_as"]) == (True, "uid")


# -- sync requests ------------------------------------------------------------------------


def test_a_sync_request_is_published_on_that_node_s_channel(client, services, auth, live_redis):
    name = unique_node()
    register(services, name)
    refused = client.post(f"/api/nodes/{unique_node()}/sync", headers=auth)  # no node of hers
    assert (refused.status_code, refused.json["code"]) == (404, "node_not_found")
    pubsub = live_redis.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(naming.node_sync(name, database_number(live_redis)))
    try:
        response = client.post(f"/api/nodes/{name}/sync", headers=auth)
        assert response.status_code == 202
        assert response.json == {"node": name, "receivers": 1}
        assert channel(next_message(pubsub)) == naming.node_sync(name, database_number(live_redis))
    finally:
        pubsub.close()


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("PUT", "/api/skills/disk-report/enabled", {"enabled": False}),
        ("DELETE", "/api/skills/disk-report", None),
        ("POST", "/api/skills/disk-report/duplicate", {"name": "disk-copy"}),
    ],
    ids=["disable", "delete", "duplicate"],
)
def test_every_skill_change_asks_all_nodes_to_sync(
    client, auth, subscriber, live_redis, method, path, body
):
    everyone = naming.nodes_sync(database_number(live_redis))
    upload(client, auth, "disk-report")
    assert channel(next_message(subscriber)) == everyone
    response = client.open(path, method=method, headers=auth, json=body)
    assert response.status_code < 300, response.json
    assert channel(next_message(subscriber)) == everyone


def test_a_skill_change_succeeds_when_redis_is_away(services, auth):
    away = services.settings.with_overrides(redis_url="redis://127.0.0.1:1/0")
    app = create_app(services=Services.build(away, engine=services.engine))
    client = app.test_client()
    assert upload(client, auth, "disk-report")["name"] == "disk-report"
    response = client.put("/api/skills/disk-report/enabled", headers=auth, json={"enabled": False})
    assert response.status_code == 200
    assert json.loads(response.data)["enabled"] is False

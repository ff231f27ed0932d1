"""Webhooks and push endpoints reach public hosts only: every way of writing a private,
loopback, link-local or otherwise non-public address is refused when it is registered, and a
delivery checks the host again and connects only to an address it checked.

Only loopback is ever connected to here (tests/netguard.py stops anything else before it
connects); the allowed deliveries reach a real HTTP server on loopback.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REDIS_URL
from factories import owner_id_of
from netguard import watched_connections
from receiver import receiver

from relay import naming, push
from store.egress import Egress
from store.secrets import Sealer
from store.settings import Settings
from workers import notify

WIPE_CALL = {"arguments": {"skill_name": "wiper", "script": "scripts/wipe.sh",
                           "arguments": {"node": "web01"}}, "chat_id": "c1"}  # fmt: skip

# Each is refused however it is written: (URL, what the message says it is).
REFUSED = [
    ("http://169.254.169.254/latest/meta-data/", "a link-local address"),
    ("http://metadata.google.internal/computeMetadata/v1/", "a name of a local network"),
    ("http://10.0.0.1/hook", "a private address"),
    ("http://192.168.1.20:8080/hook", "a private address"),
    ("http://172.16.0.1/hook", "a private address"),
    ("http://100.64.0.1/hook", "not a public address"),
    ("http://[fd00::1]/hook", "a private address"),
    ("http://[fe80::1]/hook", "a link-local address"),
    ("http://[fec0::1]/hook", "a site-local address"),
    ("http://0.0.0.0:8750/api/skills", "the unspecified address"),
    ("http://0/hook", "the unspecified address"),
    ("http://[::]/hook", "the unspecified address"),
    ("http://2130706433/hook", "is 127.0.0.1, a loopback address"),
    ("http://0x7f000001/hook", "is 127.0.0.1, a loopback address"),
    ("http://0177.0.0.1/hook", "is 127.0.0.1, a loopback address"),
    ("http://127.1/hook", "is 127.0.0.1, a loopback address"),
    ("http://017700000001/hook", "is 127.0.0.1, a loopback address"),
    ("http://[::1]:8750/api/skills", "a loopback address"),
    ("http://[::ffff:127.0.0.1]/hook", "which holds 127.0.0.1, a loopback address"),
    ("http://[::ffff:a9fe:a9fe]/hook", "which holds 169.254.169.254, a link-local address"),
    ("http://[64:ff9b::a00:1]/hook", "which holds 10.0.0.1, a private address"),
    ("http://[2002:c0a8:101::1]/hook", "which holds 192.168.1.1, a private address"),
    ("http://224.0.0.1/hook", "a multicast address"),
    ("http://[ff02::1]/hook", "a multicast address"),
    ("http://240.0.0.1/hook", "a reserved address"),
    ("http://localhost:8750/api/skills", "a name of a local network"),  # the API
    ("http://LocalHost.:5555/api/workers", "a name of a local network"),  # Flower
    ("http://127.0.0.1:8750/api/skills", "a loopback address"),
    ("http://127.0.0.1:5555/api/workers", "a loopback address"),
    ("http://redis:6379/", "a name of a local network"),  # a container's name
    ("http://printer.local/", "a name of a local network"),
    ("http://user@127.0.0.1:6379/", "a loopback address"),
]


@pytest.fixture
def settings(request, tmp_path: Path, database_url: str) -> Settings:
    """No host allowed beyond public ones, unless a test names some (as an operator lists a
    test host in SKILLFLEET_EGRESS_ALLOW)."""
    return Settings(
        data_dir=tmp_path / "var", database_url=database_url, redis_url=REDIS_URL, dry_run=True,
        egress_allow=getattr(request, "param", ()),
    )  # fmt: skip


# The test host an operator allowed: a name that resolves to loopback without asking DNS.
ALLOWING_LOCALHOST = pytest.mark.parametrize("settings", [("localhost",)], indirect=True)


@pytest.fixture
def quiet_feed(services, redis_client):
    """The owner's feed and the retries start empty (Redis outlives the test database)."""
    redis_client.delete(naming.owner_events(owner_id_of(services)), naming.webhook_retries())


def notify_context(services, settings, egress: Egress) -> notify.NotifyContext:
    return notify.NotifyContext(
        services.sessions, services.redis, Sealer(settings.keys_dir),
        push.load_or_create_vapid(settings.keys_dir), "mailto:owner@example.org",
        settings.push_services, egress,
    )  # fmt: skip


@pytest.mark.parametrize(("url", "reason"), REFUSED)
def test_a_webhook_to_an_address_that_is_not_public_is_refused_and_nothing_is_saved(
    client, auth, url, reason
):
    with watched_connections() as connections:
        response = client.post("/api/webhooks", headers=auth, json={"url": url, "events": ["*"]})

    assert response.status_code == 422, response.json
    assert response.json["code"] == "webhook_url_refused"
    assert reason in response.json["message"]
    assert response.json["message"].startswith("The webhook URL is refused: ")
    assert client.get("/api/webhooks", headers=auth).json == []
    # The API reached its own database and Redis only, never the webhook's host.
    assert {port for _host, port in connections} <= {5432, 6379}


@ALLOWING_LOCALHOST
def test_a_name_the_operator_allows_is_accepted_at_its_loopback_address(client, auth):
    hook = {"url": "http://localhost:9/hook", "events": ["*"]}
    with watched_connections() as connections:
        created = client.post("/api/webhooks", headers=auth, json=hook)

    assert created.status_code == 201, created.json
    assert ("127.0.0.1", 9) not in connections  # checked, never called at registration


def test_an_ambiguous_or_malformed_url_is_refused(client, auth):
    for url in ("http://[::1/hook", "http://:80/hook", "http://8.8.8.8:99999/"):
        response = client.post("/api/webhooks", headers=auth, json={"url": url, "events": ["*"]})
        assert response.status_code == 422, (url, response.json)
        assert response.json["code"] in ("webhook_url_refused", "notification_invalid"), url
    assert client.get("/api/webhooks", headers=auth).json == []


@ALLOWING_LOCALHOST
def test_a_delivery_to_a_host_no_longer_allowed_is_refused_and_never_connected(
    client, auth, services, settings, quiet_feed, wiper
):
    with receiver() as (port, got):
        hook = {"url": f"http://localhost:{port}/hook", "events": ["approval.waiting"]}
        assert client.post("/api/webhooks", headers=auth, json=hook).status_code == 201
        pending = client.post("/api/tools/run_skill_script", headers=auth, json=WIPE_CALL)
        assert pending.json["status"] == "pending_approval", pending.json
        # The operator took `localhost` off the list: the same name now resolves to a refused
        # address, and the delivery is checked again before anything connects.
        with watched_connections() as connections:
            notify.pump(notify_context(services, settings, Egress()))
        assert got == []
        assert [c for c in connections if c[1] == port] == []
        [retry] = services.redis.zrange(naming.webhook_retries(), 0, -1)
        assert json.loads(retry)["attempt"] == 2  # a refused delivery is tried again later

        # Allowed again, the retry goes out to the loopback server it was checked for.
        services.redis.zadd(naming.webhook_retries(), {retry: 0})
        with watched_connections() as connections:
            notify.pump(notify_context(services, settings, Egress(settings.egress_allow)))
    [(path, headers, body)] = got
    assert path == "/hook" and headers["host"] == f"localhost:{port}"
    assert json.loads(body)["kind"] == "approval.waiting"
    assert ("127.0.0.1", port) in connections


def test_a_push_endpoint_must_be_https_on_port_443_of_a_public_push_service(
    tmp_path, database_url, redis_client
):
    from api import create_app
    from api.services import Services
    from store.db import transaction
    from store.tokens import create_owner_token

    settings = Settings(
        data_dir=tmp_path / "var", database_url=database_url, redis_url=REDIS_URL, dry_run=True,
        push_services=("127.0.0.1", "*.push.example.org"),
    )  # fmt: skip
    services = Services.build(settings)
    try:
        with transaction(services.sessions) as session:
            auth = {"Authorization": f"Bearer {create_owner_token(session, 'alice')}"}
        client = create_app(services=services).test_client()
        keys = {"p256dh": "BNc", "auth": "tB"}
        with watched_connections() as connections:
            answers = {
                endpoint: client.post(
                    "/api/push/subscriptions",
                    headers=auth,
                    json={"endpoint": endpoint, "keys": keys},
                ).json  # fmt: skip
                for endpoint in (
                    "http://127.0.0.1:9/push/1",  # http to a host no one allowed
                    "https://127.0.0.1:8443/push/1",  # not port 443
                    "https://127.0.0.1/push/1",  # 443, but loopback
                    "https://a.push.example.org:444/x",  # not port 443
                )
            }
        assert {port for _host, port in connections} <= {5432, 6379}
        assert client.get("/api/push/subscriptions", headers=auth).json == []
    finally:
        services.engine.dispose()
    assert {answer["code"] for answer in answers.values()} == {"endpoint_not_allowed"}
    loopback = answers["https://127.0.0.1/push/1"]["message"]
    assert "127.0.0.1, a loopback address" in loopback
    assert "port 443" in answers["https://127.0.0.1:8443/push/1"]["message"]

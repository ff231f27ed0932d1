"""Notifications: real Web Push encryption to a local push endpoint, signed webhooks.

Events come from real calls through the API (an approval that waits); the control worker's
notify step (`workers.notify.pump`, what beat's task calls) runs in this process.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import http_ece
import pytest
from conftest import REDIS_URL
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from factories import owner_id_of
from trickle import trickling

from relay import naming, push
from store.egress import Egress
from store.secrets import Sealer
from store.settings import DEFAULT_PUSH_SERVICES, Settings
from workers import notify, webhooks

pytestmark = pytest.mark.fleet

WIPE = {"skillfleet.tier": "destructive", "skillfleet.execution": "node"}
WIPE_CALL = {"arguments": {"skill_name": "wiper", "script": "scripts/wipe.sh",
                           "arguments": {"node": "web01"}},
             "chat_id": "c1", "turn_id": "t1"}  # fmt: skip


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    """Loopback push endpoints and webhooks are allowed here (both lists are configurable)."""
    return Settings(
        data_dir=tmp_path / "var", database_url=database_url, redis_url=REDIS_URL, dry_run=True,
        push_services=("127.0.0.1",), egress_allow=("127.0.0.1",),
    )  # fmt: skip


@dataclass
class Receiver:
    url: str
    statuses: dict[str, list[int]]
    got: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)


@contextmanager
def receiver(statuses: dict[str, list[int]] | None = None) -> Iterator[Receiver]:
    """A local HTTP server that keeps every POST; each path answers its scripted statuses."""
    state = Receiver("", statuses or {})

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 - the http.server name
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            state.got.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            answers = state.statuses.get(self.path) or [201]
            status = answers.pop(0) if len(answers) > 1 else answers[0]
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_port}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class Browser:
    """A browser's side of a subscription: its private key and auth secret."""

    private_key: ec.EllipticCurvePrivateKey
    auth: bytes

    def keys(self) -> dict[str, str]:
        public = self.private_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return {"p256dh": b64url(public), "auth": b64url(self.auth)}


def browser() -> Browser:
    return Browser(ec.generate_private_key(ec.SECP256R1()), os.urandom(16))


@pytest.fixture
def quiet_feed(services, redis_client):
    """The owner's feed and consumer group start empty (Redis outlives the test database)."""
    redis_client.delete(naming.owner_events(owner_id_of(services)), naming.webhook_retries())


@pytest.fixture
def context(services, settings, quiet_feed):
    return notify.NotifyContext(
        services.sessions, services.redis, Sealer(settings.keys_dir),
        push.load_or_create_vapid(settings.keys_dir), "mailto:owner@example.org",
        settings.push_services, Egress(settings.egress_allow),
    )  # fmt: skip


def wait_for_approval(client, auth) -> dict:
    response = client.post("/api/tools/run_skill_script", headers=auth, json=WIPE_CALL)
    assert response.json["status"] == "pending_approval", response.json
    return dict(response.json)


def test_a_waiting_approval_is_pushed_encrypted_and_the_browser_decrypts_it(
    client, auth, settings, context, wiper
):
    device = browser()
    with receiver() as service:
        endpoint = f"{service.url}/push/device-1"
        body = {"endpoint": endpoint, "keys": device.keys()}
        created = client.post("/api/push/subscriptions", headers=auth, json=body)
        assert created.status_code == 201, created.json
        call = wait_for_approval(client, auth)
        assert notify.pump(context) == 1
    [(path, headers, payload)] = service.got
    assert path == "/push/device-1"
    assert headers["content-encoding"] == "aes128gcm" and headers["ttl"] == "86400"
    decrypted = http_ece.decrypt(
        payload, private_key=device.private_key, auth_secret=device.auth, version="aes128gcm"
    )
    message = json.loads(decrypted)
    assert message["kind"] == "approval.waiting"
    assert message["approval_id"] == call["approval_id"] and message["call_id"] == call["call_id"]
    # It says who asked: the chat and the turn, in its fields and in the sentence shown.
    assert (message["chat_id"], message["turn_id"], message["job_id"]) == ("c1", "t1", None)
    assert message["asked_by"] == "chat 'c1', turn t1"
    assert (
        message["message"]
        == "run_skill_script waits for your approval, asked by chat 'c1', turn t1."
    )
    # Signed with the VAPID key the API hands to browsers, for this push service.
    public_key = client.get("/api/push/key", headers=auth).json["public_key"]
    vapid = dict(re.findall(r"([tk])=([^,\s]+)", headers["authorization"]))
    token, key = vapid["t"], vapid["k"]
    assert headers["authorization"].startswith("vapid ")
    assert key == public_key
    claims = json.loads(unb64url(token.split(".")[1]))
    assert claims["aud"] == service.url and claims["sub"] == "mailto:owner@example.org"
    vapid_file = settings.keys_dir / push.VAPID_FILE
    assert vapid_file.stat().st_mode & 0o777 == 0o600
    assert push.load_or_create_vapid(settings.keys_dir).public_key.public_numbers() == (
        context.vapid.public_key.public_numbers()
    )  # made once, then kept


def test_a_subscription_the_push_service_calls_gone_is_dropped(client, auth, context, wiper):
    with receiver({"/push/dead": [410]}) as service:
        for name in ("dead", "alive"):
            body = {"endpoint": f"{service.url}/push/{name}", "keys": browser().keys()}
            assert (
                client.post("/api/push/subscriptions", headers=auth, json=body).status_code == 201
            )
        wait_for_approval(client, auth)
        notify.pump(context)
        assert sorted(path for path, _h, _b in service.got) == ["/push/alive", "/push/dead"]
    listed = client.get("/api/push/subscriptions", headers=auth).json
    assert [row["endpoint"] for row in listed] == [f"{service.url}/push/alive"]


def test_push_endpoints_off_the_allow_list_and_past_twenty_are_refused(client, auth, agent_auth):
    keys = browser().keys()
    elsewhere = {"endpoint": "https://push.example.com/abc", "keys": keys}
    refused = client.post("/api/push/subscriptions", headers=auth, json=elsewhere)
    assert refused.status_code == 422 and refused.json["code"] == "endpoint_not_allowed"
    agent = client.post("/api/push/subscriptions", headers=agent_auth, json=elsewhere)
    assert agent.status_code == 403 and agent.json["code"] == "owner_only"
    for number in range(20):
        body = {"endpoint": f"http://127.0.0.1:9/push/{number}", "keys": keys}
        assert client.post("/api/push/subscriptions", headers=auth, json=body).status_code == 201
    again = {"endpoint": "http://127.0.0.1:9/push/0", "keys": keys}  # the same one: replaced
    assert client.post("/api/push/subscriptions", headers=auth, json=again).status_code == 200
    extra = {"endpoint": "http://127.0.0.1:9/push/20", "keys": keys}
    full = client.post("/api/push/subscriptions", headers=auth, json=extra)
    assert full.status_code == 409 and full.json["code"] == "too_many"
    assert len(client.get("/api/push/subscriptions", headers=auth).json) == 20
    gone = client.delete(
        "/api/push/subscriptions", headers=auth, json={"endpoint": again["endpoint"]}
    )
    assert gone.status_code == 204
    assert len(client.get("/api/push/subscriptions", headers=auth).json) == 19


def test_the_default_allow_list_names_the_browser_push_services():
    allowed, egress = DEFAULT_PUSH_SERVICES, Egress()
    assert push.endpoint_allowed("https://fcm.googleapis.com/fcm/send/abc", allowed, egress)
    assert push.endpoint_allowed("https://web.push.apple.com/QO", allowed, egress)
    assert push.endpoint_allowed(
        "https://updates.push.services.mozilla.com/wpush/v2/x", allowed, egress
    )
    assert not push.endpoint_allowed("http://fcm.googleapis.com/fcm/send/abc", allowed, egress)
    assert not push.endpoint_allowed("https://fcm.googleapis.com.evil.test/x", allowed, egress)
    assert not push.endpoint_allowed("https://127.0.0.1/x", allowed, egress)


def test_a_webhook_delivery_is_signed_and_a_failed_one_is_retried(client, auth, context, wiper):
    with receiver({"/hook": [500, 204]}) as hook_server:
        url = f"{hook_server.url}/hook"
        created = client.post(
            "/api/webhooks", headers=auth, json={"url": url, "events": ["approval.waiting"]}
        )
        assert created.status_code == 201, created.json
        secret = created.json["secret"]
        assert "secret" not in client.get("/api/webhooks", headers=auth).json[0]
        call = wait_for_approval(client, auth)
        notify.pump(context)  # the receiver answers 500: a retry is scheduled
        [retry] = context.redis.zrange(naming.webhook_retries(), 0, -1)
        assert json.loads(retry)["attempt"] == 2
        context.redis.zadd(naming.webhook_retries(), {retry: 0})  # its back-off has passed
        notify.pump(context)
        assert context.redis.zcard(naming.webhook_retries()) == 0
    assert len(hook_server.got) == 2
    for _path, headers, body in hook_server.got:
        signed = dict(part.split("=", 1) for part in headers["skillfleet-signature"].split(","))
        stamp, mac = signed["t"], signed["v1"]
        expected = hmac.new(secret.encode(), f"{stamp}.".encode() + body, hashlib.sha256)
        assert hmac.compare_digest(mac, expected.hexdigest())
        assert webhooks.signature(secret, int(stamp), body) == headers["skillfleet-signature"]
        event = json.loads(body)
        assert event["kind"] == "approval.waiting" == headers["skillfleet-event"]
        assert event["data"]["approval_id"] == call["approval_id"]
        assert (event["data"]["chat_id"], event["data"]["turn_id"]) == ("c1", "t1")
        assert event["data"]["asked_by"] == "chat 'c1', turn t1"
    assert (
        hook_server.got[0][1]["skillfleet-delivery"] == hook_server.got[1][1]["skillfleet-delivery"]
    )
    # A signature made with another secret does not verify.
    _path, headers, body = hook_server.got[0]
    stamp = headers["skillfleet-signature"].split(",")[0][2:]
    assert webhooks.signature("whsec_wrong", int(stamp), body) != headers["skillfleet-signature"]


def test_a_jobs_waiting_approval_names_the_job_and_its_run_in_the_webhook(
    client, auth, context, wiper
):
    job = {"name": "nightly wipe", "cron": "0 3 * * *", "steps": [{"tool": "list_skills"}],
           "skills": ["wiper"]}  # fmt: skip
    job_id = client.post("/api/jobs", headers=auth, json=job).json["id"]
    run_id = client.post(f"/api/jobs/{job_id}/run", headers=auth).json["job_run_id"]
    body = {"arguments": WIPE_CALL["arguments"], "job_run_id": run_id}
    with receiver() as hook_server:
        hook = {"url": f"{hook_server.url}/hook", "events": ["approval.waiting"]}
        assert client.post("/api/webhooks", headers=auth, json=hook).status_code == 201
        asked = client.post("/api/tools/run_skill_script", headers=auth, json=body).json
        assert asked["status"] == "pending_approval", asked
        notify.pump(context)
    [(_path, _headers, sent)] = hook_server.got
    data = json.loads(sent)["data"]
    assert data["approval_id"] == asked["approval_id"]
    assert (data["job_id"], data["job_name"], data["job_run_id"]) == (
        job_id,
        "nightly wipe",
        run_id,
    )
    assert data["chat_id"] is None
    assert data["asked_by"] == f"job 'nightly wipe', run {run_id[:8]}"
    assert data["message"].endswith(f"asked by job 'nightly wipe', run {run_id[:8]}.")


def deliveries(metrics: str) -> dict[tuple[str, str], float]:
    """skillfleet_deliveries_total in the text of the API's /metrics, by (channel, outcome)."""
    found = {}
    for line in metrics.splitlines():
        match = re.fullmatch(
            r'skillfleet_deliveries_total\{channel="(\w+)",outcome="(\w+)"\} (\S+)', line
        )
        if match:
            found[(match[1], match[2])] = float(match[3])
    return found


def test_deliveries_show_in_the_api_s_metrics_by_channel_and_outcome(client, auth, context, wiper):
    before = deliveries(client.get("/metrics").get_data(as_text=True))
    with receiver({"/hook": [500, 204], "/push/dead": [410]}) as server:
        hook = {"url": f"{server.url}/hook", "events": ["approval.waiting"]}
        assert client.post("/api/webhooks", headers=auth, json=hook).status_code == 201
        for name in ("alive", "dead"):
            body = {"endpoint": f"{server.url}/push/{name}", "keys": browser().keys()}
            assert (
                client.post("/api/push/subscriptions", headers=auth, json=body).status_code == 201
            )
        wait_for_approval(client, auth)
        notify.pump(context)  # two pushes (one gone), and a webhook answered 500
        [retry] = context.redis.zrange(naming.webhook_retries(), 0, -1)
        context.redis.zadd(naming.webhook_retries(), {retry: 0})
        notify.pump(context)  # the retry is delivered
    after = deliveries(client.get("/metrics").get_data(as_text=True))

    added = {key: after[key] - before.get(key, 0) for key in after}
    assert added == {
        ("push", "delivered"): 1,
        ("push", "failed"): 1,
        ("webhook", "delivered"): 1,
        ("webhook", "failed"): 1,
    }
    assert len(server.got) == 4


def test_a_receiver_trickling_its_answer_fails_the_delivery_at_its_deadline():
    with trickling("head", every=0.5) as slow:
        started = time.monotonic()
        delivered = webhooks.deliver(
            Egress(("127.0.0.1",)), f"{slow.url}/hook", "whsec_x", "e1", "run.failed", {},
            seconds=1.5,
        )  # fmt: skip
        took = time.monotonic() - started

    assert delivered is False and slow.requests == 1 and slow.sent >= 2
    assert 1.5 <= took < 4.5


def test_webhooks_refuse_unknown_events_and_bad_urls_and_are_owner_only(client, auth, agent_auth):
    bad_event = client.post(
        "/api/webhooks", headers=auth, json={"url": "http://127.0.0.1:9/h", "events": ["nope"]}
    )
    assert bad_event.status_code == 422 and "unknown: nope" in bad_event.json["message"]
    bad_url = client.post("/api/webhooks", headers=auth, json={"url": "ftp://x/h", "events": ["*"]})
    assert bad_url.status_code == 422 and bad_url.json["code"] == "notification_invalid"
    agent = client.post(
        "/api/webhooks", headers=agent_auth, json={"url": "http://127.0.0.1:9/h", "events": ["*"]}
    )
    assert agent.status_code == 403
    assert client.get("/api/webhooks", headers=auth).json == []


def test_a_draft_waiting_for_review_is_pushed(client, auth, context):
    from toolcalls import draft_arguments, tool

    device = browser()
    with receiver() as service:
        body = {"endpoint": f"{service.url}/push/d", "keys": device.keys()}
        assert client.post("/api/push/subscriptions", headers=auth, json=body).status_code == 201
        drafted = tool(client, auth, "draft_skill", draft_arguments("notes-helper"))
        assert drafted["status"] == "done", drafted
        notify.pump(context)
    [(_path, _headers, payload)] = service.got
    message = json.loads(
        http_ece.decrypt(
            payload, private_key=device.private_key, auth_secret=device.auth, version="aes128gcm"
        )
    )
    assert (
        message["kind"] == "review.waiting" and message["title"] == "A skill waits for your review"
    )
    assert message["skill_name"] == "notes-helper"
    assert message["skill_hash"] == drafted["result"]["hash"]


def running_run(services, node: str) -> str:
    """A run row in `running` on `node`, as a worker's claim leaves it; its id."""
    import uuid

    from store.db import transaction
    from store.models import Run
    from store.states import RunStatus

    run_id = str(uuid.uuid4())
    with transaction(services.sessions) as session:
        session.add(
            Run(
                id=run_id, owner_id=owner_id_of(services), skill_name="ticker", skill_hash="0" * 64,
                script="scripts/tick.py", arguments={}, execution="node", queue=f"node.{node}",
                node=node, status=RunStatus.RUNNING, worker=f"node@{node}:1:1", timeout_seconds=60,
            )
        )  # fmt: skip
    return run_id


def test_a_run_whose_worker_vanished_reaches_a_webhook_as_run_interrupted(
    client, auth, services, context
):

    from broker import runs

    run_id = running_run(services, "gone")
    with receiver() as hook_server:
        created = client.post(
            "/api/webhooks", headers=auth, json={"url": f"{hook_server.url}/h", "events": ["*"]}
        )
        assert created.status_code == 201
        assert runs.reap(services.sessions, services.redis) == [run_id]
        notify.pump(context)
    [(_path, headers, body)] = hook_server.got
    event = json.loads(body)
    assert event["kind"] == "run.interrupted" == headers["skillfleet-event"]
    assert event["data"]["run_id"] == run_id and event["data"]["node"] == "gone"
    assert (
        event["data"]["message"] == "The worker running this script stopped; it will not run again."
    )


@pytest.mark.parametrize(
    ("status", "title"),
    [("failed", "A script run failed"), ("timed_out", "A script run timed out")],
)
def test_a_run_that_ends_failed_or_timed_out_is_pushed_and_reaches_a_webhook(
    client, auth, services, context, status, title
):

    from broker import runs

    run_id = running_run(services, "web01")
    device = browser()
    with receiver() as service:
        subscription = {"endpoint": f"{service.url}/push/device", "keys": device.keys()}
        added = client.post("/api/push/subscriptions", headers=auth, json=subscription)
        assert added.status_code == 201, added.json
        hook = {"url": f"{service.url}/hook", "events": [f"run.{status}"]}
        assert client.post("/api/webhooks", headers=auth, json=hook).status_code == 201
        # What a worker does when its script ends (workers/execute.py): record, then announce.
        ended = runs.Outcome(status, 1 if status == "failed" else None, "", "boom")
        assert runs.finish(services.sessions, run_id, ended, "process", [])
        runs.announce(services.sessions, services.redis, run_id)
        notify.pump(context)
    got = {path: (headers, body) for path, headers, body in service.got}
    assert sorted(got) == ["/hook", "/push/device"]
    headers, body = got["/hook"]
    event = json.loads(body)
    assert event["kind"] == f"run.{status}" == headers["skillfleet-event"]
    assert event["data"]["run_id"] == run_id and event["data"]["status"] == status
    _headers, payload = got["/push/device"]
    message = json.loads(
        http_ece.decrypt(
            payload, private_key=device.private_key, auth_secret=device.auth, version="aes128gcm"
        )
    )
    assert message["kind"] == f"run.{status}" and message["run_id"] == run_id
    assert message["title"] == title


def test_beat_and_the_control_worker_push_a_waiting_approval_within_seconds(tmp_path, database_url):
    from fleet import fleet, wait_until

    settings = Settings(
        data_dir=tmp_path / "var", database_url=database_url, redis_url=REDIS_URL,
        push_services=("127.0.0.1",), egress_allow=("127.0.0.1",),
    )  # fmt: skip
    device = browser()
    with receiver() as service, fleet(settings) as running:
        running.redis.delete(naming.webhook_retries())
        running.env["SKILLFLEET_PUSH_SERVICES"] = "127.0.0.1"
        running.env["SKILLFLEET_EGRESS_ALLOW"] = "127.0.0.1"
        running.start("control", "worker", "control")
        running.start("beat", "beat")
        running.import_skill("wiper", WIPE, {"scripts/wipe.sh": "echo wiping\n"})
        running.node_env("web01")  # the owner's node the call names
        with running.http() as client:

            def pushed() -> float:
                return deliveries(client.get("/metrics").text).get(("push", "delivered"), 0)

            before = pushed()
            body = {"endpoint": f"{service.url}/push/fleet", "keys": device.keys()}
            assert client.post("/api/push/subscriptions", json=body).status_code == 201
            call = client.post("/api/tools/run_skill_script", json=WIPE_CALL).json()
            assert call["status"] == "pending_approval", call
            wait_until(lambda: service.got, 30, "beat's notify task to push the approval")
            # Counted by the control worker, another process: the API's /metrics shows it.
            wait_until(lambda: pushed() == before + 1, 30, "/metrics to count the push")
    [(_path, _headers, payload)] = service.got
    message = json.loads(
        http_ece.decrypt(
            payload, private_key=device.private_key, auth_secret=device.auth, version="aes128gcm"
        )
    )
    assert message["kind"] == "approval.waiting" and message["approval_id"] == call["approval_id"]


def test_events_from_before_the_first_subscription_are_not_pushed(client, auth, context, wiper):
    wait_for_approval(client, auth)
    with receiver() as service:
        body = {"endpoint": f"{service.url}/push/late", "keys": browser().keys()}
        assert client.post("/api/push/subscriptions", headers=auth, json=body).status_code == 201
        assert notify.pump(context) == 0
        wait_for_approval(client, auth)
        assert notify.pump(context) == 1
    assert len(service.got) == 1


def test_what_an_agent_wrote_is_pushed_with_control_and_format_characters_as_escapes(
    client, auth, context
):
    device = browser()
    turn = {"chat_id": "c-shown", "turn_id": "t-shown"}
    with receiver() as service:
        body = {"endpoint": f"{service.url}/push/d", "keys": device.keys()}
        assert client.post("/api/push/subscriptions", headers=auth, json=body).status_code == 201
        for tool, arguments in (
            ("ask_owner", {"question": "Run \u202eexe.sh\u202c?\x1b[2K"}),
            ("notify_owner", {"message": "Done\r\x1b[31mFAILED\u2066", "level": "urgent"}),
        ):
            sent = client.post(
                f"/api/tools/{tool}", headers=auth, json={"arguments": arguments, **turn}
            )
            assert sent.json["status"] in ("pending_question", "done"), sent.json
        assert notify.pump(context) == 2
    pushed = {
        message["kind"]: message
        for message in (
            json.loads(
                http_ece.decrypt(
                    payload, private_key=device.private_key, auth_secret=device.auth,
                    version="aes128gcm",
                )
            )
            for _path, _headers, payload in service.got
        )
    }  # fmt: skip
    assert pushed["question.waiting"]["message"] == (
        "An agent asks you: Run \\u202eexe.sh\\u202c?\\x1b[2K"
    )
    assert pushed["owner.notified"]["message"] == "Done\\x0d\\x1b[31mFAILED\\u2066"
    for message in pushed.values():
        assert not any(char in json.dumps(message, ensure_ascii=False) for char in "\x1b\r\u202e")

"""/metrics is open only when the API listens on loopback, or when the operator says so."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import uuid
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from conftest import REDIS_URL, TLS
from fleet import wait_until
from prometheus_client import CONTENT_TYPE_LATEST

from api import create_app
from relay.counters import RUN_DURATION, RUN_QUEUE_WAIT
from store.db import transaction
from store.models import utcnow
from store.settings import Settings
from store.tokens import create_node_token

SKILLFLEET = str(Path(sys.executable).parent / "skillfleet")
ROOT = Path(__file__).resolve().parents[2]

METRICS_TOKEN = "scrape-me-0123456789"


def metrics_client(services, **overrides):
    settings = services.settings.with_overrides(**overrides)
    return create_app(services=replace(services, settings=settings)).test_client()


@pytest.fixture
def exposed(services):
    """The API as `skillfleet api` serves it on every interface (SKILLFLEET_HOST=0.0.0.0)."""
    return metrics_client(services, host="0.0.0.0", metrics_token=METRICS_TOKEN)


def test_on_loopback_metrics_need_no_token(client):
    response = client.get("/metrics")

    assert response.status_code == 200
    assert "# TYPE" in response.get_data(as_text=True)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "api.example.org"])
def test_on_any_other_address_metrics_without_a_token_are_401(services, host):
    response = metrics_client(services, host=host).get("/metrics")

    assert response.status_code == 401
    assert response.json["code"] == "unauthorized"
    assert "# TYPE" not in response.get_data(as_text=True)


def test_exposed_metrics_answer_an_owner_token(exposed, auth):
    response = exposed.get("/metrics", headers=auth)

    assert response.status_code == 200
    assert "# TYPE" in response.get_data(as_text=True)


def test_exposed_metrics_answer_the_metrics_token(exposed):
    response = exposed.get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})

    assert response.status_code == 200


def test_exposed_metrics_refuse_a_wrong_token_an_agent_token_and_a_node_token(
    exposed, services, agent_auth
):
    with transaction(services.sessions) as session:
        node = {"Authorization": f"Bearer {create_node_token(session, 'web01')}"}

    wrong = exposed.get("/metrics", headers={"Authorization": "Bearer sf_wrong"})
    agent = exposed.get("/metrics", headers=agent_auth)
    node_answer = exposed.get("/metrics", headers=node)

    assert wrong.status_code == 401 and wrong.json["code"] == "unauthorized"
    assert agent.status_code == 403 and agent.json["code"] == "owner_only"
    assert node_answer.status_code == 403 and node_answer.json["code"] == "forbidden"


def test_metrics_public_opens_them_on_any_address(services):
    response = metrics_client(services, host="0.0.0.0", metrics_public=True).get("/metrics")

    assert response.status_code == 200


def test_the_metrics_settings_are_read_from_the_environment():
    env = {
        "SKILLFLEET_HOST": "0.0.0.0",
        "SKILLFLEET_METRICS_PUBLIC": "1",
        "SKILLFLEET_METRICS_TOKEN": METRICS_TOKEN,
    }

    settings = Settings.from_env(env)

    assert settings.metrics_public is True and settings.metrics_token == METRICS_TOKEN
    assert settings.metrics_open
    assert not Settings.from_env({"SKILLFLEET_HOST": "0.0.0.0"}).metrics_open
    assert Settings.from_env({}).metrics_open  # 127.0.0.1 by default
    assert Settings.from_env({"SKILLFLEET_HOST": "::1"}).metrics_open
    assert Settings.from_env({"SKILLFLEET_HOST": "localhost"}).metrics_open


# -- what the metrics say ------------------------------------------------------------------


def sample(text: str, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{key}="{value}"' in line for key, value in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_metrics_count_calls_by_tool_and_status_and_policy_decisions_by_rule(client, auth):
    before = client.get("/metrics").get_data(as_text=True)
    answer = client.post("/api/tools/list_skills", headers=auth, json={"arguments": {}})
    assert answer.status_code == 200 and answer.json["status"] == "done"

    response = client.get("/metrics")
    text = response.get_data(as_text=True)

    assert response.headers["Content-Type"] == CONTENT_TYPE_LATEST
    assert sample(text, "skillfleet_tool_calls_total", tool="list_skills", status="done") == 1
    decided = sample(text, "skillfleet_policy_decisions_total", action="allow")
    assert decided == sample(before, "skillfleet_policy_decisions_total", action="allow") + 1
    for name in (
        "skillfleet_approvals_waiting",
        "skillfleet_runs_total",
        "skillfleet_run_duration_seconds",
        "skillfleet_run_queue_wait_seconds",
        "skillfleet_queue_depth",
        "skillfleet_node_heartbeat_age_seconds",
        "skillfleet_sse_streams_open",
    ):
        assert f"# TYPE {name}" in text, name
    assert 'skillfleet_queue_depth{queue="spark"}' in text


def test_a_run_the_reaper_ends_shows_in_runs_by_state_and_in_the_duration_histogram(
    client, auth, services, live_redis
):
    from datetime import timedelta

    from broker.runs import reap
    from store.models import Run

    runner = f"r{uuid.uuid4().hex[:6]}"  # a runner label of this test's own
    now = utcnow()
    with transaction(services.sessions) as session:
        session.add(
            Run(
                id=str(uuid.uuid4()), skill_name="demo", skill_hash="0" * 64,
                script="scripts/a.py", arguments={}, execution=runner, queue="spark",
                status="running", timeout_seconds=300, created_at=now - timedelta(seconds=3),
                started_at=now - timedelta(seconds=2), worker="gone@nowhere:1:1",
            )
        )  # fmt: skip
    before = client.get("/metrics").get_data(as_text=True)

    reaped = reap(services.sessions, live_redis)
    text = client.get("/metrics").get_data(as_text=True)
    # It lasted from its start until the reaper ended it: 2 s and the time the test took since.
    longest = 2 + (utcnow() - now).total_seconds()

    assert len(reaped) == 1
    assert sample(before, "skillfleet_run_duration_seconds_count", runner=runner) == 0
    assert sample(text, "skillfleet_runs_total", runner=runner, state="interrupted") == 1
    assert sample(text, "skillfleet_run_duration_seconds_count", runner=runner) == 1
    lasted = sample(text, "skillfleet_run_duration_seconds_sum", runner=runner)
    assert 2 <= lasted <= longest
    for bound in ("1.0", "2.5", "5.0", "10.0"):  # in each bucket its duration reaches
        within = sample(text, "skillfleet_run_duration_seconds_bucket", runner=runner, le=bound)
        assert within == (1 if lasted <= float(bound) else 0), bound


def test_the_histograms_are_read_from_their_counters_not_from_the_runs(
    client, services, live_redis
):
    from store.models import Run

    runner = f"r{uuid.uuid4().hex[:6]}"
    with transaction(services.sessions) as session:  # a run that ended without its worker
        session.add(
            Run(
                id=str(uuid.uuid4()), skill_name="demo", skill_hash="0" * 64,
                script="scripts/a.py", arguments={}, execution=runner, queue="spark",
                status="succeeded", timeout_seconds=300, created_at=utcnow(),
                started_at=utcnow(), finished_at=utcnow(),
            )
        )  # fmt: skip
    RUN_QUEUE_WAIT.observe_to(live_redis, 0.07, runner)
    RUN_QUEUE_WAIT.observe_to(live_redis, 70, runner)

    text = client.get("/metrics").get_data(as_text=True)

    assert sample(text, "skillfleet_runs_total", runner=runner, state="succeeded") == 1
    assert sample(text, "skillfleet_run_duration_seconds_count", runner=runner) == 0
    assert sample(text, "skillfleet_run_queue_wait_seconds_bucket", runner=runner, le="0.05") == 0
    assert sample(text, "skillfleet_run_queue_wait_seconds_bucket", runner=runner, le="0.1") == 1
    assert sample(text, "skillfleet_run_queue_wait_seconds_bucket", runner=runner, le="60.0") == 1
    assert sample(text, "skillfleet_run_queue_wait_seconds_bucket", runner=runner, le="+Inf") == 2
    assert sample(text, "skillfleet_run_queue_wait_seconds_sum", runner=runner) == 70.07


def test_per_node_series_are_capped_and_the_fleet_wide_ones_count_every_node(
    client, services, live_redis
):
    from relay import heartbeat, naming
    from store.limits import METRICS_NODE_SERIES
    from store.models import Run

    count = METRICS_NODE_SERIES + 5
    tag = uuid.uuid4().hex[:6]
    beating = [
        heartbeat.Instance(role="node", queue=naming.node_queue(f"m{tag}-{n:02d}"),
                           name=f"m{tag}-{n:02d}")
        for n in range(count)
    ]  # fmt: skip
    for instance in beating:
        heartbeat.beat(live_redis, instance, alive_seconds=60)
    with transaction(services.sessions) as session:
        for n in range(count):  # node m..-00 has 1 run waiting, m..-01 has 2, ...
            for _ in range(n + 1):
                session.add(
                    Run(
                        id=str(uuid.uuid4()), skill_name="demo", skill_hash="0" * 64,
                        script="scripts/a.py", arguments={}, execution="node",
                        queue=naming.node_queue(f"m{tag}-{n:02d}"), status="queued",
                        timeout_seconds=300,
                    )
                )  # fmt: skip
    before_beats = None
    try:
        text = client.get("/metrics").get_data(as_text=True)
        before_beats = sample(text, "skillfleet_node_heartbeats", state="alive")
        heartbeat.stop(live_redis, beating[0])
        after = client.get("/metrics").get_data(as_text=True)
    finally:
        for instance in beating[1:]:
            heartbeat.stop(live_redis, instance)

    depths = [line for line in text.splitlines() if line.startswith("skillfleet_queue_depth{")]
    mine = [line for line in depths if f'queue="node.m{tag}-' in line]
    assert len(mine) <= METRICS_NODE_SERIES
    assert f'skillfleet_queue_depth{{queue="node.m{tag}-{count - 1:02d}"}} {float(count)}' in mine
    assert not any(f'"node.m{tag}-00"' in line for line in depths)  # the shallowest is left out
    assert sample(text, "skillfleet_node_runs_queued") >= count * (count + 1) / 2
    ages = [line for line in text.splitlines()
            if line.startswith("skillfleet_node_heartbeat_age_seconds{")]  # fmt: skip
    assert len(ages) <= METRICS_NODE_SERIES
    assert sample(after, "skillfleet_node_heartbeats", state="alive") == before_beats - 1


# -- gunicorn: every worker process answers with the same totals --------------------------


def clean_env(**values: str) -> dict[str, str]:
    """This shell's environment without anything that points at another database or server."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("SKILLFLEET_", "PROMETHEUS_"))
        and key not in ("DATABASE_URL", "REDIS_URL")
    }
    env.update(values)
    return env


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.mark.fleet
def test_every_gunicorn_worker_answers_with_the_same_totals(settings, tmp_path):
    port = free_port()
    token = "sf_metrics-owner-0123456789abcdef"
    env = clean_env(
        DATABASE_URL=settings.database,
        REDIS_URL=REDIS_URL,
        SKILLFLEET_DATA_DIR=str(tmp_path / "var"),
        SKILLFLEET_PORT=str(port),
        SKILLFLEET_BOOTSTRAP_TOKEN=token,
    )
    upgrade = subprocess.run([SKILLFLEET, "db", "upgrade"], env=env, capture_output=True)
    assert upgrade.returncode == 0, upgrade.stderr
    api = subprocess.Popen(
        [SKILLFLEET, "api", "--workers", "3"], env=env, stderr=subprocess.PIPE, text=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: answers(url + "/api/health"), 60, "the API to answer")
        with httpx.Client(
            verify=TLS, base_url=url, headers={"Authorization": f"Bearer {token}"}
        ) as http:
            # Policy decisions are kept in Redis, which outlives the test's database.
            before = sample(http.get("/metrics").text, "skillfleet_policy_decisions_total")
            calls = 12
            for _ in range(calls):
                # A new connection each time, so different worker processes answer.
                answer = httpx.post(
                    url + "/api/tools/list_skills",
                    headers={"Authorization": f"Bearer {token}", "Connection": "close"},
                    json={"arguments": {}},
                )
                assert answer.json()["status"] == "done"
            scrapes = [http.get("/metrics", headers={"Connection": "close"}).text for _ in range(9)]
    finally:
        api.terminate()
        api.wait(timeout=20)
    decided = {sample(text, "skillfleet_policy_decisions_total") for text in scrapes}
    called = {sample(text, "skillfleet_tool_calls_total", tool="list_skills") for text in scrapes}
    assert decided == {before + calls} and called == {calls}
    for stream in ("run", "turn", "feed"):  # a gauge no stream has touched yet still shows
        shown = f'skillfleet_sse_streams_open{{stream="{stream}"}} 0.0'
        assert all(shown in text.splitlines() for text in scrapes), stream


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_an_open_event_stream_counts_until_its_client_goes_away(client, auth, services, token):
    from sqlalchemy import select

    from relay.streams import RunStream
    from store.models import Owner, Run

    run_id = "00000000-0000-0000-0000-0000000sse01"
    with transaction(services.sessions) as session:
        owner = session.scalar(select(Owner).where(Owner.name == "alice"))
        session.add(
            Run(
                id=run_id, owner_id=owner.id, skill_name="demo", skill_hash="0" * 64,
                script="scripts/a.py", arguments={}, execution="node", queue="node.web01",
                status="running", timeout_seconds=300, started_at=utcnow(),
            )
        )  # fmt: skip
    RunStream(services.redis, run_id).status("running")
    before = sample(client.get("/metrics").get_data(as_text=True), "skillfleet_sse_streams_open")

    stream = client.get(f"/api/runs/{run_id}/events", headers=auth, buffered=False)
    first = next(stream.response)
    during = sample(client.get("/metrics").get_data(as_text=True), "skillfleet_sse_streams_open")
    stream.close()
    after = sample(client.get("/metrics").get_data(as_text=True), "skillfleet_sse_streams_open")

    assert b"event: status" in first
    assert (during - before, after - before) == (1, 0)


@pytest.mark.parametrize("stream", ["feed", "turn"])
def test_the_owner_feed_and_a_turn_s_events_count_as_open_streams_until_the_client_goes_away(
    client, auth, services, stream
):
    from factories import owner_id_of

    from relay import naming
    from relay.streams import TurnStream
    from store.models import Turn
    from store.states import TurnStatus

    turn_id = "00000000-0000-0000-0000-000000turn01"
    with transaction(services.sessions) as session:
        session.add(
            Turn(
                id=turn_id, owner_id=owner_id_of(services), prompt="hello",
                status=TurnStatus.RUNNING, started_at=utcnow(),
            )
        )  # fmt: skip
    services.redis.delete(naming.turn_stream(turn_id))
    TurnStream(services.redis, turn_id).add("text", {"text": "Hel"})
    path = {"feed": "/api/events", "turn": f"/api/turns/{turn_id}/events"}[stream]

    def open_streams() -> float:
        text = client.get("/metrics").get_data(as_text=True)
        return sample(text, "skillfleet_sse_streams_open", stream=stream)

    before = open_streams()
    response = client.get(path, headers=auth, buffered=False)
    first = next(response.response)
    during = open_streams()
    response.close()
    after = open_streams()

    assert first.startswith(b"retry:") if stream == "feed" else b"event: text" in first
    assert (during - before, after - before) == (1, 0)


# -- counted in another process -------------------------------------------------------------

# What the control worker does with a job run's message (workers/tasks.py `run_job`): the job
# context built as `skillfleet worker control` builds it, then the run's steps.
CONTROL_WORKER_STEP = """
import sys
from types import SimpleNamespace

from relay.heartbeat import Instance
from store.settings import Settings
from workers import jobruns
from workers.context import job_context

app = SimpleNamespace(
    skillfleet_settings=Settings.from_env(), skillfleet_instance=Instance("control", "control")
)
print(jobruns.execute(job_context(app), sys.argv[1]))
"""


def test_a_policy_decision_made_on_a_control_worker_shows_in_the_api_s_metrics(
    client, auth, settings
):
    job = {
        "name": "inventory", "cron": "0 3 * * *", "time_zone": "UTC",
        "steps": [{"tool": "list_skills"}], "grants": {"tools": [], "skills": []}, "skills": [],
    }  # fmt: skip
    created = client.post("/api/jobs", headers=auth, json=job)
    assert created.status_code == 201, created.json
    started = client.post(f"/api/jobs/{created.json['id']}/run", headers=auth)
    assert started.status_code == 202, started.json
    before = client.get("/metrics").get_data(as_text=True)

    env = clean_env(
        DATABASE_URL=settings.database,
        REDIS_URL=REDIS_URL,
        SKILLFLEET_DATA_DIR=str(settings.data_dir),
    )
    worker = subprocess.run(
        [sys.executable, "-c", CONTROL_WORKER_STEP, started.json["job_run_id"]],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    after = client.get("/metrics").get_data(as_text=True)

    assert worker.returncode == 0, worker.stderr
    assert worker.stdout.splitlines()[-1] == "succeeded"
    decided = sample(after, "skillfleet_policy_decisions_total", action="allow")
    assert decided == sample(before, "skillfleet_policy_decisions_total", action="allow") + 1
    assert sample(after, "skillfleet_tool_calls_total", tool="list_skills", status="done") == 1


# -- the Grafana dashboard -----------------------------------------------------------------


def test_the_grafana_dashboard_queries_metrics_and_labels_that_metrics_has(client, auth, services):
    from relay.counters import DELIVERIES
    from store.models import Run

    dashboard = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    # Samples for the metrics that carry labels the dashboard groups by.
    assert client.post("/api/tools/list_skills", headers=auth, json={"arguments": {}}).status_code
    DELIVERIES.add(services.redis, "webhook", "delivered")
    with transaction(services.sessions) as session:
        session.add(
            Run(
                id="00000000-0000-0000-0000-00000000run2", skill_name="demo", skill_hash="0" * 64,
                script="scripts/a.py", arguments={}, execution="spark", queue="spark",
                status="succeeded", timeout_seconds=300, started_at=utcnow(), finished_at=utcnow(),
            )
        )  # fmt: skip
    RUN_DURATION.observe_to(services.redis, 1.5, "spark")  # as its worker counts it
    RUN_QUEUE_WAIT.observe_to(services.redis, 0.2, "spark")
    stream = client.get("/api/events", headers=auth, buffered=False)
    next(stream.response)

    text = client.get("/metrics").get_data(as_text=True)
    stream.close()

    for query in queries:
        for name in re.findall(r"skillfleet_\w+", query):
            family = re.sub(r"_(bucket|count|sum)$", "", name)
            assert f"# TYPE {family} " in text, query
        for grouped, name in re.findall(r"by \(([\w, ]+)\) \(\w*\(?(skillfleet_\w+)", query):
            samples = [line for line in text.splitlines() if line.startswith(name + "{")]
            for label in grouped.split(", "):
                if label != "le":
                    assert samples and all(f'{label}="' in line for line in samples), query

"""Traces are off unless OpenTelemetry's standard variables ask for them, and off they cost
nothing: no tracer, exporter or instrumentation is imported, and no library is wrapped. (The
fleet's traces test,
tests/workers/test_traces_fleet.py, sees them on.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REDIS_URL

from store.settings import Settings, SettingsError

ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}


def test_without_otel_variables_there_are_no_traces():
    assert Settings.from_env({}).traces == ()


@pytest.mark.parametrize(
    "env",
    [
        ENDPOINT,
        {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"},
        {"OTEL_TRACES_EXPORTER": "otlp"},
        {**ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
    ],
)
def test_an_otlp_endpoint_or_exporter_turns_traces_on(env):
    assert Settings.from_env(env).traces == ("otlp",)


def test_the_exporters_named_are_the_ones_used():
    env = {"OTEL_TRACES_EXPORTER": "console, otlp"}
    assert Settings.from_env(env).traces == ("console", "otlp")


@pytest.mark.parametrize(
    "env",
    [
        {**ENDPOINT, "OTEL_SDK_DISABLED": "true"},
        {**ENDPOINT, "OTEL_TRACES_EXPORTER": "none"},
    ],
)
def test_the_sdk_disabled_or_the_exporter_none_turns_traces_off(env):
    assert Settings.from_env(env).traces == ()


def test_instrumentations_can_be_left_out_by_name():
    env = {**ENDPOINT, "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "SQLAlchemy, redis"}
    assert Settings.from_env(env).trace_skipped == ("sqlalchemy", "redis")


def test_the_sampler_and_its_ratio_are_read():
    env = {**ENDPOINT, "OTEL_TRACES_SAMPLER": "parentbased_traceidratio"}
    settings = Settings.from_env({**env, "OTEL_TRACES_SAMPLER_ARG": "0.25"})
    assert (settings.trace_sampler, settings.trace_sampler_ratio) == (
        "parentbased_traceidratio",
        0.25,
    )


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "may name otlp, console or none, not 'zipkin'"),
        ({**ENDPOINT, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTLP/HTTP (http/protobuf)"),
        ({**ENDPOINT, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, "not 'grpc'"),
        ({**ENDPOINT, "OTEL_TRACES_SAMPLER": "sometimes"}, "OTEL_TRACES_SAMPLER must be one of"),
        (
            {**ENDPOINT, "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"},
            "from 0 to 1",
        ),
        ({**ENDPOINT, "OTEL_SDK_DISABLED": "maybe"}, "OTEL_SDK_DISABLED must be true or false"),
    ],
)
def test_an_unusable_otel_variable_is_refused_at_start_up_saying_why(env, says):
    with pytest.raises(SettingsError, match=None) as refused:
        Settings.from_env(env)
    assert says in str(refused.value)


# Builds the API as `skillfleet api` does and answers one tool call; prints the OpenTelemetry
# modules the process then holds and whether redis-py's commands, or its client's, are wrapped.
# (Libraries import parts of OpenTelemetry's API and SDK for their own uses, idle unless
# configured: the MCP SDK its propagation, redis-py 8 the SDK's metrics.)
CALL_ONCE = """
import json, sys
import redis
from api import create_app
from store.db import transaction
from store.tokens import create_owner_token
app = create_app()
with transaction(app.extensions["skillfleet"].sessions) as session:
    token = create_owner_token(session, "tracing-off")
answer = app.test_client().post(
    "/api/tools/list_skills", json={"arguments": {}},
    headers={"Authorization": f"Bearer {token}"},
)
assert answer.status_code == 200 and answer.get_json()["status"] == "done", answer.data
loaded = [name for name in sys.modules if name.startswith("opentelemetry")]
client = app.extensions["skillfleet"].redis  # instrumented on its own when traces are on
wrapped = [hasattr(f, "__wrapped__") for f in (redis.Redis.execute_command, client.execute_command)]
print(json.dumps([loaded, any(wrapped)]))
"""


@pytest.mark.redis
def test_with_traces_off_a_call_imports_nothing_of_opentelemetry(
    tmp_path: Path, sqlite_template: Path
):
    database = tmp_path / "skillfleet.db"
    shutil.copy(sqlite_template, database)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SKILLFLEET_"))}
    env.update(
        DATABASE_URL=f"sqlite:///{database}",
        REDIS_URL=REDIS_URL,
        SKILLFLEET_DATA_DIR=str(tmp_path / "var"),
    )
    done = subprocess.run(
        [sys.executable, "-c", CALL_ONCE], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    loaded, wrapped = json.loads(done.stdout.strip().splitlines()[-1])
    ours = ("opentelemetry.sdk.trace", "opentelemetry.instrumentation", "opentelemetry.exporter")
    assert [name for name in loaded if name.startswith(ours)] == []
    assert not wrapped


@pytest.mark.parametrize("sampled", [True, False])
@pytest.mark.parametrize("remote", [True, False])
@pytest.mark.parametrize("kind_name", ["INTERNAL", "CLIENT", "CONSUMER"])
def test_a_span_under_a_parent_is_sampled_as_the_sdks_parent_based_sampler_says(
    sampled: bool, remote: bool, kind_name: str
):
    from opentelemetry import trace
    from opentelemetry.sdk.trace import sampling
    from opentelemetry.trace.span import TraceState

    from store.tracesampler import InTraces

    kind = trace.SpanKind[kind_name]
    flags = trace.TraceFlags(trace.TraceFlags.SAMPLED if sampled else trace.TraceFlags.DEFAULT)
    parent = trace.SpanContext(
        0x1234, 0x5678, is_remote=remote, trace_flags=flags, trace_state=TraceState([("k", "v")])
    )
    context = trace.set_span_in_context(trace.NonRecordingSpan(parent))
    # A root sampler that never samples: a child's decision can only come from its parent.
    sdk = sampling.ParentBased(sampling.ALWAYS_OFF)
    ours = InTraces(sdk, frozenset({"quiet"}), follows_parent=True)
    for name in ("SELECT skillfleet.db", "quiet"):
        expected = sdk.should_sample(context, 0x1234, name, kind, {"a": 1})
        got = ours.should_sample(context, 0x1234, name, kind, {"a": 1})
        assert got.decision == expected.decision
        assert got.trace_state == expected.trace_state
        assert dict(got.attributes) == dict(expected.attributes)


@pytest.mark.parametrize(
    ("name", "kind_name", "kept"),
    [
        ("HSET", "CLIENT", False),  # a Redis command or SQL statement outside a trace
        ("run/skillfleet.housekeep", "CONSUMER", False),  # a task on the clock
        ("run/skillfleet.execute_run", "CONSUMER", True),
        ("POST /api/tools/<tool>", "SERVER", True),
    ],
)
def test_a_root_span_is_kept_unless_it_is_a_client_call_or_a_quiet_task(
    name: str, kind_name: str, kept: bool
):
    from opentelemetry import trace
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import sampling

    from store.tracesampler import InTraces

    ours = InTraces(
        sampling.ParentBased(sampling.ALWAYS_ON), frozenset({"run/skillfleet.housekeep"}), True
    )
    got = ours.should_sample(Context(), 0x1234, name, trace.SpanKind[kind_name])
    assert got.decision.is_sampled() is kept


QUIET_WHEN_DROPPED = """
import json
from flask import Flask
from opentelemetry import trace
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from sqlalchemy import create_engine, event, text
from store import tracing
from store.settings import Settings

assert tracing.start(Settings.from_env(), "quiet-test")
engine = create_engine("sqlite://")
tracing.instrument_engine(engine)
seen = []
# Before the instrumentation's own listener: whether it would trace the statement.
event.listen(engine, "before_cursor_execute", lambda *a: seen.append(is_instrumentation_enabled()))
app = Flask("quiet")
tracing.instrument_app(app)

@app.get("/q")
def statement():
    with engine.connect() as connection:
        connection.execute(text("SELECT 1"))
    return "ok"

client = app.test_client()
for flags in ("00", "01", "00"):
    parent = f"00-{'ab' * 16}-{'cd' * 8}-{flags}"
    assert client.get("/q", headers={"traceparent": parent}).status_code == 200
for sampled in (False, True):
    flags = trace.TraceFlags(trace.TraceFlags.SAMPLED if sampled else trace.TraceFlags.DEFAULT)
    task = trace.NonRecordingSpan(trace.SpanContext(1, 2, is_remote=True, trace_flags=flags))
    with trace.use_span(task), tracing.quiet_if_unsampled():
        seen.append(is_instrumentation_enabled())
        seen.append(tracing.span("skillfleet.run") is tracing.OFF)
seen.append(is_instrumentation_enabled())
print("SEEN", json.dumps(seen), flush=True)  # the console exporter prints the spans later
"""


def test_within_a_dropped_trace_the_instrumentations_do_nothing_and_a_kept_one_is_traced(
    tmp_path: Path,
):
    # A request, or a run's task, in a trace the sampler dropped: every span under it would be
    # dropped too, so the instrumentations are told to make none (their work, not the
    # recording, was most of what traces cost a call).
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SKILLFLEET_"))}
    env.update(OTEL_TRACES_EXPORTER="console", SKILLFLEET_DATA_DIR=str(tmp_path / "var"))
    done = subprocess.run(
        [sys.executable, "-c", QUIET_WHEN_DROPPED],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("SEEN "))
    seen = json.loads(line.removeprefix("SEEN "))
    # The three requests' statements; the unsampled task (quiet, our span off); the sampled one.
    assert seen == [False, True, False, False, True, True, False, True]
    assert "Failed to detach context" not in done.stderr, done.stderr

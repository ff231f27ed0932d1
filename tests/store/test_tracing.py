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
# modules the process then holds and whether redis-py's commands are wrapped. (Libraries import
# parts of OpenTelemetry's API and SDK for their own uses, idle unless configured: the MCP SDK
# its propagation, redis-py 8 the SDK's metrics.)
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
print(json.dumps([loaded, hasattr(redis.Redis.execute_command, "__wrapped__")]))
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

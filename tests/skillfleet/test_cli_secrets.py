"""`skillfleet secrets list|set|delete|allow`, run as a user would run them: a value is read
without echo (or from a pipe) and never printed back."""

from __future__ import annotations

import os
import pty
import subprocess
import uuid
from collections.abc import Iterator

import pytest
from fleet import Fleet, fleet
from test_up import SKILLFLEET, clean_env

from store.settings import Settings

CLI_LIMIT = 60.0
VALUE = f"cli-{uuid.uuid4().hex}"


@pytest.fixture
def api(settings: Settings) -> Iterator[Fleet]:
    with fleet(settings) as running:
        yield running


def secrets(api: Fleet, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = clean_env(SKILLFLEET_URL=api.url, SKILLFLEET_TOKEN=api.owner_token)
    return subprocess.run(
        [SKILLFLEET, "secrets", *args],
        env=env, input=stdin, capture_output=True, text=True, timeout=CLI_LIMIT,
    )  # fmt: skip


def test_set_from_a_pipe_then_list_shows_the_name_and_delete_removes_it(api: Fleet):
    made = secrets(api, "set", "API_TOKEN", stdin=VALUE + "\n")
    assert made.returncode == 0, made.stderr
    assert made.stdout == "API_TOKEN is set.\n"

    listed = secrets(api, "list")
    assert listed.returncode == 0, listed.stderr
    assert "API_TOKEN" in listed.stdout and VALUE not in listed.stdout + listed.stderr

    assert secrets(api, "delete", "API_TOKEN").returncode == 0
    with api.http() as client:
        assert client.get("/api/secrets").json()["secrets"] == []


def test_a_bad_name_exits_1_naming_the_rule_and_stores_nothing(api: Fleet):
    bad = secrets(api, "set", "api_token", stdin=VALUE)
    assert bad.returncode == 1 and "invalid_secret_name" in bad.stderr
    assert VALUE not in bad.stderr
    with api.http() as client:
        assert client.get("/api/secrets").json()["secrets"] == []


def test_set_at_a_terminal_prompts_without_echoing_the_value(api: Fleet):
    env = clean_env(SKILLFLEET_URL=api.url, SKILLFLEET_TOKEN=api.owner_token)
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [SKILLFLEET, "secrets", "set", "TYPED"],
        env=env, stdin=follower, stdout=follower, stderr=follower, start_new_session=True,
    )  # fmt: skip
    os.close(follower)
    shown = bytearray()
    while b"not shown" not in shown:
        shown.extend(os.read(leader, 1024))
    os.write(leader, VALUE.encode() + b"\n")
    assert process.wait(CLI_LIMIT) == 0
    while True:
        try:
            chunk = os.read(leader, 1024)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        shown.extend(chunk)
    os.close(leader)
    assert VALUE.encode() not in shown
    assert b"TYPED is set." in shown

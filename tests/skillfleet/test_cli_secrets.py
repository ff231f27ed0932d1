"""`skillfleet secrets list|set|delete|allow`, run as a user would run them: a value is read
without echo (or from a pipe) and never printed back."""

from __future__ import annotations

import os
import pty
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleet import Fleet, fleet, sqlite_settings
from test_up import SKILLFLEET, clean_env

CLI_LIMIT = 60.0
VALUE = f"cli-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    """One API for the module; each test is an owner of its own."""
    with fleet(sqlite_settings(tmp_path_factory.mktemp("cli"), sqlite_template)) as running:
        yield running


@pytest.fixture
def owner(api: Fleet) -> Fleet:
    return api.with_new_owner()


def secrets(api: Fleet, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = clean_env(SKILLFLEET_URL=api.url, SKILLFLEET_TOKEN=api.owner_token)
    return subprocess.run(
        [SKILLFLEET, "secrets", *args],
        env=env, input=stdin, capture_output=True, text=True, timeout=CLI_LIMIT,
    )  # fmt: skip


def test_set_from_a_pipe_then_list_shows_the_name_and_delete_removes_it(owner: Fleet):
    made = secrets(owner, "set", "API_TOKEN", stdin=VALUE + "\n")
    assert made.returncode == 0, made.stderr
    assert made.stdout == "API_TOKEN is set.\n"

    listed = secrets(owner, "list")
    assert listed.returncode == 0, listed.stderr
    assert "API_TOKEN" in listed.stdout and VALUE not in listed.stdout + listed.stderr

    assert secrets(owner, "delete", "API_TOKEN").returncode == 0
    with owner.http() as client:
        assert client.get("/api/secrets").json()["secrets"] == []


def test_a_bad_name_exits_1_naming_the_rule_and_stores_nothing(owner: Fleet):
    bad = secrets(owner, "set", "api_token", stdin=VALUE)
    assert bad.returncode == 1 and "invalid_secret_name" in bad.stderr
    assert VALUE not in bad.stderr
    with owner.http() as client:
        assert client.get("/api/secrets").json()["secrets"] == []


def test_set_at_a_terminal_prompts_without_echoing_the_value(owner: Fleet):
    env = clean_env(SKILLFLEET_URL=owner.url, SKILLFLEET_TOKEN=owner.owner_token)
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

"""`skillfleet up` for real, its life after the banner: the first call, Ctrl-C and SIGTERM, a
restart on the same data dir, a worker that dies, the sandbox it can't start.

Apart from test_up.py so that two test processes share the suite's slowest starts.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from test_up import (
    AGENT_TOKEN_LINE,
    Running,
    bearer,
    children_of,
    import_read_skill,
    listening,
    run_hello,
    shared_start,
    starting,
    wait_for_done,
)

pytestmark = pytest.mark.fleet


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Running]]:
    with starting(tmp_path) as start_up:
        yield start_up


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """One `skillfleet up`, its banner read, for the tests below that use it, in this file's
    order: a call right after the banner, the sandbox's refusal, then a worker killed (last: it
    stops `up`)."""
    yield from shared_start(tmp_path_factory)


def test_ctrl_c_stops_everything_a_restart_keeps_the_tokens_and_sigterm_stops_it_too(
    start: Callable[..., Running],
) -> None:
    first = start()
    token = first.wait_for_token()
    agent = first.read_until(AGENT_TOKEN_LINE).group(1)
    before = first.leftovers()
    assert any("redis-server" in command for command in before.values()), before
    assert any("gunicorn" in command for command in before.values()), before

    # Ctrl-C: the API, the workers and the embedded Redis stop, and `up` exits 0.
    assert first.ctrl_c() == 0
    assert first.rest_of_output()[-2:] == ["Stopping skillfleet…", "Stopped."]
    assert first.leftovers() == {}
    assert not listening(first.port)
    assert not (first.data_dir / "redis.socket").exists()

    # A restart on the same data dir prints the same owner and agent tokens.
    again = start()
    assert again.wait_for_token() == token
    assert again.read_until(AGENT_TOKEN_LINE).group(1) == agent
    assert (
        httpx.get(f"{again.url}/api/skills", headers=bearer(token), timeout=10).status_code == 200
    )

    # SIGTERM to `skillfleet` alone (not its group) stops its children too.
    again.process.send_signal(signal.SIGTERM)
    assert again.wait() == 0
    assert "Stopped." in again.rest_of_output()
    assert again.leftovers() == {}
    assert not listening(again.port)


def test_a_call_made_right_after_the_banner_runs_on_the_local_node(up: Running) -> None:
    import_read_skill(up, "greeter")

    answer = run_hello(up, "greeter")

    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "done", answer.json()
    assert answer.json()["result"]["stdout"].startswith("hello")


def test_a_sandbox_that_cannot_serve_is_named_once_in_the_banner_and_in_the_refusal(
    up: Running,
) -> None:
    from workers.runners.sandbox import host_problem

    token = up.token
    banner = "\n".join(up.lines)
    assert banner.count("  sandbox:     off") == 1, banner
    import_read_skill(up, "boxed", execution="sandbox")

    body = {"arguments": {"skill_name": "boxed", "script": "scripts/hello.py", "arguments": {}}}
    answer = httpx.post(
        f"{up.url}/api/tools/run_skill_script", headers=bearer(token), json=body, timeout=30
    ).json()

    assert answer["error"]["code"] == "no_runner", answer
    message = answer["error"]["message"]
    assert "`skillfleet worker sandbox` on an x86_64 host with KVM" in message
    assert "SKILLFLEET_SANDBOX_ISOLATION=container" in message
    problem = host_problem()
    line = next(n for n, text in enumerate(up.lines) if text.startswith("  sandbox:     off: "))
    said = " ".join(" ".join(up.lines[line : line + 3]).split())
    if problem is None:  # the worker started and could not start a micro-VM: its reason
        assert message.startswith("The sandbox worker on "), message
        reason = message.split("so sandbox skills can't run: ", 1)[1][:40]
        assert f"sandbox: off: {reason}" in said, banner
        assert "(the sandbox log has the details)." in said, banner
    else:  # this host can't run Hyperlight at all, so no worker was started
        assert f"sandbox: off: {problem.rstrip('.')[:40]}" in said, banner
        assert message.startswith("No sandbox worker is running"), message
    # One sentence: why, and what to do; the exception chain stays in the log.
    assert "so sandbox skills can't run here; run `skillfleet worker sandbox`" in said, banner
    assert "SKILLFLEET_SANDBOX_ISOLATION=container to run them in containers" in said, banner
    assert "Error:" not in said, banner


def test_a_worker_that_exits_is_restarted_with_a_note_and_serves_again(up: Running) -> None:
    import_read_skill(up, "restarted")
    (node,) = children_of(up.process.pid, "worker node --name local")

    os.kill(node, signal.SIGKILL)

    up.read_until(re.compile(r"worker local stopped \(exit code -9\); restarting in 1 s"))
    up.read_until(re.compile(r"worker local restarted"))
    answer = wait_for_done(lambda: run_hello(up, "restarted"))
    assert answer.json()["result"]["stdout"].startswith("hello")
    assert up.ctrl_c() == 0
    assert up.leftovers() == {}

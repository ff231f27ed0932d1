"""`skillfleet run`: output arrives in the terminal as it is printed; the exit code follows."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleet import Fleet, fleet, sqlite_settings, wait_until

pytestmark = pytest.mark.fleet

SKILLFLEET = str(Path(sys.executable).with_name("skillfleet"))
READ_NODE = {"skillfleet.tier": "read", "skillfleet.execution": "node"}
TICK = (
    "import json, os, sys, time\n"
    "args = json.loads(os.environ['SKILLFLEET_ARGS'])\n"
    "for i in range(args['count']):\n"
    "    print(f'tick {i}', flush=True)\n"
    "    time.sleep(0.4)\n"
    "print('warning', file=sys.stderr)\n"
    "sys.exit(args.get('code', 0))\n"
)
NODE = f"t-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    """One fleet and node worker for the module; each test is an owner of its own."""
    with fleet(sqlite_settings(tmp_path_factory.mktemp("cli-run"), sqlite_template)) as started:
        started.start_node(NODE)
        yield started


@pytest.fixture
def running(shared: Fleet) -> tuple[Fleet, str]:
    started = shared.with_new_owner()
    started.import_skill("ticker", READ_NODE, {"scripts/tick.py": TICK})
    return started, NODE


def cli_env(started: Fleet) -> dict[str, str]:
    return dict(started.env, SKILLFLEET_TOKEN=started.owner_token)


def test_run_streams_lines_as_they_come_and_exits_with_the_script_code(running):
    started, node = running
    process = subprocess.Popen(
        [SKILLFLEET, "run", "ticker", "scripts/tick.py", "--node", node,
         "--args", '{"count": 4, "code": 3}'],
        env=cli_env(started), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    first = process.stdout.readline()
    first_at = time.monotonic()
    rest, errors = process.communicate(timeout=60)
    ended_at = time.monotonic()
    assert first == "tick 0\n"
    assert first_at < ended_at - 0.8  # the first line was shown while three more were to come
    assert rest == "tick 1\ntick 2\ntick 3\n"
    assert "warning" in errors
    assert "failed, exit code 3]" in errors
    assert process.returncode == 3


def test_run_of_a_skill_that_does_not_exist_exits_1_with_a_clear_message(running):
    started, node = running
    result = subprocess.run(
        [SKILLFLEET, "run", "ticker", "scripts/nope.py", "--node", node],
        env=cli_env(started), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    assert "script_not_found" in result.stderr


def test_run_with_arguments_that_are_not_json_is_refused_before_calling(running):
    started, node = running
    result = subprocess.run(
        [SKILLFLEET, "run", "ticker", "scripts/tick.py", "--node", node, "--args", "{oops"],
        env=cli_env(started), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    assert "--args is not valid JSON" in result.stderr


def wait_for_line(process: subprocess.Popen[str], expected: str) -> None:
    assert process.stdout is not None
    assert process.stdout.readline() == expected


def as_at_a_terminal() -> None:
    """Ctrl-C as at a terminal: a suite started in the background (`make test &`) ignores
    SIGINT, and a child inherits that, so the CLI would never hear it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_status(started: Fleet, run_id: str) -> str:
    with started.http() as client:
        return str(client.get(f"/api/runs/{run_id}").json()["status"])


def test_ctrl_c_cancels_the_run_on_the_server_and_exits_130(running):
    started, node = running
    process = subprocess.Popen(
        [SKILLFLEET, "run", "ticker", "scripts/tick.py", "--node", node,
         "--args", '{"count": 200}'],
        env=cli_env(started), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=as_at_a_terminal,  # noqa: PLW1509 - one signal call before exec
    )  # fmt: skip
    wait_for_line(process, "tick 0\n")

    process.send_signal(signal.SIGINT)
    _out, errors = process.communicate(timeout=30)

    assert process.returncode == 130
    run_id = re.search(r"\[run (\S+) cancelled\]", errors).group(1)  # type: ignore[union-attr]
    wait_until(lambda: run_status(started, run_id) == "cancelled", 15, "the run to be cancelled")


def test_a_run_waiting_for_approval_names_the_command_then_streams_once_approved(running):
    started, node = running
    started.import_skill(
        "purge", {"skillfleet.tier": "destructive", "skillfleet.execution": "node"},
        {"scripts/purge.py": "print('purged 3 files', flush=True)\n"},
    )  # fmt: skip
    process = subprocess.Popen(
        [SKILLFLEET, "run", "purge", "scripts/purge.py", "--node", node],
        env=cli_env(started), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stderr is not None
    waiting = process.stderr.readline()
    approval_id = re.search(r"approval (\S+);", waiting).group(1)  # type: ignore[union-attr]
    command = process.stderr.readline().strip()
    assert command == f"skillfleet approvals approve {approval_id}"

    answered = subprocess.run(
        command.split(), env=cli_env(started), capture_output=True, text=True, timeout=30,
        executable=SKILLFLEET,
    )  # fmt: skip
    assert answered.returncode == 0, answered.stderr
    out, errors = process.communicate(timeout=60)

    assert out == "purged 3 files\n"
    assert "succeeded, exit code 0]" in errors
    assert process.returncode == 0


def test_runs_list_show_logs_and_cancel_work_on_a_live_run(running):
    started, node = running
    with started.http() as client:
        body = {"arguments": {"skill_name": "ticker", "script": "scripts/tick.py",
                              "arguments": {"count": 200}, "node": node}}  # fmt: skip
        run_id = client.post("/api/tools/run_skill_script", json=body).json()["run_id"]
        wait_until(
            lambda: "tick 1" in client.get(f"/api/runs/{run_id}").json()["stdout"],
            30,
            "the output so far in GET /api/runs/<id>",
        )
    env = cli_env(started)

    def cli(*arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [SKILLFLEET, "runs", *arguments], env=env, capture_output=True, text=True, timeout=60
        )

    listed = cli("list", "--status", "running")
    assert listed.returncode == 0 and run_id in listed.stdout
    assert run_id not in cli("list", "--status", "succeeded").stdout
    shown = cli("show", run_id)
    assert "status:       running" in shown.stdout and "tick 0\n" in shown.stdout
    follower = subprocess.Popen(
        [SKILLFLEET, "runs", "logs", "-f", run_id],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wait_for_line(follower, "tick 0\n")

    cancelled = cli("cancel", run_id)

    assert cancelled.returncode == 0, cancelled.stderr
    _out, errors = follower.communicate(timeout=30)
    assert "cancelled" in errors and follower.returncode == 130
    assert "cancelled" in cli("show", run_id).stdout
    again = cli("cancel", run_id)
    assert again.returncode == 1 and "already ended" in again.stderr


def test_ctrl_c_while_waiting_for_approval_withdraws_it_and_exits_130(running):
    started, node = running
    started.import_skill(
        "purge", {"skillfleet.tier": "destructive", "skillfleet.execution": "node"},
        {"scripts/purge.py": "print('purged 3 files', flush=True)\n"},
    )  # fmt: skip
    process = subprocess.Popen(
        [SKILLFLEET, "run", "purge", "scripts/purge.py", "--node", node],
        env=cli_env(started), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=as_at_a_terminal,  # noqa: PLW1509 - one signal call before exec
    )  # fmt: skip
    assert process.stderr is not None
    approval_id = re.search(r"approval (\S+);", process.stderr.readline()).group(1)  # type: ignore[union-attr]
    process.stderr.readline()  # the approve command

    process.send_signal(signal.SIGINT)
    _out, errors = process.communicate(timeout=30)

    assert process.returncode == 130
    assert f"[stopped waiting; approval {approval_id} withdrawn]" in errors
    with started.http() as client:
        approval = client.get(f"/api/approvals/{approval_id}").json()
        late = client.post(f"/api/approvals/{approval_id}", json={"decision": "approve"})
        runs = client.get("/api/runs").json()
    assert approval["status"] == "withdrawn"
    assert late.status_code == 409 and late.json()["code"] == "approval_withdrawn"
    assert runs == []

"""The README's walk-through, run as a new user runs it against a real `skillfleet up`: the
`export` line the banner printed pasted into a shell whose PATH lacks the virtualenv, then the
README's commands as printed, then examples/walkthrough.sh, which holds the same commands."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.fleet

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "walkthrough.sh"
BIN = Path(sys.executable).parent
EXPORT_LINE = re.compile(r"^\s*(export SKILLFLEET_URL=.*)\n", re.MULTILINE)
# The script's own lines, which the README does not show: its checks, its headings, its clean-up.
SCRIPT_ONLY = re.compile(r'^(#|set -|: "\$\{|cd "\$\(dirname|step\b|trap |$)')
CLEARED = (
    "DATABASE_URL",
    "REDIS_URL",
    "SKILLFLEET_AGENT_TOKEN",
    "SKILLFLEET_BOOTSTRAP_TOKEN",
    "SKILLFLEET_CONFIG",
    "SKILLFLEET_HOST",
    "SKILLFLEET_POLICY",
    "SKILLFLEET_TOKEN",
    "SKILLFLEET_URL",
    "VIRTUAL_ENV",
)
EXPECTED = (
    "Imported ticker (2 files, enabled).",
    '"code":"invalid_resource_path"',
    "used_percent",
    "tick 5 of 5\n[run ",
    "cancelled, exit code -9]",
    '"status":"pending_approval"',
    '"code":"owner_only"',  # the agent's token can't approve its own call
    ": approved\n",
    "purged 1 files older than 7 days",
    "\nnew.log\n",
    "rule: plan-mode-changes-nothing",
    ": denied\n",  # the walk-through declines the call it left waiting
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def readme_commands() -> list[str]:
    """The `$ ` lines of the README's walk-through section, in order."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## A first walk-through", 1)[1].split("\n## ", 1)[0]
    return [line[2:] for line in section.splitlines() if line.startswith("$ ")]


def script_commands() -> list[str]:
    return [line for line in SCRIPT.read_text().splitlines() if not SCRIPT_ONLY.match(line)]


def new_users_env() -> dict[str, str]:
    """This environment as a new user's shell has it: no skillfleet variables, and a PATH
    without the virtualenv `make up` installs into."""
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    folders = env.get("PATH", "").split(os.pathsep)
    env["PATH"] = os.pathsep.join(
        folder for folder in folders if folder and Path(folder).resolve() != BIN.resolve()
    )
    return env


def test_the_readme_walkthrough_shows_every_command_of_the_script_in_its_order() -> None:
    commands = readme_commands()
    assert len(commands) >= 25
    assert commands == script_commands()


@pytest.mark.timeout(600)
def test_the_readme_and_the_script_run_as_printed_after_pasting_the_banners_line(
    tmp_path: Path,
) -> None:
    port = free_port()
    env = new_users_env()
    lacking = subprocess.run(["bash", "-c", "command -v skillfleet"], env=env)
    assert lacking.returncode != 0, "a new user's shell finds no skillfleet command"
    up_env = dict(env, SKILLFLEET_DATA_DIR=str(tmp_path / "var"), SKILLFLEET_PORT=str(port))
    up_env["SKILLFLEET_FLOWER_PORT"] = str(free_port())
    banner = tmp_path / "up.log"
    with banner.open("w") as out:
        # As `make up` starts it: by its path in .venv/bin, which the user's PATH lacks.
        up = subprocess.Popen(
            [str(BIN / "skillfleet"), "up"], env=up_env, cwd=tmp_path, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        export = _wait_for_export_line(banner, up)
        pasted = "\n".join([export, *readme_commands()]) + "\n"
        by_hand = _bash(["bash", "-c", pasted], env)
        _assert_walked_through(by_hand)

        whole = _bash(["bash", "-c", f"{export}\nbash {SCRIPT}"], env)
        assert whole.returncode == 0, whole.stdout
        _assert_walked_through(whole)
    finally:
        os.killpg(up.pid, signal.SIGINT)
        up.wait(timeout=30)


def _bash(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, timeout=240,
    )  # fmt: skip


def _assert_walked_through(walk: subprocess.CompletedProcess[str]) -> None:
    output = walk.stdout
    for expected in EXPECTED:
        assert expected in output, f"{expected!r} missing from:\n{output}"
    # In a chat a destructive call asks again, even right after one was approved.
    assert output.count('"status":"pending_approval"') == 2, output
    assert "old.log" not in output, output
    # No card is left waiting: the last listing of approvals is its header alone.
    assert output.rstrip().endswith("ASKED BY  WARNING"), output
    assert "command not found" not in output, output
    assert "Traceback" not in output, output


def _wait_for_export_line(banner: Path, up: subprocess.Popen[bytes], limit: float = 120) -> str:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and up.poll() is None:
        found = EXPORT_LINE.search(banner.read_text())
        if found:
            return found.group(1)
        time.sleep(0.2)
    pytest.fail(f"`skillfleet up` printed no export line:\n{banner.read_text()}")

"""The README's walk-through is examples/walkthrough.sh, run here against a real `skillfleet up`."""

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
TOKEN_LINE = re.compile(r"owner token: (\S+)\n\s*agent token: (\S+)\n")
CLEARED = (
    "DATABASE_URL",
    "REDIS_URL",
    "SKILLFLEET_BOOTSTRAP_TOKEN",
    "SKILLFLEET_CONFIG",
    "SKILLFLEET_HOST",
    "SKILLFLEET_POLICY",
    "SKILLFLEET_TOKEN",
    "SKILLFLEET_URL",
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def readme_commands() -> list[str]:
    """The `$ ` lines of the README's walk-through section."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## A first walk-through", 1)[1].split("\n## ", 1)[0]
    return [line[2:] for line in section.splitlines() if line.startswith("$ ")]


def test_every_command_the_readme_walkthrough_shows_is_a_line_of_the_script() -> None:
    script_lines = {line.strip() for line in SCRIPT.read_text().splitlines()}
    commands = readme_commands()
    assert len(commands) >= 15
    assert [c for c in commands if c not in script_lines] == []


@pytest.mark.timeout(300)
def test_the_walkthrough_runs_as_written_against_skillfleet_up(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    env.update(SKILLFLEET_DATA_DIR=str(tmp_path / "var"), SKILLFLEET_PORT=str(port))
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    banner = tmp_path / "up.log"
    with banner.open("w") as out:
        up = subprocess.Popen(
            [str(BIN / "skillfleet"), "up"], env=env, cwd=tmp_path, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        owner, agent = _wait_for_tokens(banner, up)
        env.update(
            SKILLFLEET_URL=f"http://127.0.0.1:{port}",
            SKILLFLEET_TOKEN=owner,
            SKILLFLEET_AGENT_TOKEN=agent,
        )
        walk = subprocess.run(
            ["bash", str(SCRIPT)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, timeout=240,
        )  # fmt: skip
        output = walk.stdout
        assert walk.returncode == 0, output
        for expected in (
            "Imported ticker (2 files, enabled).",
            '"code":"invalid_resource_path"',
            "used_percent",
            "tick 5 of 5\n[run ",
            "cancelled, exit code -9]",
            '"status":"pending_approval"',
            '"code":"owner_only"',  # the agent's token can't approve its own call
            ": approved\n",
            "purged 1 files older than 7 days",
            "rule: plan-mode-changes-nothing",
        ):
            assert expected in output, f"{expected!r} missing from:\n{output}"
        # In a chat a destructive call asks again, even right after one was approved.
        assert output.count('"status":"pending_approval"') == 2, output
        assert "Traceback" not in output
    finally:
        os.killpg(up.pid, signal.SIGINT)
        up.wait(timeout=30)


def _wait_for_tokens(
    banner: Path, up: subprocess.Popen[bytes], limit: float = 90
) -> tuple[str, str]:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and up.poll() is None:
        found = TOKEN_LINE.search(banner.read_text())
        if found:
            return found.group(1), found.group(2)
        time.sleep(0.2)
    pytest.fail(f"`skillfleet up` printed no token:\n{banner.read_text()}")

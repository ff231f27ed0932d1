"""`skillfleet run`: output arrives in the terminal as it is printed; the exit code follows."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REDIS_URL
from fleet import Fleet, fleet

from skillfleet.settings import Settings

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


@pytest.fixture
def running(tmp_path: Path, database_url: str) -> Iterator[tuple[Fleet, str]]:
    settings = Settings(data_dir=tmp_path / "var", database_url=database_url, redis_url=REDIS_URL)
    with fleet(settings) as started:
        node = f"t-{uuid.uuid4().hex[:8]}"
        started.start_node(node)
        started.import_skill("ticker", READ_NODE, {"scripts/tick.py": TICK})
        yield started, node


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

"""Runs end to end: API → broker → Celery → node worker → subprocess → Redis stream → result."""

from __future__ import annotations

import io
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import structlog
from conftest import REDIS_URL
from fleet import NODE_ISOLATION, Fleet, fleet, sqlite_settings, wait_until

from broker.dispatcher import EXECUTE_TASK, NO_SANDBOX
from broker.runs import answer_of
from relay import naming
from relay.streams import read_events
from store.logs import configure_logging
from store.settings import Settings

pytestmark = pytest.mark.fleet

READ_NODE = {"skillfleet.tier": "read", "skillfleet.execution": "node"}
TICKER = (
    "import json, os, sys, time\n"
    "args = json.loads(os.environ['SKILLFLEET_ARGS'])\n"
    "for i in range(args.get('count', 3)):\n"
    "    print(f'line {i}', flush=True)\n"
    "    time.sleep(args.get('every', 0))\n"
    "print('done', file=sys.stderr)\n"
    "sys.exit(args.get('code', 0))\n"
)


NODE = f"t-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    """One fleet and node worker for the module; each test is an owner of its own."""
    folder = tmp_path_factory.mktemp("runs")
    with fleet(sqlite_settings(folder, sqlite_template, run_timeout=20)) as started:
        started.start_node(NODE)
        yield started


@pytest.fixture
def running(shared: Fleet) -> Fleet:
    return shared.with_new_owner()


@pytest.fixture
def node(running: Fleet) -> str:
    running.import_skill("ticker", READ_NODE, {"scripts/tick.py": TICKER})
    return NODE


def call_run(client: httpx.Client, node: str, wait: float = 0, **arguments: object) -> dict:
    body = {
        "arguments": {
            "skill_name": "ticker",
            "script": "scripts/tick.py",
            "arguments": {"node": node, **arguments},
        },
        "chat_id": "runs",
    }
    response = client.post("/api/tools/run_skill_script", params={"wait": wait}, json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def sse(
    client: httpx.Client, run_id: str, last_id: str | None = None
) -> list[tuple[str, str, dict]]:
    headers = {"Last-Event-ID": last_id} if last_id else {}
    events = []
    with client.stream("GET", f"/api/runs/{run_id}/events", headers=headers) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        event_id = kind = ""
        for line in response.iter_lines():
            if line.startswith("id: "):
                event_id = line[4:]
            elif line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                events.append((event_id, kind, json.loads(line[6:])))
                if kind == "exit":
                    break
    return events


def test_a_node_run_returns_exit_code_and_output_with_wait(running: Fleet, node: str):
    with running.http() as client:
        envelope = call_run(client, node, wait=30)
        assert envelope["status"] == "done", envelope
        result = envelope["result"]
        assert result["exit_code"] == 0
        assert result["stdout"] == "line 0\nline 1\nline 2\n"
        assert result["stderr"] == "done\n"
        run = client.get(f"/api/runs/{envelope['run_id']}").json()
        call = client.get(f"/api/calls/{envelope['call_id']}").json()
    # The answer was made by the API from the run's end entry, which carries the run's end as
    # the worker recorded it (not an answer), and it is what the database recorded.
    [(_id, end)] = running.redis.xrange(naming.run_end(envelope["run_id"]))
    assert b"answer" not in end
    ended = json.loads(end[b"run"])
    assert (ended["status"], ended["result"], ended["code"]) == ("succeeded", result, None)
    assert answer_of(ended) == {"status": "done", "result": result}
    assert (call["status"], call["result"], call["error_code"]) == ("done", result, None)
    assert run["status"] == "succeeded"
    assert run["node"] == node
    assert run["isolation"] == NODE_ISOLATION
    assert run["skill_hash"] and run["queue"] == f"node.{node}"
    assert run["worker"].startswith(f"{node}@")


def histogram_count(client: httpx.Client, name: str) -> float:
    """`name`'s observations of node runs, as /metrics gives them."""
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(f'{name}_count{{runner="node"}} '):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_node_run_is_counted_in_the_run_histograms_as_it_starts_and_ends(
    running: Fleet, node: str
):
    with running.http() as client:
        before = [histogram_count(client, f"skillfleet_run_{h}_seconds") for h in HISTOGRAMS]
        envelope = call_run(client, node, wait=30)
        assert envelope["status"] == "done", envelope
        after = [histogram_count(client, f"skillfleet_run_{h}_seconds") for h in HISTOGRAMS]

    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1]


HISTOGRAMS = ("duration", "queue_wait")


def test_log_lines_carry_the_ids_and_never_the_arguments(running: Fleet, node: str):
    # The API serves in this process: its lines go to a buffer of our own, at the level it runs.
    configure_logging("info", "json")
    api_lines = io.StringIO()
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(api_lines))
    marker = f"do-not-log-{uuid.uuid4().hex}"
    # A top-level node is moved inside the arguments, which the API logs during this very call
    # (the package may have been built, and logged, before the buffer was in place).
    body = {
        "arguments": {
            "skill_name": "ticker",
            "script": "scripts/tick.py",
            "node": node,
            # A failed run's end is logged at INFO (a succeeded one's only at DEBUG).
            "arguments": {"label": marker, "code": 3},
        },
        "chat_id": "runs",
    }
    try:
        with running.http() as client:
            response = client.post("/api/tools/run_skill_script", params={"wait": 30}, json=body)
            envelope = response.json()
            assert envelope["status"] == "failed", envelope
    finally:
        structlog.configure(logger_factory=structlog.PrintLoggerFactory())
    api_output = api_lines.getvalue()
    worker_log = wait_for_log(running, node, envelope["run_id"])  # the worker logged the run
    assert "skill arguments coerced" in api_output  # what the API logged is here
    assert marker not in api_output and marker not in worker_log


def test_only_runs_that_did_not_succeed_log_their_end(running: Fleet, node: str):
    with running.http() as client:
        succeeded = call_run(client, node, wait=30, count=1)
        failed = call_run(client, node, wait=30, code=2, count=1)
    assert (succeeded["status"], failed["status"]) == ("done", "failed")
    # The failed run ended after the succeeded one had: once its line is there, the other's
    # would be too.
    worker_log = wait_for_log(running, node, failed["run_id"])
    (line,) = [line for line in worker_log.splitlines() if failed["run_id"] in line]
    assert json.loads(line)["event"] == "run ended"
    assert succeeded["run_id"] not in worker_log


def wait_for_log(running: Fleet, label: str, text: str) -> str:
    """The process's log once it holds `text` (its line follows the run's exit event)."""
    return str(
        wait_until(
            lambda: text in (found := running.log_text(label)) and found, 10, f"{text} in the log"
        )
    )


WHERE_AM_I = (
    "import json, os\n"
    "cwd = os.getcwd()\n"
    "mounts = [line.split() for line in open('/proc/self/mountinfo')]\n"
    "under = [m for m in mounts if cwd.startswith(m[4].rstrip('/') + '/')]\n"
    "deepest = max(under, key=lambda m: len(m[4]))\n"
    "print(json.dumps({'cwd': cwd, 'fs': deepest[deepest.index('-') + 1]}))\n"
)


@pytest.mark.skipif(NODE_ISOLATION != "uid", reason="a worker's own tmpfs needs a root worker")
def test_a_root_workers_runs_are_made_on_a_tmpfs_of_its_own(running: Fleet):
    running.import_skill("where", READ_NODE, {"scripts/where.py": WHERE_AM_I})
    body = {"arguments": {"skill_name": "where", "script": "scripts/where.py",
                          "arguments": {"node": NODE}}, "chat_id": "runs"}  # fmt: skip
    with running.http() as client:
        envelope = client.post("/api/tools/run_skill_script", params={"wait": 30}, json=body)
    assert envelope.json()["status"] == "done", envelope.text
    seen = json.loads(envelope.json()["result"]["stdout"])
    assert seen["fs"] == "tmpfs", seen
    # The worker's mount: not this host's (the test's) view of the runs' folder.
    runs = str(Path(seen["cwd"]).parents[1])
    worker = running.processes[NODE].pid
    assert f" {runs} " in Path(f"/proc/{worker}/mountinfo").read_text()
    assert f" {runs} " not in Path("/proc/self/mountinfo").read_text()


def test_a_failing_script_fails_the_call_with_its_output(running: Fleet, node: str):
    with running.http() as client:
        envelope = call_run(client, node, wait=30, code=4, count=1)
    assert envelope["status"] == "failed"
    assert envelope["error"]["code"] == "script_failed"
    assert envelope["result"]["exit_code"] == 4
    assert envelope["result"]["stdout"] == "line 0\n"
    with running.http() as client:
        call = client.get(f"/api/calls/{envelope['call_id']}").json()
    assert (call["status"], call["result"]) == ("failed", envelope["result"])
    assert (call["error_code"], call["error_message"]) == (
        envelope["error"]["code"],
        envelope["error"]["message"],
    )


def test_events_replay_from_last_event_id_and_after_the_end(running: Fleet, node: str):
    with running.http() as client:
        envelope = call_run(client, node, wait=30, count=4)
        events = sse(client, envelope["run_id"])
        kinds = [kind for _id, kind, _data in events]
        assert kinds[-1] == "exit" and events[-1][2]["exit_code"] == 0
        stdout = [data["text"] for _id, kind, data in events if kind == "stdout"]
        assert "".join(stdout) == "line 0\nline 1\nline 2\nline 3\n"
        middle = events[len(events) // 2][0]
        replay = sse(client, envelope["run_id"], last_id=middle)
        assert [e[0] for e in replay] == [e[0] for e in events if e[0] > middle]


def test_lines_arrive_live_while_the_script_runs(running: Fleet, node: str):
    with running.http() as client:
        envelope = call_run(client, node, count=3, every=0.6)
        assert envelope["status"] == "running"
        arrivals = []
        with client.stream("GET", f"/api/runs/{envelope['run_id']}/events") as response:
            for line in response.iter_lines():
                if line == "event: stdout":
                    arrivals.append(time.monotonic())
                if line == "event: exit":
                    ended = time.monotonic()
                    break
    assert len(arrivals) >= 3
    assert arrivals[0] < ended - 0.6  # the first line came while the script had lines to go


def test_cancelling_a_run_half_way_kills_it(running: Fleet, node: str):
    with running.http() as client:
        envelope = call_run(client, node, count=50, every=0.2)
        run_id = envelope["run_id"]
        wait_until(
            lambda: any(e.kind == "stdout" for e in read_events(running.redis, run_id)),
            20,
            "the first line of output",
        )
        response = client.post(f"/api/runs/{run_id}/cancel")
        assert response.status_code == 202
        run = wait_until(
            lambda: (r := client.get(f"/api/runs/{run_id}").json())["status"] == "cancelled" and r,
            15,
            "the run to be cancelled",
        )
        assert "line 0" in run["stdout"] and "line 49" not in run["stdout"]
        again = client.post(f"/api/runs/{run_id}/cancel")
        assert again.status_code == 409 and again.json()["code"] == "run_finished"


def test_a_run_past_its_timeout_is_timed_out_and_counted(tmp_path: Path, database_url: str):
    settings = Settings(
        data_dir=tmp_path / "var", database_url=database_url, redis_url=REDIS_URL, run_timeout=2
    )
    with fleet(settings) as short:
        name = f"t-{uuid.uuid4().hex[:8]}"
        short.start_node(name)
        short.import_skill("ticker", READ_NODE, {"scripts/tick.py": TICKER})
        with short.http() as client:
            envelope = call_run(client, name, wait=30, count=100, every=0.1)
            assert envelope["status"] == "failed"
            assert envelope["error"]["code"] == "timed_out"
            run = client.get(f"/api/runs/{envelope['run_id']}").json()
            assert run["status"] == "timed_out"
            assert client.get("/api/chats/runs").json()["timed_out_calls"] == 1


def test_dispatch_to_a_node_without_a_live_worker_fails_at_once(running: Fleet):
    running.import_skill("ticker", READ_NODE, {"scripts/tick.py": TICKER})
    running.node_env("nowhere")  # registered for the owner, no worker started
    with running.http() as client:
        started = time.monotonic()
        envelope = call_run(client, "nowhere")
        unknown = call_run(client, "never-registered")
    assert time.monotonic() - started < 5
    assert envelope["status"] == "failed"
    assert envelope["error"]["code"] == "no_runner"
    assert "nowhere" in envelope["error"]["message"]
    assert (unknown["status"], unknown["error"]["code"]) == ("failed", "node_not_found")


def test_dispatch_to_sandbox_without_a_sandbox_worker_names_the_cause_and_the_fixes(
    running: Fleet,
):
    running.import_skill(
        "boxed", {"skillfleet.tier": "read", "skillfleet.execution": "sandbox"},
        {"scripts/b.py": "print('hi')\n"},
    )  # fmt: skip
    body = {"arguments": {"skill_name": "boxed", "script": "scripts/b.py", "arguments": {}}}
    with running.http() as client:
        envelope = client.post("/api/tools/run_skill_script", json=body).json()
    assert envelope["status"] == "failed"
    assert envelope["error"] == {"code": "no_runner", "message": NO_SANDBOX}
    assert "skillfleet worker sandbox" in NO_SANDBOX
    assert "SKILLFLEET_SANDBOX_ISOLATION=container" in NO_SANDBOX


@pytest.mark.both_databases
def test_a_redelivered_message_never_runs_the_script_twice(
    tmp_path: Path, database_url: str, scratch: Path
):
    settings = Settings(data_dir=tmp_path / "var", database_url=database_url, redis_url=REDIS_URL)
    with fleet(settings) as running:
        node = f"t-{uuid.uuid4().hex[:8]}"
        running.start_node(node)
        runs_each_once(running, node, scratch / "runs.log")


def runs_each_once(running: Fleet, node: str, marker: Path) -> None:
    """Run a script that appends its run id to `marker`, send its message three more times:
    the worker refuses each, and the id is there once."""
    script = (
        f"import os\nopen({str(marker)!r}, 'a').write(os.environ['SKILLFLEET_RUN_ID'] + '\\n')\n"
    )
    running.import_skill("counter", READ_NODE, {"scripts/count.py": script})
    body = {
        "arguments": {
            "skill_name": "counter",
            "script": "scripts/count.py",
            "arguments": {"node": node},
        }
    }
    with running.http() as client:
        envelope = client.post("/api/tools/run_skill_script", params={"wait": 30}, json=body).json()
        assert envelope["status"] == "done"
        for _ in range(3):  # the same message, delivered again
            running.services.celery.send_task(
                EXECUTE_TASK, args=[envelope["run_id"]], queue=f"node.{node}"
            )
    wait_until(
        lambda: running.log_text(node).count("run already claimed or ended") >= 3,
        30,
        "the worker to refuse the three redeliveries",
    )
    assert marker.read_text().split() == [envelope["run_id"]]

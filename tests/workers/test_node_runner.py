"""The node runner: real processes, real Redis streams, timeouts, cancel, interpreters."""

from __future__ import annotations

import json
import shutil
import time
import uuid
from pathlib import Path

import pytest
from test_launcher import WAYS

from broker.runs import Outcome
from relay import naming
from relay.streams import RunStream, read_events
from store.commandline import CommandLineError
from store.limits import COALESCE_BYTES
from workers.runners.base import SCRIPT_PATH, Job, OutputCollector, command_for, script_argv
from workers.runners.isolation import default_runs_dir
from workers.runners.node import NodeRunner


def skill(tmp_path: Path, name: str, text: str) -> Path:
    folder = tmp_path / "skill"
    (folder / "scripts").mkdir(parents=True, exist_ok=True)
    (folder / "scripts" / name).write_text(text)
    return folder


def job(script: str, timeout: int = 30, argv: tuple[str, ...] = (), **arguments: object) -> Job:
    return Job(str(uuid.uuid4()), "demo", "0" * 64, script, dict(arguments), timeout, argv=argv)


def never() -> bool:
    return False


def run_to_end(runner: NodeRunner, the_job: Job, folder: Path, redis_client) -> Outcome:
    """Run, then end the stream with the exit event as the worker does (the last burst rides it)."""
    stream = RunStream(redis_client, the_job.run_id)
    outcome = runner.run(the_job, folder, stream, never)
    stream.exit(outcome.status, outcome.exit_code)
    return outcome


def test_a_python_script_gets_its_arguments_and_its_output_is_streamed(tmp_path, redis_client):
    folder = skill(
        tmp_path,
        "echo.py",
        "import json, os, sys\n"
        "print(json.loads(os.environ['SKILLFLEET_ARGS'])['word'])\n"
        "print(os.environ['LUCIA_SKILL_ARGS'] == os.environ['SKILLFLEET_ARGS'], file=sys.stderr)\n"
        "print(os.getcwd())\n",
    )
    the_job = job("scripts/echo.py", word="hello")
    outcome = run_to_end(NodeRunner(), the_job, folder, redis_client)
    assert outcome.status == "succeeded" and outcome.exit_code == 0
    assert outcome.stdout == f"hello\n{default_runs_dir() / the_job.run_id / 'work'}\n"
    assert outcome.stderr == "True\n"
    kinds = [e.kind for e in read_events(redis_client, the_job.run_id)]
    assert kinds[0] == "status" and "stdout" in kinds and "stderr" in kinds


def test_a_failing_script_fails_with_its_exit_code(tmp_path, redis_client):
    folder = skill(tmp_path, "fail.sh", "echo oops >&2\nexit 3\n")
    the_job = job("scripts/fail.sh")
    outcome = NodeRunner().run(the_job, folder, RunStream(redis_client, the_job.run_id), never)
    assert (outcome.status, outcome.exit_code, outcome.stderr) == ("failed", 3, "oops\n")


def test_a_script_past_its_timeout_is_killed_with_its_children(tmp_path, redis_client):
    marker = tmp_path / "child-alive"
    folder = skill(tmp_path, "slow.sh", f"(sleep 3; touch {marker}) &\necho started\nsleep 30\n")
    the_job = job("scripts/slow.sh", timeout=1)
    started = time.monotonic()
    outcome = NodeRunner().run(the_job, folder, RunStream(redis_client, the_job.run_id), never)
    assert outcome.status == "timed_out"
    assert time.monotonic() - started < 10
    assert outcome.stdout == "started\n"
    time.sleep(3.5)  # the background child would have touched the marker by now
    assert not marker.exists()


def test_cancel_stops_the_process_group(tmp_path, redis_client):
    folder = skill(
        tmp_path,
        "loop.py",
        "import time\nwhile True:\n    print('tick', flush=True)\n    time.sleep(0.1)\n",
    )
    the_job = job("scripts/loop.py")
    redis_client.set(naming.run_cancel(the_job.run_id), "1", ex=60)
    outcome = NodeRunner().run(
        the_job, folder, RunStream(redis_client, the_job.run_id),
        lambda: bool(redis_client.exists(naming.run_cancel(the_job.run_id))),
    )  # fmt: skip
    assert outcome.status == "cancelled"


def test_output_lines_arrive_while_the_script_runs(tmp_path, redis_client):
    folder = skill(
        tmp_path,
        "ticks.py",
        "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.5)\n",
    )
    the_job = job("scripts/ticks.py")
    stream = RunStream(redis_client, the_job.run_id)
    import threading

    seen: list[float] = []

    def watch() -> None:
        after = "0-0"
        while len(seen) < 3:
            for event in read_events(redis_client, the_job.run_id, after, block_ms=5000):
                after = event.id
                if event.kind == "stdout":
                    seen.append(time.monotonic())

    watcher = threading.Thread(target=watch)
    watcher.start()
    NodeRunner().run(the_job, folder, stream, never)
    ended = time.monotonic()
    watcher.join(timeout=10)
    assert len(seen) == 3
    assert seen[0] < ended - 0.5  # the first line came while the script still had a second to go


def test_interpreters_are_chosen_by_extension():
    assert command_for("scripts/a.py") == ["python3", "scripts/a.py"]
    assert command_for("scripts/a.sh") == ["bash", "scripts/a.sh"]
    assert command_for("scripts/a.js") == ["node", "scripts/a.js"]
    assert command_for("scripts/a.mjs") == ["node", "scripts/a.mjs"]
    assert command_for("scripts/a.cs") == [
        "dotnet",
        "run",
        "scripts/a.cs",
        "-p:PublishAot=false",
        "-p:NuGetAudit=false",
    ]


def test_a_missing_interpreter_fails_the_run_clearly(tmp_path, redis_client):
    folder = skill(tmp_path, "a.cs", "// no dotnet here\n")
    the_job = job("scripts/a.cs")
    outcome = NodeRunner().run(the_job, folder, RunStream(redis_client, the_job.run_id), never)
    if outcome.status == "failed" and outcome.exit_code is None:
        assert "could not start" in outcome.stderr
    else:  # a machine with dotnet runs it
        assert outcome.status in ("succeeded", "failed")


def test_a_scripts_home_is_its_runs_own_temporary_folder(tmp_path, redis_client):
    # HOME set, Python never asks the password database for it (site.py's user base).
    folder = skill(
        tmp_path,
        "home.py",
        "import os, site\n"
        "print(os.environ['HOME'] == os.environ['TMPDIR'] == os.path.abspath('../tmp'))\n"
        "print(site.getuserbase() == os.path.join(os.environ['HOME'], '.local'))\n",
    )
    outcome = run_to_end(NodeRunner(), job("scripts/home.py"), folder, redis_client)
    assert (outcome.status, outcome.stdout) == ("succeeded", "True\nTrue\n")


@pytest.mark.parametrize("launcher", WAYS)
def test_the_node_runner_runs_a_script_each_way(launcher, tmp_path, redis_client):
    folder = skill(
        tmp_path,
        "who.py",
        "import json, os, sys\nprint(sys.argv[0], json.loads(os.environ['SKILLFLEET_ARGS']))\n",
    )
    the_job = job("scripts/who.py", n=1)
    outcome = run_to_end(NodeRunner(launcher=launcher), the_job, folder, redis_client)
    assert (outcome.status, outcome.exit_code) == ("succeeded", 0)
    script = default_runs_dir() / the_job.run_id / "skill" / "scripts" / "who.py"
    assert outcome.stdout == f"{script} {{'n': 1}}\n"


def test_a_missing_interpreter_with_the_launcher_is_a_clear_start_failure(tmp_path, redis_client):
    folder = skill(tmp_path, "a.cs", "// no dotnet here\n")
    the_job = job("scripts/a.cs")
    runner = NodeRunner(launcher="/any/launcher")
    if shutil.which("dotnet", path=SCRIPT_PATH):
        pytest.skip("dotnet is installed here")
    outcome = runner.run(the_job, folder, RunStream(redis_client, the_job.run_id), never)
    assert (outcome.status, outcome.exit_code) == ("failed", None)
    assert outcome.error == (
        "The script could not start: FileNotFoundError: "
        "[Errno 2] No such file or directory: 'dotnet'"
    )


def test_json_round_trip_of_unicode_arguments(tmp_path, redis_client):
    folder = skill(
        tmp_path, "u.py", "import json, os\nprint(json.loads(os.environ['SKILLFLEET_ARGS'])['t'])\n"
    )
    the_job = job("scripts/u.py", t="héllo ✓")
    outcome = NodeRunner().run(the_job, folder, RunStream(redis_client, the_job.run_id), never)
    assert outcome.stdout == "héllo ✓\n"
    assert json.loads(json.dumps(the_job.arguments)) == {"t": "héllo ✓"}


def test_each_burst_of_output_is_one_stream_entry_not_one_per_write(tmp_path, redis_client):
    # Each line is four writes a few milliseconds apart (as an unbuffered print("tick", i) makes
    # them, only slower): twelve writes in three bursts. A window wider than the default keeps a
    # loaded machine from splitting a burst; how the entries fall otherwise depends on the load.
    folder = skill(
        tmp_path,
        "tick.py",
        "import os, time\nfor i in range(3):\n"
        "    for part in ('tick', ' ', str(i), '\\n'):\n"
        "        os.write(1, part.encode())\n        time.sleep(0.005)\n"
        "    time.sleep(0.5)\n"
        "os.write(1, b'x' * 100_000)\n",
    )
    the_job = job("scripts/tick.py")
    runner = NodeRunner(coalesce_seconds=0.1)
    outcome = run_to_end(runner, the_job, folder, redis_client)
    assert outcome.status == "succeeded"
    texts = [
        e.data["text"] for e in read_events(redis_client, the_job.run_id) if e.kind == "stdout"
    ]
    assert "".join(texts) == "tick 0\ntick 1\ntick 2\n" + "x" * 100_000  # nothing lost
    # Three bursts of ticks and the 100 kB in a few entries, never one entry per write (12+).
    assert len(texts) <= 6, texts[:12]
    assert max(len(t) for t in texts) <= COALESCE_BYTES  # a long burst is cut at the limit


def test_a_burst_past_the_byte_limit_is_published_in_limit_sized_entries(redis_client):
    run_id = f"run-{uuid.uuid4()}"
    stream = RunStream(redis_client, run_id)
    collector = OutputCollector(stream, coalesce_seconds=3600)  # only the byte limit publishes
    for _ in range(7):
        collector.add("stdout", b"x" * (16 * 1024))
    assert [len(e.data["text"]) for e in read_events(redis_client, run_id)] == [COALESCE_BYTES]
    collector.flush()
    assert [len(e.data["text"]) for e in read_events(redis_client, run_id)] == [
        COALESCE_BYTES,
        7 * 16 * 1024 - COALESCE_BYTES,
    ]


def test_output_still_buffered_at_the_end_goes_out_with_the_exit_in_one_round_trip(redis_client):
    run_id = f"run-{uuid.uuid4()}"
    stream = RunStream(redis_client, run_id)
    collector = OutputCollector(stream, coalesce_seconds=60)
    collector.started(pid=1)
    collector.add("stdout", b"ok")  # a short run's only output, a partial line, inside its window
    collector.finish()  # the script exited
    assert read_events(redis_client, run_id) == []  # nothing sent on its own
    stream.exit("succeeded", 0)
    events = read_events(redis_client, run_id)
    assert [e.kind for e in events] == ["status", "stdout", "exit"]
    assert events[1].data["text"] == "ok" and events[2].data["status"] == "succeeded"


def test_a_whole_line_after_a_quiet_window_goes_out_at_once_with_the_status(redis_client):
    run_id = f"run-{uuid.uuid4()}"
    collector = OutputCollector(RunStream(redis_client, run_id), coalesce_seconds=60)
    collector.started(pid=1)
    collector.add("stdout", b"ready\n")  # the first line of the run: shown at once
    assert [(e.kind, e.data.get("text")) for e in read_events(redis_client, run_id)] == [
        ("status", None),
        ("stdout", "ready\n"),
    ]
    collector.add("stdout", b"more\n")  # within the window of the last entry: it waits
    collector.add("stderr", b"half a line")
    assert len(read_events(redis_client, run_id)) == 2
    collector.flush()
    assert [(e.kind, e.data["text"]) for e in read_events(redis_client, run_id)[2:]] == [
        ("stdout", "more\n"),
        ("stderr", "half a line"),
    ]


def test_a_line_written_in_parts_after_a_quiet_window_goes_out_once_it_is_whole(redis_client):
    run_id = f"run-{uuid.uuid4()}"
    collector = OutputCollector(RunStream(redis_client, run_id), coalesce_seconds=60)
    collector.started(pid=1)
    collector.add("stdout", b"1796358546.38")  # print() unbuffered: the text, then its newline
    collector.add("stderr", b"warn")  # a partial line on the other stream holds the burst
    collector.add("stdout", b"\n")
    assert read_events(redis_client, run_id) == []
    collector.add("stderr", b"ing\n")  # both whole now: shown at once, in one entry each
    assert [(e.kind, e.data.get("text")) for e in read_events(redis_client, run_id)] == [
        ("status", None),
        ("stdout", "1796358546.38\n"),
        ("stderr", "warning\n"),
    ]
    collector.add("stdout", b"next")  # within the window of the last entry: it waits, whole or not
    collector.add("stdout", b"\n")
    assert len(read_events(redis_client, run_id)) == 3
    assert collector.wait_left() is not None


def test_a_line_after_the_window_has_passed_goes_out_at_once_and_a_partial_one_waits(
    redis_client,
):
    run_id = f"run-{uuid.uuid4()}"
    collector = OutputCollector(RunStream(redis_client, run_id), coalesce_seconds=0.05)
    collector.add("stdout", b"one\n")
    time.sleep(0.06)  # the window since the last entry has passed: the next line is not held
    collector.add("stdout", b"two\n")
    time.sleep(0.06)
    collector.add("stdout", b"thr")  # a partial line waits for its window
    texts = [e.data["text"] for e in read_events(redis_client, run_id)]
    assert texts == ["one\n", "two\n"]
    assert collector.wait_left() is not None
    collector.flush()
    assert [e.data["text"] for e in read_events(redis_client, run_id)][2:] == ["thr"]


# -- argv: what a script reads from its command line ------------------------------------------

# Values a shell would expand, split or run; each must arrive as one argument, untouched.
HOSTILE = ("form one.pdf", "$(touch pwned)", "`id`; rm -rf x", "a|b>c", "*", "--", "-rf", "é\n✓")
PRINT_ARGV = "import json, sys\nprint(json.dumps(sys.argv))\n"


@pytest.mark.parametrize("launcher", WAYS)
def test_a_script_gets_its_argv_as_separate_arguments_never_through_a_shell(
    launcher, tmp_path, redis_client
):
    folder = skill(tmp_path, "argv.py", PRINT_ARGV)
    the_job = job("scripts/argv.py", argv=HOSTILE)
    outcome = run_to_end(NodeRunner(launcher=launcher), the_job, folder, redis_client)
    assert (outcome.status, outcome.exit_code) == ("succeeded", 0), outcome.stderr
    script = str(default_runs_dir() / the_job.run_id / "skill" / "scripts" / "argv.py")
    assert json.loads(outcome.stdout) == [script, *HOSTILE]
    assert not (folder / "pwned").exists()


def test_a_shell_script_gets_its_argv_as_positional_parameters(tmp_path, redis_client):
    folder = skill(tmp_path, "argv.sh", 'printf "%s|" "$#" "$@"\n')
    the_job = job("scripts/argv.sh", argv=("a b", "$HOME", "-x"))
    outcome = run_to_end(NodeRunner(), the_job, folder, redis_client)
    assert outcome.stdout == "3|a b|$HOME|-x|"


def test_without_argv_a_script_gets_only_its_path():
    assert command_for("scripts/a.py", ()) == ["python3", "scripts/a.py"]


def test_argv_follows_the_script_s_path_for_every_interpreter():
    argv = ("in.pdf", "-")
    assert command_for("scripts/a.py", argv) == ["python3", "scripts/a.py", "in.pdf", "-"]
    assert command_for("scripts/a.sh", argv) == ["bash", "scripts/a.sh", "in.pdf", "-"]
    assert command_for("scripts/a.mjs", argv) == ["node", "scripts/a.mjs", "in.pdf", "-"]
    # dotnet run reads options up to "--": the script's arguments come after it.
    assert command_for("scripts/a.cs", argv) == [
        "dotnet", "run", "scripts/a.cs", "-p:PublishAot=false", "-p:NuGetAudit=false",
        "--", "in.pdf", "-",
    ]  # fmt: skip


SKILL_WITH_ARGV = """---
name: forms
description: Checks PDF forms.
metadata:
  parameters_schema:
    scripts/check.py:
      type: object
      properties:
        pdf: {type: string}
        verbose: {type: boolean}
      argv: [{flag: --verbose, property: verbose}, pdf]
---
Run scripts/check.py.
"""


def test_the_command_line_is_built_from_the_declaration_in_the_skill_s_own_files(tmp_path):
    folder = skill(tmp_path, "check.py", PRINT_ARGV)
    (folder / "SKILL.md").write_text(SKILL_WITH_ARGV)
    name, skill_hash = "forms", uuid.uuid4().hex
    argv = script_argv(folder, name, skill_hash, "scripts/check.py", {"pdf": "a.pdf"})
    assert argv == ("a.pdf",)
    both = {"pdf": "b.pdf", "verbose": True}
    assert script_argv(folder, name, skill_hash, "scripts/check.py", both) == ("--verbose", "b.pdf")
    assert script_argv(folder, name, skill_hash, "scripts/other.py", {"pdf": "a.pdf"}) == ()
    with pytest.raises(CommandLineError, match="so the script would take it for an option"):
        script_argv(folder, name, skill_hash, "scripts/check.py", {"pdf": "--help"})

"""skillfleet-launch and the node runner's other ways to start a script that dies with its
worker: real processes, a real SIGKILL of the process that started them."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fleet import killed_worker_leaves_no_child

from workers.runners.base import SCRIPT_PATH
from workers.runners.node import LAUNCHER, SETPRIV, NodeRunner, launch_command

BUILDABLE = platform.machine() == "x86_64" and sys.platform == "linux" and shutil.which("cc")
needs_launcher = pytest.mark.skipif(LAUNCHER is None, reason="skillfleet-launch is not built")
# Each way a script can be started: the launcher, setpriv, and a preexec_fn's prctl.
WAYS = [  # also used by the node runner's tests
    pytest.param(LAUNCHER, id="skillfleet-launch", marks=needs_launcher),
    pytest.param(None, id="setpriv or prctl"),
]
ENV = {"PATH": SCRIPT_PATH}

# A stand-in worker: it starts `sleep` the node runner's way, says the pid, and waits to be killed.
WORKER = """
import json, subprocess, sys, time
from workers.runners.node import launch_command
command, preexec = launch_command(["sleep", "60"], {"PATH": sys.argv[2]}, sys.argv[1] or None)
child = subprocess.Popen(command, start_new_session=True, preexec_fn=preexec)
print(json.dumps({"pid": child.pid, "command": command}), flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(not BUILDABLE, reason="skillfleet-launch is built on x86_64 Linux with cc")
def test_make_builds_the_launcher_and_the_node_runner_finds_it():
    assert LAUNCHER is not None, "make test builds skillfleet-launch; run through make"
    assert Path(LAUNCHER).parent == Path(sys.executable).parent
    assert NodeRunner().launcher == LAUNCHER


@pytest.mark.parametrize("launcher", WAYS)
def test_a_script_dies_with_the_process_that_started_it(launcher):
    started, worker_pid = killed_worker_leaves_no_child(
        WORKER,
        launcher or "",
        SCRIPT_PATH,
        what="the script to die with its worker",
        # The launcher (or setpriv) has exec'd sleep itself: the pid is the script's own.
        running=lambda pid: _command_of(pid) == ["sleep", "60"],
    )

    if launcher is not None:
        sleep = shutil.which("sleep", path=SCRIPT_PATH)
        assert started["command"] == [launcher, str(worker_pid), sleep, "sleep", "60"]


@needs_launcher
def test_the_launcher_passes_arguments_environment_and_exit_status_through(tmp_path):
    assert LAUNCHER is not None
    code = "import os, sys; print(sys.orig_argv); print(os.environ['WORD']); sys.exit(7)"
    command, preexec = launch_command(
        ["python3", "-c", code, "two words"], {**ENV, "WORD": "héllo"}, LAUNCHER
    )
    assert preexec is None  # nothing runs between the spawn and the exec: a vfork
    done = subprocess.run(
        command, env={**ENV, "WORD": "héllo"}, cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 7
    # argv[0] stays the name the script was started by, as without the launcher
    assert done.stdout == f"{['python3', '-c', code, 'two words']}\nhéllo\n"


@needs_launcher
def test_the_launcher_runs_nothing_when_its_worker_is_already_gone(tmp_path):
    assert LAUNCHER is not None
    marker = tmp_path / "ran"
    touch = shutil.which("touch")
    assert touch is not None
    # Its parent is this test, not the pid it was given: as if the worker died before the prctl.
    done = subprocess.run(
        [LAUNCHER, "1", touch, "touch", str(marker)], capture_output=True, env=ENV
    )
    assert done.returncode == 126 and not marker.exists()


@needs_launcher
@pytest.mark.parametrize(
    "arguments",
    [[], ["123"], ["123", "/bin/true"], ["", "/bin/true", "true"], ["12x", "/bin/true", "true"]],
)
def test_the_launcher_refuses_a_wrong_command_line(arguments):
    assert LAUNCHER is not None
    done = subprocess.run([LAUNCHER, *arguments], capture_output=True, env=ENV)
    assert done.returncode == 126


@needs_launcher
def test_the_launcher_says_which_program_it_could_not_execute(tmp_path):
    assert LAUNCHER is not None
    missing = str(tmp_path / "missing")
    done = subprocess.run(
        [LAUNCHER, str(os.getpid()), missing, "missing"], capture_output=True, text=True
    )
    assert done.returncode == 127
    assert done.stderr == f"skillfleet-launch: could not execute {missing}\n"


def test_a_program_missing_from_the_scripts_path_fails_before_anything_starts():
    with pytest.raises(FileNotFoundError, match="no-such-interpreter"):
        launch_command(["no-such-interpreter", "a.py"], ENV, "/any/launcher")


def test_without_the_launcher_setpriv_or_a_prctl_sets_the_signal():
    command, preexec = launch_command(["python3", "a.py"], ENV, None)
    if SETPRIV is not None:
        assert command == [SETPRIV, "--pdeathsig", "KILL", "--", "python3", "a.py"]
        assert preexec is None
    else:
        assert command == ["python3", "a.py"] and preexec is not None


def _command_of(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return [part.decode() for part in cmdline.read().split(b"\0") if part]
    except FileNotFoundError:
        return []

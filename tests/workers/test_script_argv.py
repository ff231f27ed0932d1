"""Every runner passes a script's argv the same way: after its path, each value one argument.

The node runner's real runs are in test_node_runner.py. Here: the command the Spark runner (and
the sandbox's container opt-in) gives the engine, which runs it in exec form, and the programs
a Hyperlight guest runs around a script, run by a real python3 and node with the guest's two
host tools written in a few lines.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from workers.runners.base import Job
from workers.runners.guests import guest_program
from workers.runners.sandbox import ContainerSandboxRunner
from workers.runners.spark import SparkRunner

ARGV = ("form one.pdf", "$(touch pwned)", "`id`", "--", "-rf", "é ✓")
IMAGE = "skillfleet/runner:latest"  # never pulled: building a command needs no engine


def job(script: str, argv: tuple[str, ...] = ARGV, execution: str = "spark") -> Job:
    return Job(
        str(uuid.uuid4()), "demo", "0" * 64, script, {"n": 1}, 30, execution=execution, argv=argv
    )


@pytest.mark.parametrize("runner", [SparkRunner(IMAGE), ContainerSandboxRunner(IMAGE)])
def test_a_container_s_command_is_the_interpreter_the_script_and_its_argv(runner):
    # A Python script runs as its module, with the skill's root on its import path.
    assert runner.command(job("scripts/check.py")) == [
        "python3", "-P", "-m", "scripts.check", *ARGV,
    ]  # fmt: skip
    assert runner.command(job("scripts/check.sh", ())) == ["bash", "/skill/scripts/check.sh"]


def test_a_container_gets_its_arguments_in_skillfleet_args_too():
    options = SparkRunner(IMAGE).container_options(job("scripts/check.py"), "volume")
    assert json.loads(options["environment"]["SKILLFLEET_ARGS"]) == {"n": 1}


# -- the micro-VM guests' programs ---------------------------------------------------------

SCRIPT = (
    "import json, os, sys\n"
    "print(json.dumps([sys.argv, json.loads(os.environ['SKILLFLEET_ARGS'])]))\n"
)
JS_SCRIPT = (
    "console.log(JSON.stringify([process.argv, JSON.parse(process.env.SKILLFLEET_ARGS)]));\n"
)

# The host tools a Hyperlight guest calls, as plain functions: output to stdout, the exit code
# as the process's.
PYTHON_HOST = """
import sys
def call_tool(name, **kw):
    if name == "emit":
        (sys.__stderr__ if kw["stream"] == "stderr" else sys.__stdout__).write(kw["text"])
    elif name == "exit":
        sys.__stdout__.flush()
        raise SystemExit(kw["code"])
http_get = http_post = None
"""
JAVASCRIPT_HOST = """
globalThis.call_tool = (name, args) => {
  const out = args.stream === "stderr" ? process.stderr : process.stdout;
  if (name === "emit") out.write(args.text);
  else if (name === "exit") process.exitCode = args.code;
};
globalThis.read_file = () => { throw new Error("no files here"); };
"""


def skill_copy(tmp_path: Path, name: str, text: str) -> Path:
    """The skill as a guest sees it under /input: here a folder of the test's own."""
    folder = tmp_path / "input"
    (folder / "scripts").mkdir(parents=True)
    (folder / "scripts" / name).write_text(text)
    return folder


def test_the_python_guest_gives_the_script_its_argv_and_its_arguments(tmp_path):
    folder = skill_copy(tmp_path, "check.py", SCRIPT)
    program = guest_program(job("scripts/check.py", execution="sandbox"), folder)
    program = program.replace('"/input', json.dumps(str(folder))[:-1])
    done = subprocess.run(
        [sys.executable, "-c", PYTHON_HOST + program], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [[f"{folder}/scripts/check.py", *ARGV], {"n": 1}]
    assert not (folder / "pwned").exists() and not Path("pwned").exists()


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_javascript_guest_gives_the_script_its_argv_and_its_arguments(tmp_path):
    folder = skill_copy(tmp_path, "check.mjs", JS_SCRIPT)
    program = guest_program(job("scripts/check.mjs", execution="sandbox"), folder)
    module = tmp_path / "guest.mjs"
    module.write_text(JAVASCRIPT_HOST + program)
    done = subprocess.run(["node", str(module)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [["node", "/input/scripts/check.mjs", *ARGV], {"n": 1}]


def test_a_guest_without_argv_gets_only_the_script_s_path(tmp_path):
    folder = skill_copy(tmp_path, "check.py", SCRIPT)
    program = guest_program(job("scripts/check.py", (), "sandbox"), folder)
    program = program.replace('"/input', json.dumps(str(folder))[:-1])
    done = subprocess.run(
        [sys.executable, "-c", PYTHON_HOST + program], capture_output=True, text=True, timeout=30
    )
    assert json.loads(done.stdout)[0] == [f"{folder}/scripts/check.py"]

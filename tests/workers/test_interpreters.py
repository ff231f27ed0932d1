"""How a Python script starts: by its path, or as its module where it needs its package; both
ways it sees the same import path, argv, file and name."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from relay.streams import RunStream
from workers.runners.base import Job
from workers.runners.interpreters import needs_package, script_command
from workers.runners.node import NodeRunner

SHOW = (
    "import json, sys\n"
    "print(json.dumps({'path': sys.path[:2], 'argv': sys.argv, 'file': __file__,"
    " 'name': __name__}))\n"
)


def skill(tmp_path: Path, files: dict[str, str]) -> Path:
    folder = tmp_path / "skill"
    for path, text in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text)
    return folder


def decided(tmp_path: Path, files: dict[str, str], script: str) -> bool:
    return needs_package(skill(tmp_path, files), uuid.uuid4().hex, script)


@pytest.mark.parametrize(
    "text",
    [
        "from .helpers import shout\n",
        "from . import helpers\n",
        "from \\\n    .helpers import shout\n",
        "print(__package__)\n",
        "import importlib\nimportlib.import_module('.helpers', __spec__.parent)\n",
    ],
    ids=["relative", "relative package", "across a continuation", "__package__", "__spec__"],
)
def test_a_script_that_reads_its_package_runs_as_its_module(tmp_path, text):
    assert decided(tmp_path, {"scripts/run.py": text, "scripts/helpers.py": ""}, "scripts/run.py")


def test_a_script_under_a_package_with_an_init_runs_as_its_module(tmp_path):
    files = {"scripts/__init__.py": "print('init')\n", "scripts/run.py": "print('ok')\n"}
    assert decided(tmp_path, files, "scripts/run.py")


def test_a_script_importing_its_neighbours_absolutely_runs_by_its_path(tmp_path):
    files = {
        "scripts/run.py": "import helpers\nfrom scripts.helpers import x\nprint(x)\n",
        "scripts/helpers.py": "x = 1\n",
    }
    assert not decided(tmp_path, files, "scripts/run.py")


def test_each_way_has_its_command_line():
    path = script_command("/skill", "scripts/run.py", ["a"], (3, 11), as_module=False)
    module = script_command("/skill", "scripts/run.py", ["a"], (3, 11), as_module=True)
    older = script_command("/skill", "scripts/run.py", ["a"], (3, 10), as_module=True)
    assert path == ["python3", "-P", "/skill/scripts/run.py", "a"]
    assert module == ["python3", "-P", "-m", "scripts.run", "a"]
    assert older == ["python3", "/skill/scripts/run.py", "a"]  # no -P before 3.11


def test_a_script_sees_the_same_import_path_argv_file_and_name_either_way(tmp_path, redis_client):
    folder = skill(tmp_path, {"scripts/show.py": SHOW})
    seen = []
    for as_module in (True, False):
        run_id = str(uuid.uuid4())
        job = Job(run_id, "demo", "0" * 64, "scripts/show.py", {}, 30, as_module=as_module)
        outcome = NodeRunner().run(job, folder, RunStream(redis_client, run_id), lambda: False)
        assert outcome.status == "succeeded", outcome.stderr
        seen.append(json.loads(outcome.stdout.replace(run_id, "<run>")))

    module, path = seen
    assert path == module
    assert module["path"][0].endswith("/<run>/skill/scripts")
    assert module["name"] == "__main__"


def test_a_relative_import_runs_where_it_is_needed(tmp_path, redis_client):
    files = {
        "scripts/relative.py": "from .helpers import shout\nprint(shout(__package__))\n",
        "scripts/helpers.py": "def shout(text):\n    return text.upper()\n",
    }
    folder = skill(tmp_path, files)
    run_id = str(uuid.uuid4())
    as_module = needs_package(folder, uuid.uuid4().hex, "scripts/relative.py")
    job = Job(run_id, "demo", "0" * 64, "scripts/relative.py", {}, 30, as_module=as_module)
    outcome = NodeRunner().run(job, folder, RunStream(redis_client, run_id), lambda: False)
    assert (outcome.status, outcome.stdout) == ("succeeded", "SCRIPTS\n"), outcome.stderr

"""A script's files on a real sandbox worker (Hyperlight micro-VMs): the call's files in the
guest's working directory, and what the run made there back by id.

Two ways: through the stand-in for hyperlight-sandbox (tests/hyperlight_standin.py) on any
x86_64 host with a usable /dev/kvm, the worker, its micro-VM children, pool, folders and guest
programs all real; and with SKILLFLEET_TEST_KVM=1, through real micro-VMs (a KVM host where
Hyperlight runs), where the guest's own file system is what the script sees.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import IN_CI
from fleet import Fleet, fleet, sqlite_settings, upload_file
from hyperlight_standin import write_stand_in

from relay import naming
from workers.runners.sandbox import host_problem

pytestmark = pytest.mark.fleet

WITH_KVM = os.environ.get("SKILLFLEET_TEST_KVM") == "1"
SANDBOX = {"skillfleet.tier": "read", "skillfleet.execution": "sandbox"}
# As public skills write them: input and output on the command line, relative to the cwd.
CONVERT = """
import os, sys
data = open(sys.argv[1], "rb").read()
if os.path.dirname(sys.argv[2]):
    os.makedirs(os.path.dirname(sys.argv[2]), exist_ok=True)
with open(sys.argv[2], "wb") as out:
    out.write(data[::-1])
print(os.path.basename(os.getcwd()), sorted(os.listdir(".")), len(data))
"""
# Changes one input, leaves another, makes a folder of files and a link.
MIXED = """
import os
open("changed.txt", "a").write("more\\n")
os.makedirs("out/deep", exist_ok=True)
open("out/deep/made.bin", "wb").write(bytes(range(256)))
os.symlink("/etc/passwd", "link")
"""
LOOK = "import os\nprint(sorted(os.listdir('.')))\n"
# JavaScript reads and writes text through the guest's read_file and write_file.
SHOUT = """
const text = read_file(process.argv[2]);
write_file(process.argv[3], text.toUpperCase());
console.log(process.cwd(), text.length);
"""


def sandbox_fleet(folder: Path, template: Path, env: dict[str, str]) -> Iterator[Fleet]:
    with fleet(sqlite_settings(folder, template, run_timeout=60)) as started:
        worker_env = {**started.node_env(naming.SANDBOX), **env}
        started.start(naming.SANDBOX, "worker", "sandbox", env=worker_env)
        started.wait_for_queue(naming.SANDBOX, naming.SANDBOX)
        yield started


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    """A sandbox worker whose micro-VMs are the stand-in's (its host needs x86_64 and a usable
    /dev/kvm: the worker checks them before it serves). Missing packages fail in CI, which
    installs them; a host without KVM skips."""
    problem = host_problem()
    if problem is not None:
        if IN_CI and "not installed" in problem:
            pytest.fail(f"the sandbox worker can't start here: {problem}")
        pytest.skip(problem)
    folder = tmp_path_factory.mktemp("sandbox-files")
    stand_in = write_stand_in(folder / "stand-in")
    path = os.pathsep.join([str(stand_in), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    yield from sandbox_fleet(folder, sqlite_template, {"PYTHONPATH": path})


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    """A sandbox worker with real micro-VMs (SKILLFLEET_TEST_KVM=1 only)."""
    if not WITH_KVM:
        pytest.skip("micro-VM tests run with SKILLFLEET_TEST_KVM=1")
    yield from sandbox_fleet(tmp_path_factory.mktemp("sandbox-kvm"), sqlite_template, {})


def run(client: httpx.Client, script: str, **arguments: Any) -> dict[str, Any]:
    body = {"arguments": {"skill_name": "tools", "script": script, **arguments},
            "chat_id": "sandbox-files"}  # fmt: skip
    response = client.post("/api/tools/run_skill_script", params={"wait": 60}, json=body)
    assert response.status_code == 200, response.text
    envelope = dict(response.json())
    assert envelope["status"] == "done", envelope
    return dict(envelope["result"])


def test_a_sandbox_run_gets_its_files_in_its_working_directory_and_its_output_comes_back(
    stand_in: Fleet,
):
    owner = stand_in.with_new_owner()
    owner.import_skill("tools", SANDBOX, {"scripts/convert.py": CONVERT})
    data = os.urandom(1024 * 1024)
    with owner.http(timeout=120) as client:
        sent = upload_file(client, "in.bin", data)
        result = run(client, "scripts/convert.py", args=["in/in.bin", "out/reversed.bin"],
                     files={"in/in.bin": sent["id"]})  # fmt: skip
        [made] = result["files"]
        back = client.get(f"/api/files/{made['id']}").content
    assert (result["exit_code"], result["isolation"]) == (0, "hyperlight"), result
    assert result["stdout"] == f"output ['in', 'out'] {len(data)}\n"  # the input, in place
    assert made["path"] == "out/reversed.bin"
    assert made["sha256"] == hashlib.sha256(data[::-1]).hexdigest()
    assert back == data[::-1]


def test_changed_and_new_files_come_back_and_links_are_noted(stand_in: Fleet):
    owner = stand_in.with_new_owner()
    owner.import_skill("tools", SANDBOX, {"scripts/mixed.py": MIXED})
    with owner.http() as client:
        changed = upload_file(client, "changed.txt", b"first\n")
        kept = upload_file(client, "kept.txt", b"the same\n")
        result = run(client, "scripts/mixed.py",
                     files={"changed.txt": changed["id"], "in/kept.txt": kept["id"]})  # fmt: skip
        by_path = {entry["path"]: entry for entry in result["files"]}
        changed_now = client.get(f"/api/files/{by_path['changed.txt']['id']}").content
    assert sorted(by_path) == ["changed.txt", "out/deep/made.bin"], result
    assert changed_now == b"first\nmore\n"
    assert by_path["out/deep/made.bin"]["sha256"] == hashlib.sha256(bytes(range(256))).hexdigest()
    assert result["files_note"] == (
        "Not every file the run made came back: link (a symbolic link, not followed)."
    )


def test_the_next_run_in_a_warm_micro_vm_finds_none_of_the_last_run_s_files(stand_in: Fleet):
    owner = stand_in.with_new_owner()
    owner.import_skill("tools", SANDBOX, {"scripts/convert.py": CONVERT, "scripts/look.py": LOOK})
    with owner.http() as client:
        sent = upload_file(client, "in.bin", b"0123456789")
        for _ in range(3):  # the pool keeps two warm micro-VMs: every one is used again
            made = run(client, "scripts/convert.py", args=["in/in.bin", "out/reversed.bin"],
                       files={"in/in.bin": sent["id"]})  # fmt: skip
            assert [entry["path"] for entry in made["files"]] == ["out/reversed.bin"], made
            looked = run(client, "scripts/look.py")
            assert (looked["stdout"], looked["files"]) == ("[]\n", []), looked


@pytest.mark.kvm
def test_a_real_micro_vm_reads_its_files_and_its_output_comes_back(real: Fleet):
    owner = real.with_new_owner()
    owner.import_skill("tools", SANDBOX, {"scripts/convert.py": CONVERT, "scripts/shout.js": SHOUT})
    data = os.urandom(64 * 1024)
    with owner.http(timeout=120) as client:
        sent = upload_file(client, "in.bin", data)
        notes = upload_file(client, "notes.txt", b"quiet words\n")
        result = run(client, "scripts/convert.py", args=["in.bin", "reversed.bin"],
                     files={"in.bin": sent["id"]})  # fmt: skip
        [made] = result["files"]
        back = client.get(f"/api/files/{made['id']}").content
        shouted = run(client, "scripts/shout.js", args=["notes.txt", "loud.txt"],
                      files={"notes.txt": notes["id"]})  # fmt: skip
        [loud] = shouted["files"]
        loud_back = client.get(f"/api/files/{loud['id']}").content
    assert (result["exit_code"], result["isolation"]) == (0, "hyperlight"), result
    assert result["stdout"] == f"output ['in.bin', 'reversed.bin'] {len(data)}\n"
    assert (made["path"], back) == ("reversed.bin", data[::-1])
    assert shouted["stdout"] == "/output 12\n", shouted
    assert (loud["path"], loud_back) == ("loud.txt", b"QUIET WORDS\n")

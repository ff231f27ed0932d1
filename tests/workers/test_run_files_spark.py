"""A script's command line and files on a real Spark worker (a container per run): the call's
files in /work byte for byte, and what the run made there back by id; both ways a worker moves
them (straight in the /work volume's folder, and through the engine's archive API)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fleet import Fleet, fleet, sqlite_settings, upload_file

from relay import naming

pytestmark = [pytest.mark.docker, pytest.mark.fleet]

SPARK = {"skillfleet.tier": "read", "skillfleet.execution": "spark"}
CONVERT = """
import os, sys
if len(sys.argv) != 3:
    print("Usage: convert.py [input] [output]")
    sys.exit(1)
data = open(sys.argv[1], "rb").read()
os.makedirs(os.path.dirname(sys.argv[2]) or ".", exist_ok=True)
with open(sys.argv[2], "wb") as out:
    out.write(data[::-1])
print(os.getcwd(), os.path.abspath(__file__), len(data))
"""


# Changes one input, leaves another, makes a folder of files and a link out of /work.
MIXED = """
import os
open("changed.txt", "a").write("more\\n")
os.makedirs("out/deep", exist_ok=True)
open("out/deep/made.bin", "wb").write(bytes(range(256)))
os.symlink("/etc/passwd", "link")
"""


@pytest.fixture(scope="module", params=["direct", "archive"])
def shared(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path
) -> Iterator[Fleet]:
    direct = request.param == "direct"
    if direct and os.geteuid() != 0:
        pytest.skip("a worker reaches the engine's volume folders as root only")
    folder = tmp_path_factory.mktemp("spark-files")
    with fleet(sqlite_settings(folder, sqlite_template, run_timeout=60)) as started:
        env = dict(started.node_env(naming.SPARK), SKILLFLEET_SPARK_WORK_DIRECT=str(direct))
        started.start(naming.SPARK, "worker", "spark", env=env)
        started.wait_for_queue(naming.SPARK, naming.SPARK)
        yield started


def test_a_spark_run_gets_its_files_in_work_and_its_output_comes_back_byte_for_byte(
    shared: Fleet,
):
    owner = shared.with_new_owner()
    owner.import_skill("tools", SPARK, {"scripts/convert.py": CONVERT})
    data = os.urandom(1024 * 1024)
    with owner.http(timeout=120) as client:
        sent = upload_file(client, "in.bin", data)
        body = {"arguments": {"skill_name": "tools", "script": "scripts/convert.py",
                              "args": ["in/in.bin", "out/reversed.bin"],
                              "files": {"in/in.bin": sent["id"]}}, "chat_id": "spark"}  # fmt: skip
        envelope = client.post("/api/tools/run_skill_script", params={"wait": 60}, json=body)
        assert envelope.status_code == 200, envelope.text
        result = envelope.json()["result"]
        assert envelope.json()["status"] == "done", result
        [made] = result["files"]
        back = client.get(f"/api/files/{made['id']}").content
    assert result["stdout"] == f"/work /skill/scripts/convert.py {len(data)}\n"
    assert result["isolation"] == "container"
    assert made["path"] == "out/reversed.bin"
    assert made["sha256"] == hashlib.sha256(data[::-1]).hexdigest()
    assert back == data[::-1]


def test_changed_and_new_files_come_back_from_a_spark_run_and_links_are_noted(shared: Fleet):
    owner = shared.with_new_owner()
    owner.import_skill("tools", SPARK, {"scripts/mixed.py": MIXED})
    with owner.http(timeout=120) as client:
        changed = upload_file(client, "changed.txt", b"first\n")
        kept = upload_file(client, "kept.txt", b"the same\n")
        body = {"arguments": {"skill_name": "tools", "script": "scripts/mixed.py",
                              "files": {"changed.txt": changed["id"], "in/kept.txt": kept["id"]}},
                "chat_id": "spark"}  # fmt: skip
        envelope = client.post("/api/tools/run_skill_script", params={"wait": 60}, json=body)
        result = envelope.json()["result"]
        assert envelope.json()["status"] == "done", result
        by_path = {entry["path"]: entry for entry in result["files"]}
        changed_now = client.get(f"/api/files/{by_path['changed.txt']['id']}").content
    assert sorted(by_path) == ["changed.txt", "out/deep/made.bin"], result
    assert changed_now == b"first\nmore\n"
    assert by_path["out/deep/made.bin"]["sha256"] == hashlib.sha256(bytes(range(256))).hexdigest()
    assert result["files_note"] == (
        "Not every file the run made came back: link (a symbolic link, not followed)."
    )

"""Two owners on one node: a real API, a real node worker (as root, a uid per run), the
operator's own CLI sharing the node. Owner B's read-tier script, which needs no approval, must
not reach owner A's running secret, the worker's token or the data folder; an owner the node
is not offered to can neither see nor use it."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fleet import PYTHON, Fleet, fleet, sqlite_settings, wait_until

from relay import naming
from store.db import transaction
from store.tokens import create_owner_token

pytestmark = [
    pytest.mark.fleet,
    pytest.mark.skipif(os.geteuid() != 0, reason="a uid per run needs a node worker as root"),
]

NODE = f"sh-{uuid.uuid4().hex[:8]}"
VALUE = f"a-secret-{uuid.uuid4().hex}"
HOLD = (
    "import os, time\n"
    "assert os.environ['API_TOKEN']\n"
    "print('holding', flush=True)\n"
    "time.sleep(60)\n"
)
# Everything a hostile script on a shared node would try, as plain reads.
PROBE = r"""
import glob, json, os
def read(path):
    try:
        if os.path.isdir(path):
            return sorted(os.listdir(path))
        with open(path, "rb") as handle:
            return handle.read(4096).decode(errors="replace")
    except OSError as e:
        return type(e).__name__
found = {path: read(path) for path in glob.glob("/proc/[0-9]*/environ")}
for target in json.loads(os.environ["SKILLFLEET_ARGS"])["targets"]:
    found[target] = read(target)
print(json.dumps({"uid": os.getuid(), "found": found}))
"""


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    folder = tmp_path_factory.mktemp("shared-node")
    with fleet(sqlite_settings(folder, sqlite_template, run_timeout=60)) as started:
        started.start_node(NODE)
        yield started


def operator(running: Fleet, *arguments: str) -> subprocess.CompletedProcess[str]:
    """The operator's `skillfleet` command against the fleet's database."""
    return subprocess.run(
        [PYTHON, "-m", "skillfleet", *arguments],
        env=running.env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def new_owner(running: Fleet) -> tuple[str, Fleet]:
    name = f"owner-{uuid.uuid4().hex[:6]}"
    with transaction(running.services.sessions) as session:
        token = create_owner_token(session, name)
    return name, Fleet(**{**running.__dict__, "owner_token": token})


def run(client: httpx.Client, skill: str, script: str, **arguments: Any) -> httpx.Response:
    body = {
        "arguments": {"skill_name": skill, "script": script,
                      "arguments": {"node": NODE, **arguments}},
        "chat_id": "shared-node",
    }  # fmt: skip
    return client.post("/api/tools/run_skill_script", params={"wait": 60}, json=body)


def test_owner_b_on_a_shared_node_reaches_neither_a_s_secret_nor_the_worker_nor_the_data(
    shared: Fleet,
):
    a_name, a = new_owner(shared)
    b_name, b = new_owner(shared)
    for name in (a_name, b_name):
        shared_now = operator(shared, "nodes", "share", NODE, name, "--yes")
        assert shared_now.returncode == 0, shared_now.stderr
    assert operator(shared, "nodes", "owners", NODE).stdout.split().count(b_name) == 1
    a.import_skill("holder", {"skillfleet.tier": "read", "skillfleet.secrets": "API_TOKEN"},
                   {"scripts/hold.py": HOLD})  # fmt: skip
    b.import_skill("probe", {"skillfleet.tier": "read"}, {"scripts/probe.py": PROBE})
    with a.http() as client:
        stored = client.put("/api/secrets/API_TOKEN", json={"value": VALUE, "skill": "holder"})
        assert stored.status_code == 200, stored.text
    holding: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: holding.update(run(a.http(timeout=90), "holder", "scripts/hold.py").json())
    )
    thread.start()
    data = shared.settings.data_dir
    targets = [str(data), str(data / "keys" / "secrets.key"), str(data / "cache"),
               str(data.parent / "skillfleet.db"), "/tmp/skillfleet-runs"]  # fmt: skip
    try:
        wait_until(lambda: _running_runs(a) > 0, 30, "owner A's run to start")
        time.sleep(1)  # its script prints "holding" and sleeps with the secret in its env
        with b.http() as client:
            probed = run(client, "probe", "scripts/probe.py", targets=targets)
    finally:
        _cancel_all(a)
        thread.join(timeout=90)
    envelope = probed.json()
    assert envelope["status"] == "done", envelope
    seen = json.loads(envelope["result"]["stdout"])
    text = json.dumps(seen)
    assert VALUE not in text
    assert "SKILLFLEET_NODE_TOKEN" not in text and "DATABASE_URL" not in text
    assert seen["uid"] != 0 and seen["uid"] != os.getuid()
    for target in targets:
        assert seen["found"][target] in ("PermissionError", "FileNotFoundError"), target
    # It saw its own processes only: the worker, owner A's script and its PID 1 are not there.
    assert len([p for p in seen["found"] if p.startswith("/proc/")]) <= 3
    assert holding.get("status") in ("failed", "done"), holding


def _running_runs(owner: Fleet) -> int:
    with owner.http() as client:
        return len(client.get("/api/runs", params={"status": "running"}).json())


def _cancel_all(owner: Fleet) -> None:
    with owner.http() as client:
        for found in client.get("/api/runs", params={"status": "running"}).json():
            client.post(f"/api/runs/{found['run_id']}/cancel")


def test_an_owner_the_node_is_not_offered_to_neither_sees_nor_uses_it(shared: Fleet):
    _name, c = new_owner(shared)
    c.import_skill("probe", {"skillfleet.tier": "read"}, {"scripts/probe.py": PROBE})
    with c.http() as client:
        listed = client.post("/api/tools/list_nodes", json={"arguments": {}, "chat_id": "x"})
        nodes = [node["name"] for node in listed.json()["result"]["nodes"]]
        api = [node["name"] for node in client.get("/api/nodes").json()]
        refused = run(client, "probe", "scripts/probe.py", targets=[])
        command = client.post(
            "/api/tools/run_command",
            json={"arguments": {"node": NODE, "command": "id"}, "chat_id": "x"},
        )
        manifest = client.get(f"/api/nodes/{NODE}/manifest")
    assert NODE not in nodes and NODE not in api
    assert refused.json()["status"] == "failed"
    assert refused.json()["error"]["code"] == "node_not_found"
    assert command.json()["error"]["code"] == "node_not_found"
    assert manifest.status_code == 404
    # Nothing was queued on the node for the owner it is not offered to.
    assert not shared.redis.llen(naming.node_queue(NODE))

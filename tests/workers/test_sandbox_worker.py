"""A sandbox worker on a host where Hyperlight can't start stays off the queue and says why, and
a sandbox call's refusal repeats it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import REDIS_URL
from fleet import fleet, wait_until

from broker.dispatcher import SANDBOX_FIX
from relay import heartbeat, naming
from store.settings import Settings

pytestmark = pytest.mark.fleet


@pytest.mark.skipif(
    os.environ.get("SKILLFLEET_TEST_KVM") == "1", reason="on a KVM host the worker serves"
)
def test_a_sandbox_worker_that_cannot_start_hyperlight_serves_nothing_and_calls_say_why(
    tmp_path: Path, database_url: str
):
    settings = Settings(data_dir=tmp_path / "var", database_url=database_url, redis_url=REDIS_URL)
    with fleet(settings) as running:
        process = running.start(
            "sandbox", "worker", "sandbox", env=running.node_env(naming.SANDBOX)
        )
        mine = f":{process.pid}:"  # instance ids hold the pid; other tests' workers may linger

        def my_worker() -> dict | None:
            for node in client.get("/api/nodes").json():
                for worker in node["workers"]:
                    if node["name"] == naming.SANDBOX and mine in worker["id"]:
                        return dict(worker)
            return None

        with running.http() as client:
            worker = wait_until(my_worker, 30, "the sandbox worker's heartbeat")
            assert worker["serving"] is False
            assert "Hyperlight" in worker["reason"] or "KVM" in worker["reason"]
            assert heartbeat.live_workers(running.redis, naming.SANDBOX) == []
            wait_until(
                lambda: "Not consuming 'sandbox'" in running.log_text("sandbox"),
                10,
                "the worker to say why it serves nothing",
            )
            running.import_skill(
                "boxed", {"skillfleet.tier": "read", "skillfleet.execution": "sandbox"},
                {"scripts/b.py": "print('hi')\n"},
            )  # fmt: skip
            body = {"arguments": {"skill_name": "boxed", "script": "scripts/b.py", "arguments": {}}}
            envelope = client.post("/api/tools/run_skill_script", json=body).json()
    assert envelope["error"] == {
        "code": "no_runner",
        "message": f"The sandbox worker on {worker['host']} runs but serves nothing, so sandbox "
        f"skills can't run: {worker['reason'].rstrip('.')}. To run them, {SANDBOX_FIX}.",
    }

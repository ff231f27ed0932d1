"""Each process connects once: a worker builds one database engine, one Celery app and one
Redis client when it boots, and everything it does after takes them from there."""

from __future__ import annotations

import json
import os
import signal
import uuid
from pathlib import Path

import pytest
from conftest import REDIS_URL
from fleet import fleet, wait_until

from relay import naming
from store.settings import Settings

pytestmark = pytest.mark.fleet

READ_NODE = {"skillfleet.tier": "read", "skillfleet.execution": "node"}

# Loaded by the worker's interpreter before anything else (Python's `sitecustomize`): it counts
# what the process builds, by the libraries' own constructors, and writes the counts as it exits.
# Redis clients are counted when made from a URL, or from an address without a pool; clients
# on a pool made for them (kombu's channels, a blocking reader of the same server) are not.
COUNTER = """
import atexit, json, os

import celery
import redis
import sqlalchemy

counts = {"engines": 0, "celery_apps": 0, "redis_clients": 0}

_create_engine = sqlalchemy.create_engine
def create_engine(*args, **kwargs):
    counts["engines"] += 1
    return _create_engine(*args, **kwargs)
sqlalchemy.create_engine = create_engine

_celery_init = celery.Celery.__init__
def celery_init(self, *args, **kwargs):
    counts["celery_apps"] += 1
    _celery_init(self, *args, **kwargs)
celery.Celery.__init__ = celery_init

_redis_init = redis.Redis.__init__
def redis_init(self, *args, **kwargs):
    if kwargs.get("connection_pool") is None:
        counts["redis_clients"] += 1
    _redis_init(self, *args, **kwargs)
redis.Redis.__init__ = redis_init

_from_url = redis.Redis.from_url.__func__
def from_url(cls, *args, **kwargs):
    counts["redis_clients"] += 1
    return _from_url(cls, *args, **kwargs)
redis.Redis.from_url = classmethod(from_url)

@atexit.register
def write():
    # A file a process: a child forked before the worker built anything (its keeper) exits too.
    with open(os.path.join(os.environ["COUNTED_TO"], f"{os.getpid()}.json"), "w") as out:
        json.dump(counts, out)
"""


def test_the_control_and_node_workers_each_build_one_engine_celery_app_and_redis_client(
    tmp_path: Path, database_url: str
):
    settings = Settings(
        data_dir=tmp_path / "var", database_url=database_url, redis_url=REDIS_URL, run_timeout=30
    )
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(COUNTER)
    node = f"t-{uuid.uuid4().hex[:8]}"
    counted = tmp_path / "counted"
    counted.mkdir()
    with fleet(settings) as running:
        path = os.pathsep.join(filter(None, [str(site), running.env.get("PYTHONPATH")]))
        counting = dict(running.env, PYTHONPATH=path)
        control_env = dict(counting, COUNTED_TO=str(counted))
        pids = {"control": running.start("control", "worker", "control", env=control_env).pid}
        node_env = dict(running.node_env(node), PYTHONPATH=path, COUNTED_TO=str(counted))
        pids[node] = running.start(node, "worker", "node", "--name", node, env=node_env).pid
        running.wait_for_queue(naming.CONTROL, "control")
        running.wait_for_queue(naming.node_queue(node), node)
        running.import_skill("hello", READ_NODE, {"scripts/hello.py": "print('hello')\n"})
        run_hello = {
            "skill_name": "hello", "script": "scripts/hello.py", "arguments": {"node": node},
        }  # fmt: skip
        with running.http() as client:
            # A job run on the control worker: its broker decides, sends a run to the node and
            # waits for its end, as the API does.
            steps = [{"tool": "list_skills"}, {"tool": "run_skill_script", "arguments": run_hello}]
            body = {"name": "counted", "cron": "0 3 * * *", "steps": steps, "skills": ["hello"]}
            created = client.post("/api/jobs", json=body)
            assert created.status_code == 201, created.text
            job = created.json()
            started = client.post(f"/api/jobs/{job['id']}/run")
            assert started.status_code == 202, started.text
            run = wait_until(
                lambda: (
                    (r := client.get(f"/api/jobs/{job['id']}/runs").json())
                    and r[0]["status"] not in ("queued", "running")
                    and r[0]
                ),
                60,
                "the job run to end",
            )
            assert run["status"] == "succeeded", run
            # The control worker's other work: housekeeping and the sweep, as beat sends them.
            for task in ("skillfleet.housekeeping", "skillfleet.sweep"):
                running.services.celery.send_task(task, queue=naming.CONTROL)
            called = client.post(
                "/api/tools/run_skill_script?wait=30", json={"arguments": run_hello}
            )
            assert called.json()["status"] == "done", called.text
        running.kill("control", signal.SIGTERM)
        running.kill(node, signal.SIGTERM)
    one_each = {"engines": 1, "celery_apps": 1, "redis_clients": 1}
    for label, pid in pids.items():
        assert json.loads((counted / f"{pid}.json").read_text()) == one_each, label

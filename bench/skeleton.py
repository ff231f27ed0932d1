"""The skeleton for `bench/runs.py`: skillfleet's architecture doing a run's required work, plainly.

It answers how much of a run's cost over the Celery floor the architecture itself sets, and so
how much the goals leave for everything skillfleet adds. Same pieces as skillfleet: gunicorn with
two uvicorn workers, a Flask app on a2wsgi's threads, SQLite (WAL, synchronous=NORMAL) on the
stdlib driver, Celery on Redis with late acks, a Redis stream per run. Per run it does the work
the design requires of every run and nothing else: the token checked by its hash, the turn's
count, the call and the run saved (one transaction), the task sent with the run's id, the worker
claiming the run (`UPDATE ... WHERE status='queued'`), the script spawned, its status and output
published, the run and the call finished (one transaction), the exit and end entries published,
and the API answering from the end entry. No policy, no schemas, no owner events, no metrics.

Started by the bench as `gunicorn bench.skeleton:api` and `celery -A bench.skeleton worker`;
SKELETON_DB names the database file, made by `create_database`.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import threading
import time
import uuid
from typing import Any

import redis
from a2wsgi import WSGIMiddleware
from celery import Celery
from flask import Flask, abort, jsonify, request

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/14")
DATABASE = os.environ.get("SKELETON_DB", "skeleton.db")
QUEUE = os.environ.get("SKELETON_QUEUE", "skeleton")
TOKEN = "skeleton-token"  # the bench's bearer token; the database holds its hash
SCHEMA = """
CREATE TABLE tokens (hash TEXT PRIMARY KEY, owner TEXT NOT NULL, role TEXT NOT NULL);
CREATE TABLE turns (key TEXT PRIMARY KEY, calls INTEGER NOT NULL);
CREATE TABLE calls (id TEXT PRIMARY KEY, owner TEXT NOT NULL, turn TEXT, tool TEXT NOT NULL,
    arguments TEXT NOT NULL, status TEXT NOT NULL, result TEXT, created_at REAL NOT NULL,
    finished_at REAL);
CREATE TABLE runs (id TEXT PRIMARY KEY, call_id TEXT NOT NULL, status TEXT NOT NULL,
    command TEXT NOT NULL, worker TEXT, exit_code INTEGER, stdout TEXT, stderr TEXT,
    created_at REAL NOT NULL, started_at REAL, finished_at REAL);
"""

celery = Celery("skeleton", broker=REDIS_URL)
celery.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    worker_disable_rate_limits=True,
    task_ignore_result=True,
    task_serializer="json",
    accept_content=["json"],
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)
store = redis.Redis.from_url(REDIS_URL)
_local = threading.local()


def create_database(path: str) -> None:
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.executescript(SCHEMA)
        digest = hashlib.sha256(TOKEN.encode()).hexdigest()
        connection.execute("INSERT INTO tokens VALUES (?, 'bench', 'agent')", (digest,))


def database() -> sqlite3.Connection:
    """This thread's connection, in autocommit mode: transactions are explicit."""
    connection: sqlite3.Connection | None = getattr(_local, "connection", None)
    if connection is None:
        connection = sqlite3.connect(DATABASE, isolation_level=None, timeout=30)
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute("PRAGMA busy_timeout=30000")
        _local.connection = connection
    return connection


flask = Flask(__name__)


@flask.post("/run")
def run() -> Any:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    digest = hashlib.sha256(token.encode()).hexdigest()
    connection = database()
    found = connection.execute("SELECT owner FROM tokens WHERE hash = ?", (digest,)).fetchone()
    if scheme != "Bearer" or found is None:
        abort(401)
    body = request.get_json()
    call_id, run_id, now = str(uuid.uuid4()), str(uuid.uuid4()), time.time()
    connection.execute("BEGIN IMMEDIATE")
    try:
        connection.execute(
            "INSERT INTO turns VALUES (?, 1) ON CONFLICT (key) DO UPDATE SET calls = calls + 1",
            (body["turn_id"],),
        )
        connection.execute(
            "INSERT INTO calls VALUES (?, ?, ?, 'run_skill_script', ?, 'running', NULL, ?, NULL)",
            (call_id, found[0], body["turn_id"], json.dumps(body["arguments"]), now),
        )
        connection.execute(
            "INSERT INTO runs (id, call_id, status, command, created_at) "
            "VALUES (?, ?, 'queued', ?, ?)",
            (run_id, call_id, json.dumps(body["command"]), now),
        )
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    celery.send_task("skeleton.execute", args=[run_id], queue=QUEUE)
    end = store.xread({f"skeleton:run:{run_id}:end": "0-0"}, count=1, block=60_000)
    answer = json.loads(end[0][1][0][1][b"answer"])
    return jsonify({"status": "done", "call_id": call_id, "result": answer})


api = WSGIMiddleware(flask, workers=16)


@celery.task(name="skeleton.execute")
def execute(run_id: str) -> None:
    connection = database()
    connection.execute("BEGIN IMMEDIATE")
    claimed = connection.execute(
        "UPDATE runs SET status = 'running', worker = ?, started_at = ? "
        "WHERE id = ? AND status = 'queued' RETURNING call_id, command",
        (f"skeleton-{os.getpid()}", time.time(), run_id),
    ).fetchone()
    connection.execute("COMMIT")
    if claimed is None:
        return  # a second delivery: claimed before
    call_id, command = claimed
    done = subprocess.run(json.loads(command), capture_output=True, text=True, check=False)
    key = f"skeleton:run:{run_id}"
    pipe = store.pipeline(transaction=False)
    pipe.xadd(key, {"kind": "status", "data": json.dumps({"status": "running"})})
    pipe.xadd(key, {"kind": "stdout", "data": json.dumps({"text": done.stdout})})
    pipe.expire(key, 3600)
    pipe.execute()
    status = "succeeded" if done.returncode == 0 else "failed"
    result = {"run_id": run_id, "status": status, "exit_code": done.returncode,
              "stdout": done.stdout, "stderr": done.stderr}  # fmt: skip
    connection.execute("BEGIN IMMEDIATE")
    connection.execute(
        "UPDATE runs SET status = ?, exit_code = ?, stdout = ?, stderr = ?, finished_at = ? "
        "WHERE id = ? AND status = 'running'",
        (status, done.returncode, done.stdout, done.stderr, time.time(), run_id),
    )
    connection.execute(
        "UPDATE calls SET status = 'done', result = ?, finished_at = ? "
        "WHERE id = ? AND status = 'running'",
        (json.dumps(result), time.time(), call_id),
    )
    connection.execute("COMMIT")
    exit_data = json.dumps({"status": status, "exit_code": done.returncode})
    pipe = store.pipeline(transaction=False)
    pipe.xadd(key, {"kind": "exit", "data": exit_data})
    pipe.xadd(f"{key}:end", {"kind": "exit", "data": exit_data, "answer": json.dumps(result)})
    pipe.expire(key, 3600)
    pipe.expire(f"{key}:end", 3600)
    pipe.execute()

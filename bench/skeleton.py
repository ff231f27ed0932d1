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

With SKELETON_FEATURES=1 it also does, as plainly, what else the design asks of every run
(`bench/runs.py` measures both): the call's body checked; the owner's chat read, or made, in the
turn's transaction; the skill read by name and the call decided by skillfleet's own built-in
policy; the call saved with its chat, tier, rule and skill; the decision counted for /metrics
and the owner's events (the run queued, running and ended, the call finished) in the round trips
that carry the run's entries; the script's output streamed as it comes (its first line goes out
at once, with the running status); the end indexed for retention.

Started by the bench as `gunicorn bench.skeleton:api` and `celery -A bench.skeleton worker`;
SKELETON_DB names the database file, made by `create_database`.
"""

from __future__ import annotations

import hashlib
import json
import os
import selectors
import sqlite3
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from a2wsgi import WSGIMiddleware
from celery import Celery
from flask import Flask, abort, jsonify, request

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/14")
DATABASE = os.environ.get("SKELETON_DB", "skeleton.db")
QUEUE = os.environ.get("SKELETON_QUEUE", "skeleton")
FEATURES = os.environ.get("SKELETON_FEATURES") == "1"
SKILL = ("trivial", "0" * 64, "node", "read")  # the bench's skill: name, hash, execution, tier
TOKEN = "skeleton-token"  # the bench's bearer token; the database holds its hash
SCHEMA = """
CREATE TABLE tokens (hash TEXT PRIMARY KEY, owner TEXT NOT NULL, role TEXT NOT NULL);
CREATE TABLE turns (key TEXT PRIMARY KEY, calls INTEGER NOT NULL);
CREATE TABLE chats (id INTEGER PRIMARY KEY, owner TEXT NOT NULL, external TEXT NOT NULL,
    failed INTEGER NOT NULL DEFAULT 0, UNIQUE (owner, external));
CREATE TABLE skills (owner TEXT NOT NULL, name TEXT NOT NULL, hash TEXT NOT NULL,
    execution TEXT NOT NULL, tier TEXT NOT NULL, PRIMARY KEY (owner, name));
CREATE TABLE calls (id TEXT PRIMARY KEY, owner TEXT NOT NULL, turn TEXT, tool TEXT NOT NULL,
    arguments TEXT NOT NULL, status TEXT NOT NULL, result TEXT, created_at REAL NOT NULL,
    finished_at REAL, chat_id INTEGER, tier TEXT, rule TEXT, skill_name TEXT,
    skill_hash TEXT);
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
        connection.execute("INSERT INTO skills VALUES ('bench', ?, ?, ?, ?)", SKILL)


@contextmanager
def immediate(connection: sqlite3.Connection) -> Iterator[None]:
    """A write transaction that commits when the block ends and rolls back on any error."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


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
    if FEATURES:
        return run_with_features(connection, found[0], body)
    call_id, run_id, now = str(uuid.uuid4()), str(uuid.uuid4()), time.time()
    with immediate(connection):
        connection.execute(
            "INSERT INTO turns VALUES (?, 1) ON CONFLICT (key) DO UPDATE SET calls = calls + 1",
            (body["turn_id"],),
        )
        connection.execute(
            "INSERT INTO calls (id, owner, turn, tool, arguments, status, created_at) "
            "VALUES (?, ?, ?, 'run_skill_script', ?, 'running', ?)",
            (call_id, found[0], body["turn_id"], json.dumps(body["arguments"]), now),
        )
        connection.execute(
            "INSERT INTO runs (id, call_id, status, command, created_at) "
            "VALUES (?, ?, 'queued', ?, ?)",
            (run_id, call_id, json.dumps(body["command"]), now),
        )
    celery.send_task("skeleton.execute", args=[run_id], queue=QUEUE)
    end = store.xread({f"skeleton:run:{run_id}:end": "0-0"}, count=1, block=60_000)
    answer = json.loads(end[0][1][0][1][b"answer"])
    return jsonify({"status": "done", "call_id": call_id, "result": answer})


api = WSGIMiddleware(flask, workers=16)


@celery.task(name="skeleton.execute")
def execute(run_id: str) -> None:
    connection = database()
    with immediate(connection):
        claimed = connection.execute(
            "UPDATE runs SET status = 'running', worker = ?, started_at = ? "
            "WHERE id = ? AND status = 'queued' RETURNING call_id, command",
            (f"skeleton-{os.getpid()}", time.time(), run_id),
        ).fetchone()
    if claimed is None:
        return  # a second delivery: claimed before
    call_id, command = claimed
    if FEATURES:
        execute_with_features(connection, run_id, call_id, command)
        return
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
    with immediate(connection):
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
    exit_data = json.dumps({"status": status, "exit_code": done.returncode})
    pipe = store.pipeline(transaction=False)
    pipe.xadd(key, {"kind": "exit", "data": exit_data})
    pipe.xadd(f"{key}:end", {"kind": "exit", "data": exit_data, "answer": json.dumps(result)})
    pipe.expire(key, 3600)
    pipe.expire(f"{key}:end", 3600)
    pipe.execute()


# -- with the design's other per-run work (SKELETON_FEATURES=1) -----------------------------


def _policy() -> Any:
    from broker.policy import load_builtin_policy

    return load_builtin_policy()


POLICY = _policy() if FEATURES else None
OWNER_EVENTS = "skeleton:owner:bench:events"


def _owner_event(pipe: Any, kind: str, data: dict[str, Any]) -> None:
    pipe.xadd(OWNER_EVENTS, {"kind": kind, "data": json.dumps(data)}, maxlen=10_000)


def _checked(body: Any) -> tuple[dict[str, Any], str, str]:
    """The call's arguments, chat and turn, or a 422 for a body of the wrong shape."""
    if not isinstance(body, dict) or not isinstance(body.get("arguments"), dict):
        abort(422)
    chat, turn = body.get("chat_id"), body.get("turn_id")
    arguments = body["arguments"]
    for text in (chat, turn, arguments.get("skill_name"), arguments.get("script")):
        if not isinstance(text, str) or not 0 < len(text) <= 200 or "\0" in text:
            abort(422)
    if not isinstance(arguments.get("arguments", {}), dict):
        abort(422)
    return arguments, chat, turn


def run_with_features(connection: sqlite3.Connection, owner: str, body: Any) -> Any:
    from broker.policy import CallFacts

    assert POLICY is not None
    arguments, external, turn = _checked(body)
    with immediate(connection):
        found = connection.execute(
            "SELECT id FROM chats WHERE owner = ? AND external = ?", (owner, external)
        ).fetchone()
        chat = (
            found[0]
            if found
            else connection.execute(
                "INSERT INTO chats (owner, external) VALUES (?, ?) RETURNING id", (owner, external)
            ).fetchone()[0]
        )
        number = connection.execute(
            "INSERT INTO turns VALUES (?, 1) ON CONFLICT (key) DO UPDATE SET calls = calls + 1 "
            "RETURNING calls",
            (f"{chat}:{turn}",),
        ).fetchone()[0]
    skill = connection.execute(
        "SELECT name, hash, execution, tier FROM skills WHERE owner = ? AND name = ?",
        (owner, arguments["skill_name"]),
    ).fetchone()
    if skill is None:
        abort(404)
    decision = POLICY.decide(
        CallFacts(tool="run_skill_script", tier=skill[3], calls_this_turn=number)
    )
    if decision.action != "allow":
        abort(403)
    call_id, run_id, now = str(uuid.uuid4()), str(uuid.uuid4()), time.time()
    with immediate(connection):
        connection.execute(
            "INSERT INTO calls VALUES (?, ?, ?, 'run_skill_script', ?, 'running', NULL, ?, NULL, "
            "?, ?, ?, ?, ?)",
            (call_id, owner, turn, json.dumps(arguments), now, chat, skill[3], decision.rule,
             skill[0], skill[1]),
        )  # fmt: skip
        connection.execute(
            "INSERT INTO runs (id, call_id, status, command, created_at) "
            "VALUES (?, ?, 'queued', ?, ?)",
            (run_id, call_id, json.dumps(body["command"]), now),
        )
    celery.send_task("skeleton.execute", args=[run_id], queue=QUEUE)
    pipe = store.pipeline(transaction=False)
    pipe.hincrby("skeleton:decisions", json.dumps([decision.rule, decision.action]))
    _owner_event(pipe, "run.state", {"run_id": run_id, "call_id": call_id, "status": "queued"})
    pipe.execute()
    end = store.xread({f"skeleton:run:{run_id}:end": "0-0"}, count=1, block=60_000)
    answer = json.loads(end[0][1][0][1][b"answer"])
    return jsonify({"call_id": call_id, **answer})


def execute_with_features(
    connection: sqlite3.Connection, run_id: str, call_id: str, command: str
) -> None:
    """A claimed run: its output streamed as it comes, then the finish and the owner's events."""
    key = f"skeleton:run:{run_id}"
    process = subprocess.Popen(
        json.loads(command), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    assert process.stdout is not None and process.stderr is not None
    output = {"stdout": bytearray(), "stderr": bytearray()}
    pending: list[tuple[str, bytes]] = []
    status_sent = False
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ, "stdout")
        selector.register(process.stderr, selectors.EVENT_READ, "stderr")
        while selector.get_map():
            for found, _mask in selector.select(timeout=0.2):
                data = os.read(found.fd, 16 * 1024)
                if not data:
                    selector.unregister(found.fileobj)
                    continue
                output[found.data] += data
                pending.append((found.data, data))
                if data.endswith(b"\n"):  # a whole line goes out at once, with the status
                    pipe = store.pipeline(transaction=False)
                    if not status_sent:
                        _owner_event(pipe, "run.state", {"run_id": run_id, "status": "running"})
                        pipe.xadd(key, {"kind": "status", "data": json.dumps(
                            {"status": "running", "pid": process.pid})})  # fmt: skip
                        status_sent = True
                    for name, chunk in pending:
                        pipe.xadd(key, {"kind": name, "data": json.dumps(
                            {"text": chunk.decode("utf-8", "replace")})})  # fmt: skip
                    pending.clear()
                    pipe.expire(key, 3600)
                    pipe.execute()
    code = process.wait()
    stdout, stderr = (output[name].decode("utf-8", "replace") for name in ("stdout", "stderr"))
    status = "succeeded" if code == 0 else "failed"
    result = {"run_id": run_id, "status": status, "exit_code": code,
              "stdout": stdout, "stderr": stderr}  # fmt: skip
    call_status = "done" if code == 0 else "failed"
    with immediate(connection):
        connection.execute(
            "UPDATE runs SET status = ?, exit_code = ?, stdout = ?, stderr = ?, finished_at = ? "
            "WHERE id = ? AND status = 'running'",
            (status, code, stdout, stderr, time.time(), run_id),
        )
        chat = connection.execute(
            "UPDATE calls SET status = ?, result = ?, finished_at = ? "
            "WHERE id = ? AND status = 'running' RETURNING chat_id",
            (call_status, json.dumps(result), time.time(), call_id),
        ).fetchone()
        if code != 0 and chat is not None:
            connection.execute("UPDATE chats SET failed = failed + 1 WHERE id = ?", (chat[0],))
    exit_data = json.dumps({"status": status, "exit_code": code})
    pipe = store.pipeline(transaction=False)
    _owner_event(pipe, "run.state", {"run_id": run_id, "status": status, "exit_code": code})
    _owner_event(pipe, "call.finished", {"call_id": call_id, "status": call_status})
    for name, chunk in pending:
        pipe.xadd(key, {"kind": name, "data": json.dumps({"text": chunk.decode()})})
    pipe.xadd(key, {"kind": "exit", "data": exit_data})
    answer = {"status": call_status, "result": result}
    pipe.xadd(f"{key}:end", {"kind": "exit", "data": exit_data, "answer": json.dumps(answer)})
    pipe.expire(key, 3600)
    pipe.expire(f"{key}:end", 3600)
    pipe.zadd("skeleton:runs:ended", {run_id: time.time()})
    pipe.execute()

"""History at scale: fill a database with an owner's months of calls and runs, then time the
list routes on it. Prints figures; asserts nothing.

    python -m bench.scale seed --calls N --nodes K [--force]
    python -m bench.scale lists [--against LARGER_URL] [--repeat R] [--out FILE.json]

`seed` fills the database `DATABASE_URL` names (PostgreSQL or SQLite; migrated to head first)
for the first owner (made, as `owner`, when there is none): N tool calls and N runs over the
last 90 days in every state they end or wait in, with what real ones carry (arguments, a
result, the run's output rows or its error), an approval for each call that asked one (about
one in twelve) and for a few approved ones, 1,000 chats the calls belong to, and K registered
nodes offered to the owner, each with a node worker's heartbeat in the Redis `REDIS_URL`
names. Rows go in by COPY on PostgreSQL and executemany on SQLite, not through the API. A
database holding calls, runs or chats already is refused unless `--force`.

`lists` times each list route in this process (the Flask app on the same database and Redis,
the owner's token, no HTTP server): the first page at the console's size and the default one,
filtered pages, and a page 20 cursors deep; the median of `--repeat` requests each. With
`--against`, the same routes on another database (a larger history) in the same process, the
requests to each taking turns, and the ratio of its medians to the first's (the goal: at most
1.5x at 1 M against 10 k).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from sqlalchemy import Engine, Table, func, select

from relay import heartbeat
from relay.naming import node_queue
from store.db import make_engine, transaction
from store.migrate import upgrade
from store.models import Approval, Chat, Node, NodeOwner, Owner, Run, ToolCall
from store.states import ApprovalStatus, CallStatus, RunStatus
from store.tokens import Role, create_token

DAYS = 90
CHATS = 1000
BATCH = 10_000
SKILLS = ["disk-report", "log-tail", "cert-check", "db-vacuum", "port-scan", "backup-verify"]
SCRIPTS = {name: f"scripts/{name.replace('-', '_')}.py" for name in SKILLS}
# How often each run ends as it does (all states appear); a call's state follows its run's.
RUN_STATES = [
    (RunStatus.SUCCEEDED, 80),
    (RunStatus.FAILED, 9),
    (RunStatus.TIMED_OUT, 2),
    (RunStatus.CANCELLED, 2),
    (RunStatus.INTERRUPTED, 2),
    (RunStatus.RUNNING, 3),
    (RunStatus.QUEUED, 2),
]
CALL_OF_RUN = {
    RunStatus.SUCCEEDED: CallStatus.DONE,
    RunStatus.FAILED: CallStatus.DONE,
    RunStatus.TIMED_OUT: CallStatus.DONE,
    RunStatus.CANCELLED: CallStatus.DONE,
    RunStatus.INTERRUPTED: CallStatus.FAILED,
    RunStatus.RUNNING: CallStatus.RUNNING,
    RunStatus.QUEUED: CallStatus.RUNNING,
}
# A call that asked the owner first, and what became of it (no run for those that did not go).
ASKED = [
    (CallStatus.PENDING_APPROVAL, ApprovalStatus.PENDING),
    (CallStatus.DENIED, ApprovalStatus.DENIED),
    (CallStatus.EXPIRED, ApprovalStatus.EXPIRED),
    (CallStatus.DONE, ApprovalStatus.APPROVED),
    (CallStatus.DONE, ApprovalStatus.APPROVED_FOR_CHAT),
    (CallStatus.DONE, ApprovalStatus.STALE),
]
OTHER_CALLS = [CallStatus.PENDING_QUESTION, CallStatus.DECIDING]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    seed_parser = commands.add_parser("seed", help="fill the database with an owner's history")
    seed_parser.add_argument("--calls", type=int, required=True, help="tool calls and runs")
    seed_parser.add_argument("--nodes", type=int, default=10, help="registered nodes")
    seed_parser.add_argument("--force", action="store_true", help="even into a database in use")
    seed_parser.add_argument("--seed", type=int, default=48, help="the random seed")
    lists_parser = commands.add_parser("lists", help="time the list routes")
    lists_parser.add_argument("--repeat", type=int, default=21, help="requests per route")
    lists_parser.add_argument(
        "--against", action="append", default=[], metavar="URL",
        help="another database to time alike (a larger one), its ratio to DATABASE_URL's shown",
    )  # fmt: skip
    lists_parser.add_argument("--out", help="also write the medians to this JSON file")
    args = parser.parse_args(argv)
    if args.command == "seed":
        seed(database_url(), args.calls, args.nodes, args.force, args.seed)
    else:
        lists([database_url(), *args.against], args.repeat, args.out)


def database_url() -> str:
    url = os.environ.get("DATABASE_URL")
    if not url:
        sys.exit(
            "Set DATABASE_URL to the database to fill or time (postgresql://… or sqlite:///…)."
        )
    return url


def redis_client() -> redis.Redis:
    return redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))


# --- seed ------------------------------------------------------------------------------------


def seed(url: str, calls: int, nodes: int, force: bool, seed_value: int) -> None:
    upgrade(url)
    engine = make_engine(url)
    with engine.connect() as connection:
        in_use = {
            table.name: connection.scalar(select(func.count()).select_from(table))
            for table in (ToolCall.__table__, Run.__table__, Chat.__table__)
        }
    if any(in_use.values()) and not force:
        sys.exit(f"The database holds data already ({in_use}); --force adds to it anyway.")
    started = time.perf_counter()
    owner_id = first_owner(engine)
    rng = random.Random(seed_value)
    now = datetime.now(UTC)
    chat_ids = add_chats(engine, owner_id, now, rng)
    made = {"chats": len(chat_ids), "tool_calls": 0, "runs": 0, "approvals": 0}
    for start in range(0, calls, BATCH):
        call_rows, run_rows, approval_rows = history(
            owner_id, chat_ids, min(BATCH, calls - start), now, rng
        )
        insert(engine, ToolCall.__table__, call_rows)
        insert(engine, Run.__table__, run_rows)
        insert(engine, Approval.__table__, approval_rows)
        made["tool_calls"] += len(call_rows)
        made["runs"] += len(run_rows)
        made["approvals"] += len(approval_rows)
        print(f"  {made} after {time.perf_counter() - started:.0f} s", flush=True)
    register_nodes(engine, owner_id, nodes)
    if engine.dialect.name == "postgresql":
        with engine.connect() as connection:
            connection.exec_driver_sql("ANALYZE")
            connection.commit()
    else:
        with engine.connect() as connection:
            connection.exec_driver_sql("ANALYZE")
    elapsed = time.perf_counter() - started
    print(f"Seeded {made} and {nodes} nodes for owner {owner_id} in {elapsed:.0f} s.")


def first_owner(engine: Engine) -> int:
    with transaction(lambda: _session(engine)) as session:
        found = session.scalar(select(Owner.id).order_by(Owner.id).limit(1))
        if found is not None:
            return int(found)
        owner = Owner(name="owner")
        session.add(owner)
        session.flush()
        return int(owner.id)


def _session(engine: Engine) -> Any:
    from sqlalchemy.orm import Session

    return Session(engine, expire_on_commit=False)


def add_chats(engine: Engine, owner_id: int, now: datetime, rng: random.Random) -> list[int]:
    """1,000 chats, their starts spread over the 90 days; their ids."""
    base = uuid.uuid4().hex[:8]
    rows = [
        {
            "owner_id": owner_id,
            "external_id": f"chat-{base}-{n:04d}",
            "declined_calls": rng.randint(0, 3),
            "expired_calls": rng.randint(0, 2),
            "failed_calls": rng.randint(0, 5),
            "timed_out_calls": rng.randint(0, 1),
            "known_skills": rng.sample(SKILLS, 3),
            "created_at": now - timedelta(seconds=rng.uniform(0, DAYS * 86400)),
        }
        for n in range(CHATS)
    ]
    with engine.begin() as connection:
        connection.execute(Chat.__table__.insert(), rows)
        found = connection.scalars(
            select(Chat.id).where(Chat.external_id.like(f"chat-{base}-%"))
        ).all()
    return list(found)


def history(
    owner_id: int, chat_ids: list[int], count: int, now: datetime, rng: random.Random
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """`count` calls with as many runs: most calls start a run; one in twelve asked the owner
    first (those not approved start none: a run of a job's command stands in for it)."""
    calls: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    approvals: list[dict[str, Any]] = []
    states = [state for state, _ in RUN_STATES]
    weights = [weight for _, weight in RUN_STATES]
    for _ in range(count):
        created = now - timedelta(seconds=rng.uniform(0, DAYS * 86400))
        skill = rng.choice(SKILLS)
        node = f"node-{rng.randrange(100):03d}"
        skill_hash = f"{rng.getrandbits(256):064x}"
        chat_id = rng.choice(chat_ids)
        call_id, run_id = str(uuid.uuid4()), str(uuid.uuid4())
        run_state = rng.choices(states, weights)[0]
        call_state = CALL_OF_RUN[run_state]
        approval_state = None
        roll = rng.random()
        if roll < 1 / 12:
            call_state, approval_state = rng.choice(ASKED)
            if approval_state == ApprovalStatus.PENDING:  # asked in the last half hour
                created = now - timedelta(seconds=rng.uniform(0, 1500))
        elif roll < 1 / 12 + 0.01:
            call_state = rng.choice(OTHER_CALLS)
        starts_run = call_state in (CallStatus.DONE, CallStatus.RUNNING, CallStatus.FAILED)
        arguments = {"script": SCRIPTS[skill], "args": ["--since", "24h"], "node": node}
        run = run_row(owner_id, run_id, skill, skill_hash, node, run_state, created, rng)
        if starts_run:
            run.update(call_id=call_id, chat_id=chat_id)
        else:  # a job's command run, so that the runs number the calls
            run.update(call_id=None, skill_name=None, skill_hash=None, script=None,
                       command=["journalctl", "-u", "nginx", "--since", "-1h"])  # fmt: skip
        runs.append(run)
        calls.append({
            "id": call_id, "owner_id": owner_id, "chat_id": chat_id, "job_run_id": None,
            "turn_id": None, "tool": "run_skill_script", "tier": "destructive"
            if approval_state else "read", "mode": "execute", "status": call_state,
            "rule": "tier:destructive" if approval_state else None, "arguments": arguments,
            "result": call_result(run) if starts_run and call_state == CallStatus.DONE else None,
            "error_code": "approval_denied" if call_state == CallStatus.DENIED else None,
            "error_message": None, "skill_name": skill, "skill_hash": skill_hash,
            "grant_key": f"skill:{skill}@{skill_hash[:8]}", "node": node,
            "approval_id": None, "run_id": run_id if starts_run else None,
            "created_at": created,
            "finished_at": None if call_state in OPEN_CALLS else created + timedelta(seconds=9),
        })  # fmt: skip
        if approval_state is not None:
            approval_id = str(uuid.uuid4())
            calls[-1]["approval_id"] = approval_id
            answered = approval_state not in (ApprovalStatus.PENDING, ApprovalStatus.EXPIRED)
            approvals.append({
                "id": approval_id, "owner_id": owner_id, "call_id": call_id,
                "chat_id": chat_id, "job_run_id": None, "tool": "run_skill_script",
                "tier": "destructive", "arguments": arguments, "skill_name": skill,
                "skill_hash": skill_hash, "node": node,
                "grant_key": f"skill:{skill}@{skill_hash[:8]}", "rule": "tier:destructive",
                "warning": f"{skill} changes {node}: it runs {SCRIPTS[skill]} as root.",
                "offers_chat_grant": True, "status": approval_state, "created_at": created,
                "expires_at": created + timedelta(minutes=30),
                "answered_at": created + timedelta(minutes=2) if answered else None,
            })  # fmt: skip
    return calls, runs, approvals


OPEN_CALLS = {
    CallStatus.DECIDING,
    CallStatus.PENDING_APPROVAL,
    CallStatus.PENDING_QUESTION,
    CallStatus.RUNNING,
}


def run_row(
    owner_id: int,
    run_id: str,
    skill: str,
    skill_hash: str,
    node: str,
    state: RunStatus,
    created: datetime,
    rng: random.Random,
) -> dict[str, Any]:
    ended = state not in (RunStatus.QUEUED, RunStatus.RUNNING)
    started = None if state == RunStatus.QUEUED else created + timedelta(seconds=1)
    lines = rng.randint(3, 12)
    stdout = "".join(
        f"{node} /dev/vda{n} {rng.randint(1, 99)}% used {rng.randint(1, 900)}G free\n"
        for n in range(lines)
    )
    failed = state in (RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.INTERRUPTED)
    stderr = (
        'Traceback (most recent call last):\n  File "report.py", line 41, in <module>\n'
        "PermissionError: [Errno 13] Permission denied: '/var/log/syslog'\n"
        if failed
        else ""
    )
    return {
        "id": run_id, "call_id": None, "chat_id": None, "owner_id": owner_id, "skill_name": skill,
        "skill_hash": skill_hash, "script": SCRIPTS[skill], "command": None,
        "arguments": {"since": "24h"}, "args": ["--since", "24h"], "input_files": None,
        "output_files": None, "execution": "node", "queue": node_queue(node), "node": node,
        "network": "none", "isolation": "process", "status": state,
        "exit_code": (1 if failed else 0) if ended and state != RunStatus.CANCELLED else None,
        "stdout": stdout if started else "", "stderr": stderr,
        "error": "The worker stopped beating." if state == RunStatus.INTERRUPTED else None,
        "worker": f"{node}@{node}:4242:1" if started else None, "timeout_seconds": 300,
        "created_at": created, "started_at": started,
        "finished_at": created + timedelta(seconds=rng.uniform(2, 60)) if ended else None,
    }  # fmt: skip


def call_result(run: dict[str, Any]) -> dict[str, Any]:
    """What a finished run's call answers: its state, exit and output's summary."""
    return {
        "run_id": run["id"],
        "status": run["status"],
        "exit_code": run["exit_code"],
        "stdout": run["stdout"][-400:],
        "stderr": run["stderr"][-400:],
    }


def insert(engine: Engine, table: Table | Any, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    if engine.dialect.name != "postgresql":
        with engine.begin() as connection:
            connection.execute(table.insert(), rows)
        return
    columns = [column.name for column in table.columns if column.name in rows[0]]
    json_columns = {c.name for c in table.columns if c.type.__class__.__name__ == "JSON"}
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        with cursor.copy(f"COPY {table.name} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row([
                    json.dumps(row[c]) if c in json_columns and row[c] is not None else row[c]
                    for c in columns
                ])  # fmt: skip
        raw.commit()
    finally:
        raw.close()


def register_nodes(
    engine: Engine, owner_id: int, count: int, client: redis.Redis | None = None
) -> None:
    """`count` nodes offered to the owner, each with a node worker beating in Redis (`client`,
    else `REDIS_URL`'s)."""
    names = [f"node-{n:03d}" if count <= 1000 else f"node-{n:05d}" for n in range(count)]
    with engine.begin() as connection:
        known = set(connection.scalars(select(Node.name)).all())
        fresh = [name for name in names if name not in known]
        if fresh:
            connection.execute(Node.__table__.insert(), [{"name": name} for name in fresh])
        offered = set(
            connection.scalars(select(NodeOwner.node_name).where(NodeOwner.owner_id == owner_id))
        )
        rows = [{"node_name": n, "owner_id": owner_id} for n in names if n not in offered]
        if rows:
            connection.execute(NodeOwner.__table__.insert(), rows)
    client = client or redis_client()
    for name in names:
        instance = heartbeat.Instance(
            role="node", queue=node_queue(name), name=name, host=name, pid=4242,
            features=["script", "command"], hashes={"disk-report": ["a" * 64]},
        )  # fmt: skip
        heartbeat.beat(client, instance, alive_seconds=24 * 3600)


# --- lists -----------------------------------------------------------------------------------

ROUTES = [
    "/api/calls?page_size=25",
    "/api/calls",
    "/api/calls?status=failed&page_size=25",
    "/api/calls?chat={chat}&page_size=25",
    "/api/runs?page_size=25",
    "/api/runs",
    "/api/runs?status=failed&page_size=25",
    "/api/runs?chat={chat}&page_size=25",
    "/api/approvals?page_size=25",
    "/api/approvals?status=pending&page_size=25",
    "/api/questions?page_size=25",
    "/api/chats?page_size=25",
    "/api/nodes",
]
DEEP = "/api/runs?page_size=25"  # and its page 20 cursors on
DEEP_PAGES = 20


@dataclass
class Target:
    """One database's app, the owner's token and the addresses to time on it."""

    calls: int
    dialect: str
    client: Any
    auth: dict[str, str]
    addresses: dict[str, str]  # the route's label: its address here


def target(url: str) -> Target:
    from api import create_app
    from api.services import Services
    from store.settings import Settings

    settings = Settings.from_env()  # REDIS_URL and the keys among them
    services = Services.build(settings, make_engine(url))
    client = create_app(services=services).test_client()
    with transaction(services.sessions) as session:
        owner_name = session.scalar(select(Owner.name).order_by(Owner.id).limit(1))
        if owner_name is None:
            sys.exit(f"No owner in {url}: run `python -m bench.scale seed` first.")
        token = create_token(session, owner_name, Role.OWNER, label="bench")
        chat = session.scalar(select(Chat.external_id).order_by(Chat.id).limit(1))
        calls = session.scalar(select(func.count()).select_from(ToolCall)) or 0
    auth = {"Authorization": f"Bearer {token}"}
    addresses = {route: route.format(chat=chat) for route in ROUTES}
    deep = DEEP
    for _ in range(DEEP_PAGES):
        link = client.get(deep, headers=auth).headers.get("Link", "")
        deep = link[1 : link.index(">")] if link else deep
    addresses[f"{DEEP} (page {DEEP_PAGES + 1})"] = deep
    return Target(calls, services.engine.dialect.name, client, auth, addresses)


def lists(urls: list[str], repeat: int, out: str | None) -> None:
    """Time each route on each database, their requests taking turns (so that a busy moment
    of the machine falls on all of them alike); the medians, and each one's ratio to the
    first database's."""
    targets = [target(url) for url in urls]
    sizes = " vs ".join(f"{t.calls} tool calls" for t in targets)
    print(f"{sizes} ({targets[0].dialect}); median of {repeat} requests each, taking turns")
    medians: dict[str, list[float]] = {}
    for label in targets[0].addresses:
        timings: list[list[float]] = [[] for _ in targets]
        for turn in range(repeat + 1):
            for index, one in enumerate(targets):
                elapsed = time_ms(one.client, one.addresses[label], one.auth)
                if turn:  # the first warms the caches
                    timings[index].append(elapsed)
        medians[label] = [statistics.median(found) for found in timings]
        shown = "  ".join(f"{ms:8.2f} ms" for ms in medians[label])
        ratios = "  ".join(f"{ms / medians[label][0]:5.2f}x" for ms in medians[label][1:])
        print(f"  {shown}  {ratios}  {label}", flush=True)
    if out:
        with open(out, "w") as handle:
            json.dump({"calls": [t.calls for t in targets], "dialect": targets[0].dialect,
                       "medians_ms": medians}, handle, indent=2)  # fmt: skip


def time_ms(client: Any, address: str, auth: dict[str, str]) -> float:
    began = time.perf_counter()
    response = client.get(address, headers=auth)
    elapsed = (time.perf_counter() - began) * 1000
    if response.status_code != 200:
        sys.exit(f"{address}: {response.status_code} {response.get_data(as_text=True)}")
    return elapsed


if __name__ == "__main__":
    main()

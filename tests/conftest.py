"""Shared fixtures: real SQLite and PostgreSQL databases, the real app, real tokens.

A database test runs on SQLite; one marked `both_databases` (the dialect matters: migrations,
locks and claims, constraints, concurrent writes) runs on PostgreSQL too, and so does every
database test under `--databases=both`. With CI=true a service a test needs (PostgreSQL, Redis)
fails the run instead of skipping.
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import ssl
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from api import create_app
from api.services import Services
from relay import naming
from store import nodes
from store.db import make_engine, transaction
from store.migrate import upgrade
from store.models import Base
from store.settings import Settings, normalise_database_url
from store.tokens import Role, create_owner_token, create_token, ensure_owner

IN_CI = os.environ.get("CI", "").lower() == "true"
POSTGRES_URL = os.environ.get("TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def redis_url_of_this_process() -> str:
    """TEST_REDIS_URL (database 15 by default); under `pytest -n`, worker gwN takes the
    database N below it, so runs in parallel never share keys (owner and node ids repeat)."""
    url = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return url
    base, _, db = url.rpartition("/")
    return f"{base}/{(int(db or 0) - int(worker[2:])) % 16}"


REDIS_URL = redis_url_of_this_process()
# An httpx client makes a TLS context of its own unless it is given one: some 25 ms of CPU
# each. The tests' clients speak plain HTTP to loopback servers; they share this one.
TLS = ssl.create_default_context()

# relay/fenced/: each override of a library's internals is on unless SKILLFLEET_FENCED_<NAME>
# is `false` in the tests' environment (`make test-unfenced`); fleets then run without it, and
# a test marked `fenced("<name>")`, which needs it, is expected to fail.
FENCES_OFF = {
    name: False
    for name in ("kombu", "uvicorn")
    if os.environ.get(f"SKILLFLEET_FENCED_{name.upper()}", "true").lower() == "false"
}


def missing_service(what: str) -> None:
    """Skip a test whose service is absent; in CI, fail it."""
    if IN_CI:
        pytest.fail(f"{what} is required in CI (CI=true) but is not reachable.")
    pytest.skip(f"{what} is not reachable")


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    """The test Redis (db 15); missing it skips, or fails in CI."""
    connection = redis.Redis.from_url(REDIS_URL)
    try:
        connection.ping()
    except redis.RedisError:
        missing_service(f"Redis at {REDIS_URL}")
    yield connection
    connection.close()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite database migrated once; each test gets a copy."""
    path = tmp_path_factory.mktemp("template") / "template.db"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[str]:
    """A fresh PostgreSQL database for this test run, migrated once and dropped afterwards."""
    admin_url = normalise_database_url(POSTGRES_URL)
    name = f"skillfleet_test_{uuid.uuid4().hex[:10]}"
    try:
        admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
            # A test database outlives no crash: commits need not wait for the disk.
            connection.execute(text(f'ALTER DATABASE "{name}" SET synchronous_commit TO off'))
    except Exception as e:  # noqa: BLE001 - any failure means "no PostgreSQL here"
        missing_service(f"PostgreSQL at {POSTGRES_URL} ({type(e).__name__})")
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    upgrade(url)
    yield url
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


DIALECTS = ("sqlite", "postgresql")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--databases",
        choices=("dialect", "both"),
        default="dialect",
        help="dialect: SQLite, and PostgreSQL too for tests marked both_databases (default); "
        "both: every database test on SQLite and on PostgreSQL",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Give `database_url` its databases, unless the test names them itself."""
    if "database_url" not in metafunc.fixturenames or _names_database(metafunc.definition):
        return
    both = metafunc.config.getoption("databases") == "both"
    if both or metafunc.definition.get_closest_marker("both_databases"):
        metafunc.parametrize("database_url", DIALECTS, indirect=True)
    else:
        metafunc.parametrize("database_url", DIALECTS[:1], indirect=True)


def _names_database(definition: pytest.Function) -> bool:
    for marker in definition.iter_markers("parametrize"):
        names = marker.args[0]
        if isinstance(names, str):
            names = [name.strip() for name in names.split(",")]
        if "database_url" in names:
            return True
    return False


# The files that take longest, longest first (their tests' times summed from a full run's
# `PYTEST_ARGS=--junitxml=…`, 2026-12-07): they are handed to the test processes first, so that
# none of them is left running one alone at the end while the others are done. The rest follow
# by their number of tests, most first. `--dist loadfile` hands out files in the order collected
# only with `--no-loadscope-reorder` (the Makefile's XDIST): by default xdist orders them by
# number of tests alone, which put most of these last.
LONGEST_FILES = (
    "skillfleet/test_up_lifecycle.py",
    "skillfleet/test_up.py",
    "api/test_openapi_conformance.py",
    "skillfleet/test_operations.py",
    "skillfleet/test_cli.py",
    "console/test_console_owner_actions.py",
    "console/test_console_chat.py",
    "skillfleet/test_walkthrough.py",
    "api/test_live_streams.py",
    "workers/test_reliability.py",
    "skillfleet/test_cli_nodes.py",
    "api/test_run_events.py",
    "console/test_console_pages.py",
    "skillfleet/test_cli_jobs.py",
    "workers/test_traces_fleet.py",
    "api/test_github_signin.py",
    "workers/test_standard_env_fleet.py",
    "workers/test_redis_failover.py",
    "console/test_console.py",
    "skillfleet/test_cli_signing.py",
    "console/test_console_forms.py",
    "skillfleet/test_cli_run.py",
)


def _longest_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """`items` with LONGEST_FILES' first, in that order, then every other file's by its
    number of tests, most first; a file's own tests keep their order."""
    counts = Counter(item.path for item in items)

    def rank(item: pytest.Item) -> tuple[int, int]:
        path = item.path.as_posix()
        known = (n for n, name in enumerate(LONGEST_FILES) if path.endswith("/" + name))
        return next(known, len(LONGEST_FILES)), -counts[item.path]

    return sorted(items, key=rank)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection imported (skillfleet, its libraries, every test module: about 280,000
    objects that live as long as the test process) is left out of garbage collection from here
    on, as a long-running skillfleet process leaves its start-up heap (skillfleet/heap.py), and
    full collections come a tenth as often. A test process's full collections each walked
    650,000 objects or more and took half a second: 17-22 s of each process's time in
    tests/api alone, 5-9 s now (the tests leave more garbage to a full collection, which a
    process that ends in minutes can hold)."""
    gc.freeze()
    young, middle, _full = gc.get_threshold()
    gc.set_threshold(young, middle, 100)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tiers a test reaches through its fixtures: PostgreSQL, the browser, the
    console's fleet; hand out the longest files first."""
    items[:] = _longest_first(items)
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        callspec = getattr(item, "callspec", None)
        on_postgres = callspec is not None and callspec.params.get("database_url") == "postgresql"
        if on_postgres or "postgres_database" in fixtures:
            item.add_marker(pytest.mark.postgres)
        if "browser" in fixtures:
            item.add_marker(pytest.mark.browser)
        if "console" in fixtures:
            item.add_marker(pytest.mark.fleet)
        for mark in item.iter_markers("fenced"):
            if mark.args[0] in FENCES_OFF:
                reason = f"needs relay/fenced/ ({mark.args[0]}), turned off"
                item.add_marker(pytest.mark.xfail(strict=True, reason=reason))


@pytest.fixture
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated database of the test's own: a SQLite file, or PostgreSQL's tables emptied
    after the test (see pytest_generate_tests for which)."""
    if getattr(request, "param", "sqlite") == "sqlite":
        path = tmp_path / "skillfleet.db"
        shutil.copy(request.getfixturevalue("sqlite_template"), path)
        yield f"sqlite:///{path}"
        return
    url = request.getfixturevalue("postgres_database")
    yield url
    engine = make_engine(url)
    tables = ", ".join(f'"{t.name}"' for t in reversed(Base.metadata.sorted_tables))
    with engine.begin() as connection:
        connection.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))
    engine.dispose()


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    """Dry-run settings: broker decisions are real, runs are recorded instead of queued."""
    return Settings(
        data_dir=tmp_path / "var", database_url=database_url, redis_url=REDIS_URL, dry_run=True
    )


def forget_notice_counts(client: redis.Redis) -> None:
    """Owner ids repeat from one test database to the next, while the test Redis keeps each
    owner's notice counts for an hour (relay/notices.py): a new database starts with none."""
    with contextlib.suppress(redis.RedisError):  # no Redis: the test skips, or fails in CI
        # In pages of 1,000: the test Redis holds thousands of keys, and Redis's default page
        # of 10 made this a few hundred round trips for every test that builds services.
        found = list(client.scan_iter(f"{naming.PREFIX}:owner:*:notices:*", count=1000))
        if found:
            client.delete(*found)


@pytest.fixture
def services(settings: Settings) -> Iterator[Services]:
    built = Services.build(settings)
    forget_notice_counts(built.redis)
    yield built
    built.engine.dispose()


@pytest.fixture
def live_redis(services: Services) -> Iterator[redis.Redis]:
    """The services' Redis, known to answer (else the test is skipped, or fails in CI)."""
    try:
        services.redis.ping()
    except redis.RedisError:
        missing_service(f"Redis at {REDIS_URL}")
    yield services.redis


@pytest.fixture
def app(services: Services) -> Flask:
    return create_app(services=services)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


# The nodes an operator registered for alice, the owner `auth` stands for: her node skills and
# commands name them (a node of no owner, or of another, is refused as unknown).
ALICES_NODES = ("web01", "web02", "db01", "lucialab01", "local", "a", "b", "n", "x")


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A folder every run's uid may read and write (a test's tmp_path is closed to others), as
    a node's operator opens a scratch folder to skill runs."""
    folder = Path(tempfile.mkdtemp(prefix="skillfleet-test-scratch-"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def shared_file(path: Path) -> Path:
    """`path`, made empty and writable by every run's uid (runs of several uids append to it)."""
    path.write_bytes(b"")
    path.chmod(0o666)
    return path


def offer_node(services: Services, node: str, owner: str = "alice") -> None:
    """Register `node` for `owner` (made if new), as an operator does with `skillfleet nodes
    add`."""
    with transaction(services.sessions) as session:
        ensure_owner(session, owner)
        nodes.register(session, node, owner)


@pytest.fixture
def token(services: Services) -> str:
    with transaction(services.sessions) as session:
        issued = create_owner_token(session, "alice")
        for node in ALICES_NODES:
            nodes.register(session, node, "alice")
        return issued


@pytest.fixture
def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def other_auth(services: Services) -> dict[str, str]:
    with transaction(services.sessions) as session:
        return {"Authorization": f"Bearer {create_owner_token(session, 'bob')}"}


@pytest.fixture
def agent_token(services: Services, token: str) -> str:
    """An agent token of alice, the owner `auth` stands for."""
    with transaction(services.sessions) as session:
        return create_token(session, "alice", Role.AGENT, label="alice's agent")


@pytest.fixture
def agent_auth(agent_token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {agent_token}"}


# A destructive node skill: every call of it in a chat waits for the owner.
WIPE = {"skillfleet.tier": "destructive", "skillfleet.execution": "node"}


@pytest.fixture
def wiper(client: FlaskClient, auth: dict[str, str]) -> dict[str, object]:
    """The owner's `wiper` skill, imported through the API (test modules may define their own)."""
    import io

    from factories import skill_files, zip_bytes

    files = skill_files("wiper", metadata=WIPE)
    files["scripts/wipe.sh"] = b'#!/bin/bash\necho wiping "$SKILLFLEET_ARGS"\n'
    response = client.post(
        "/api/skills",
        headers=auth,
        data={"file": (io.BytesIO(zip_bytes(files, top="wiper")), "s.zip")},
        content_type="multipart/form-data",
    )
    assert response.status_code == 201, response.json
    return dict(response.json)

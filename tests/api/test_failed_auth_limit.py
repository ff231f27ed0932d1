"""Wrong tokens are limited per client address: past the limit, the address gets 429 with
Retry-After before any token of its is checked, every other address goes on as before, and the
window's end lets it in again. A valid token pays no Redis command for the check.

Each test speaks from addresses of its own (Redis, where failures are counted, outlives a test).
"""

from __future__ import annotations

import random
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis
from conftest import REDIS_URL
from flask.testing import FlaskClient
from fleet import LiveServer

from api import create_app
from api.auth import client_address
from api.mcp.http import WHAT_TO_SEND
from api.services import Services
from relay import lockouts, naming
from store.db import transaction
from store.settings import Settings, SettingsError
from store.tokens import create_owner_token

LIMIT = 3
WINDOW = 2  # seconds: short, so that a test can wait for its end
WRONG = {"Authorization": "Bearer sf_not-a-token-of-anyone"}


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    return Settings(
        data_dir=tmp_path / "var", database_url=database_url, redis_url=REDIS_URL, dry_run=True,
        auth_failures=LIMIT, auth_failure_window=WINDOW,
    )  # fmt: skip


_used: set[str] = set()


def an_address() -> str:
    """A client address no other test of this run speaks from (198.18.0.0/15, for tests)."""
    while True:
        address = (
            f"198.{random.randrange(18, 20)}.{random.randrange(256)}.{random.randrange(1, 255)}"
        )
        if address not in _used:
            _used.add(address)
            return address


def client_from(app, address: str, **environ: str) -> FlaskClient:
    client: FlaskClient = app.test_client()
    client.environ_base.update({"REMOTE_ADDR": address, **environ})
    return client


def until(predicate: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"waited {seconds} s for {what}"
        time.sleep(0.05)


def test_wrong_tokens_get_401_until_the_limit_then_429_even_for_a_valid_token(app, auth):
    guesser = client_from(app, an_address())

    answers = [guesser.get("/api/skills", headers=WRONG) for _ in range(LIMIT + 1)]
    valid = guesser.get("/api/skills", headers=auth)

    assert [a.status_code for a in answers] == [401] * LIMIT + [429]
    refused = answers[-1]
    assert refused.json["code"] == "too_many_failed_logins" and refused.json["status"] == 429
    assert 1 <= int(refused.headers["Retry-After"]) <= WINDOW
    assert f"try again in {refused.headers['Retry-After']} seconds" in refused.json["message"]
    # Refused before its token is checked: a valid token from there is refused all the same.
    assert valid.status_code == 429 and valid.json["code"] == "too_many_failed_logins"
    nothing = guesser.get("/api/skills")  # no token at all
    assert nothing.status_code == 429


def test_other_addresses_go_on_while_one_is_locked_out(app, auth):
    guesser, other = client_from(app, an_address()), client_from(app, an_address())
    for _ in range(LIMIT):
        guesser.get("/api/skills", headers=WRONG)
    assert guesser.get("/api/skills", headers=auth).status_code == 429

    assert other.get("/api/skills", headers=auth).status_code == 200
    assert other.get("/api/skills", headers=WRONG).status_code == 401  # a count of its own


def test_the_address_is_let_in_again_once_the_window_has_passed(app, auth):
    guesser = client_from(app, an_address())
    for _ in range(LIMIT):
        assert guesser.get("/api/skills", headers=WRONG).status_code == 401
    assert guesser.get("/api/skills", headers=auth).status_code == 429

    until(
        lambda: guesser.get("/api/skills", headers=auth).status_code != 429,
        WINDOW + 5,
        "the window to pass",
    )
    assert guesser.get("/api/skills", headers=auth).status_code == 200
    # A new window: the address has its whole allowance again.
    assert [guesser.get("/api/skills", headers=WRONG).status_code for _ in range(LIMIT)] == (
        [401] * LIMIT
    )
    assert guesser.get("/api/skills", headers=auth).status_code == 429


def test_a_lockout_reaches_every_api_process(services, settings, auth):
    """Two apps stand for two API processes: one counts the failures, the other refuses."""
    address = an_address()
    counting, refusing = create_app(services=services), create_app(services=services)
    assert client_from(refusing, address).get("/api/skills", headers=auth).status_code == 200
    guesser = client_from(counting, address)
    for _ in range(LIMIT):
        assert guesser.get("/api/skills", headers=WRONG).status_code == 401

    answer = client_from(refusing, address).get("/api/skills", headers=auth)

    assert answer.status_code == 429 and answer.json["code"] == "too_many_failed_logins"


def test_behind_a_trusted_proxy_the_forwarded_address_is_counted(services, settings, auth):
    behind = create_app(services=Services.build(settings.with_overrides(trusted_proxies=1)))
    proxy = an_address()
    guesser, neighbour = an_address(), an_address()
    forwarded = "HTTP_X_FORWARDED_FOR"
    through = client_from(behind, proxy, **{forwarded: f"{an_address()}, {guesser}"})
    for _ in range(LIMIT):
        through.get("/api/skills", headers=WRONG)

    assert through.get("/api/skills", headers=auth).status_code == 429
    neighbours = client_from(behind, proxy, **{forwarded: neighbour})
    assert neighbours.get("/api/skills", headers=auth).status_code == 200


def test_the_client_address_comes_from_x_forwarded_for_only_behind_trusted_proxies():
    environ = {"REMOTE_ADDR": "10.0.0.5", "HTTP_X_FORWARDED_FOR": "6.6.6.6, 1.2.3.4, 10.0.0.9"}

    assert client_address(environ, 0) == "10.0.0.5"  # a header anyone can send
    assert client_address(environ, 1) == "10.0.0.9"
    assert client_address(environ, 2) == "1.2.3.4"
    assert client_address(environ, 4) == "10.0.0.5"  # fewer hops than proxies: the peer
    assert client_address({"REMOTE_ADDR": "10.0.0.5"}, 1) == "10.0.0.5"


def test_ipv6_clients_count_by_their_64_and_loopback_is_never_counted():
    assert lockouts.counted_as("2001:db8:1:2:aaaa::1") == "2001:db8:1:2::/64"
    assert lockouts.counted_as("2001:db8:1:2:bbbb::9") == "2001:db8:1:2::/64"
    assert lockouts.counted_as("::ffff:198.51.100.7") == "198.51.100.7"
    assert lockouts.counted_as("198.51.100.7") == "198.51.100.7"
    for here in ("127.0.0.1", "127.8.0.1", "::1", "::ffff:127.0.0.1"):
        assert lockouts.counted_as(here) is None


def test_wrong_tokens_from_loopback_are_never_locked_out(app, auth):
    local = client_from(app, "127.0.0.1")

    assert [local.get("/api/skills", headers=WRONG).status_code for _ in range(LIMIT + 2)] == (
        [401] * (LIMIT + 2)
    )
    assert local.get("/api/skills", headers=auth).status_code == 200


def test_tokens_reach_neither_the_logs_nor_the_metrics(app, auth, capfd):
    guesser = client_from(app, an_address())
    guesses = [f"sf_guess-{n}-{random.randrange(10**9)}" for n in range(LIMIT + 1)]
    for guess in guesses:
        guesser.get("/api/skills", headers={"Authorization": f"Bearer {guess}"})

    metrics = app.test_client().get("/metrics").get_data(as_text=True)
    logged = "".join(capfd.readouterr())
    assert re.search(r'skillfleet_failed_logins_total\{outcome="refused"\} [1-9]', metrics)
    assert re.search(r'skillfleet_failed_logins_total\{outcome="locked"\} [1-9]', metrics)
    assert "address locked out after wrong tokens" in logged
    for guess in guesses:
        assert guess not in metrics and guess not in logged
        assert guess.removeprefix("sf_") not in logged
    assert auth["Authorization"].removeprefix("Bearer ") not in logged


def test_the_limit_s_settings_are_read_and_checked():
    env = {"SKILLFLEET_AUTH_FAILURES": "5", "SKILLFLEET_AUTH_FAILURE_WINDOW": "30"}
    read = Settings.from_env({**env, "SKILLFLEET_TRUSTED_PROXIES": "1"})

    assert (read.auth_failures, read.auth_failure_window, read.trusted_proxies) == (5, 30, 1)
    default = Settings.from_env({})
    assert (default.auth_failures, default.auth_failure_window) == (20, 60)
    assert default.trusted_proxies == 0
    for name, value in (
        ("SKILLFLEET_AUTH_FAILURE_WINDOW", "0"),
        ("SKILLFLEET_AUTH_FAILURES", "-1"),
        ("SKILLFLEET_TRUSTED_PROXIES", "-1"),
    ):
        with pytest.raises(SettingsError, match=name):
            Settings.from_env({name: value})


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[str]:
    """A redis-server of this test's own, so that its command counts are the test's alone."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"
    try:
        until(lambda: _answers(url), 10, "redis-server to answer")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def _answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url).ping())
    except redis.ConnectionError:
        return False


def commands(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(stat["calls"]) for name, stat in stats.items()}


def test_a_valid_token_pays_no_redis_command_for_the_limit(tmp_path, database_url, own_redis):
    settings = Settings(
        data_dir=tmp_path / "var", database_url=database_url, redis_url=own_redis, dry_run=True,
        auth_failures=LIMIT, auth_failure_window=WINDOW,
    )  # fmt: skip
    services = Services.build(settings)
    try:
        with transaction(services.sessions) as session:
            auth = {"Authorization": f"Bearer {create_owner_token(session, 'alice')}"}
        app = create_app(services=services)
        caller, guesser = client_from(app, an_address()), client_from(app, an_address())
        watcher = redis.Redis.from_url(own_redis)

        def live() -> bool:  # the token is cached, the generations are read from memory
            asked = services.generations.asked
            return caller.get("/api/tokens", headers=auth).status_code == 200 and (
                services.generations.asked == asked
            )

        until(live, 10, "the generation watch to go live")
        before = commands(watcher)
        assert all(caller.get("/api/tokens", headers=auth).status_code == 200 for _ in range(20))
        during = {k: v - before.get(k, 0) for k, v in commands(watcher).items()}

        # Another address is locked out: every process reads the lockouts once, then not again.
        for _ in range(LIMIT):
            guesser.get("/api/tokens", headers=WRONG)
        caller.get("/api/tokens", headers=auth)
        before = commands(watcher)
        assert all(caller.get("/api/tokens", headers=auth).status_code == 200 for _ in range(20))
        after = {k: v - before.get(k, 0) for k, v in commands(watcher).items()}
    finally:
        services.engine.dispose()
    # What may run meanwhile is the watch's own keepalive (and this test's INFO), no more.
    assert {name for name, calls in during.items() if calls} <= {"info", "ping", "mget"}
    assert {name for name, calls in after.items() if calls} <= {"info", "ping", "mget"}


# --- /mcp: its wrong tokens count as the REST routes' do, once a request ---------------------

MCP_MESSAGES = {
    "initialize": {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "curl", "version": "1"},
        },
    },
    "tools/list": {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
    "tools/call": {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "list_skills", "arguments": {}},
    },
}


@pytest.fixture
def behind_a_proxy(services: Services, settings: Settings) -> Iterator[LiveServer]:
    """The API served over HTTP (/mcp is ASGI's), reading clients from X-Forwarded-For."""
    behind = create_app(services=Services.build(settings.with_overrides(trusted_proxies=1)))
    server = LiveServer(behind)
    yield server
    server.stop()


@pytest.mark.parametrize("method", MCP_MESSAGES)
def test_a_wrong_token_at_mcp_counts_once_against_its_address(behind_a_proxy, live_redis, method):
    address = an_address()
    headers = {
        **WRONG,
        "X-Forwarded-For": address,
        "Accept": "application/json, text/event-stream",
    }

    answer = httpx.post(
        f"{behind_a_proxy.url}/mcp", json=MCP_MESSAGES[method], headers=headers, timeout=30
    )

    assert answer.status_code == 401 and answer.headers["WWW-Authenticate"] == "Bearer"
    assert answer.json() == {
        "code": "unauthorized",
        "status": 401,
        "message": f"The bearer token is not valid. {WHAT_TO_SEND}",
    }
    assert live_redis.get(naming.failed_logins(address)) == b"1"

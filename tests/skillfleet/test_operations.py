"""Operators' commands, run as an operator would: enrolment, the schema, Flower, settings, logs."""

from __future__ import annotations

import json
import logging
import re
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import structlog
from conftest import REDIS_URL
from fleet import Fleet, fleet, wait_until
from test_up import SKILLFLEET, clean_env, free_port

from skillfleet.flower import credentials
from store.logs import configure_logging
from store.models import Node
from store.settings import Settings, SettingsError
from store.signing import public_key_text, verify_manifest

CLI_LIMIT = 60.0


@pytest.fixture
def api(settings: Settings) -> Iterator[Fleet]:
    with fleet(settings) as running:
        yield running


def skillfleet(settings: Settings, *args: str, **values: str) -> subprocess.CompletedProcess[str]:
    env = clean_env(
        DATABASE_URL=settings.database, SKILLFLEET_DATA_DIR=str(settings.data_dir), **values
    )
    return subprocess.run(
        [SKILLFLEET, *args], env=env, capture_output=True, text=True, timeout=CLI_LIMIT
    )


def manifest_status(api: Fleet, node: str, token: str) -> int:
    with api.http() as client:
        answer = client.get(
            f"/api/nodes/{node}/manifest", headers={"Authorization": f"Bearer {token}"}
        )
    if answer.status_code == 200:
        verify_manifest(public_key_text(api.services.signing_key), answer.json())
    return answer.status_code


# -- skillfleet nodes enroll ------------------------------------------------------------------


def test_nodes_enroll_writes_a_private_token_file_and_keeps_it_when_run_again(
    api, settings, tmp_path
):
    token_file = tmp_path / "secrets" / "edge1.token"

    owner = ("--owner", api.owner_name)
    first = skillfleet(
        settings, "nodes", "enroll", "edge1", *owner, "--token-file", str(token_file)
    )
    token = token_file.read_text().strip()
    # An unattended step runs the same line again; a registered node needs no --owner.
    again = skillfleet(settings, "nodes", "enroll", "edge1", "--token-file", str(token_file))

    assert first.returncode == 0 and again.returncode == 0, first.stderr + again.stderr
    assert token not in first.stdout + first.stderr  # written, never printed
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert token_file.read_text().strip() == token
    assert "edge1.token is valid" in again.stderr
    assert manifest_status(api, "edge1", token) == 200
    with api.services.sessions() as session:
        assert session.get(Node, "edge1") is not None


def test_nodes_enroll_replaces_a_token_file_that_no_longer_authenticates(api, settings, tmp_path):
    token_file = tmp_path / "edge2.token"
    token_file.write_text("sf_revoked-or-from-another-database\n")

    result = skillfleet(
        settings, "nodes", "enroll", "edge2", "--owner", api.owner_name,
        "--token-file", str(token_file),
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    token = token_file.read_text().strip()
    assert token != "sf_revoked-or-from-another-database"
    assert manifest_status(api, "edge2", token) == 200


def test_nodes_enroll_of_a_registered_node_prints_a_new_token_once(api, settings):
    assert skillfleet(settings, "nodes", "add", "web01", "--owner", api.owner_name).returncode == 0

    result = skillfleet(settings, "nodes", "enroll", "web01")

    assert result.returncode == 0, result.stderr
    token = result.stdout.strip()
    assert len(result.stdout.strip().splitlines()) == 1
    assert manifest_status(api, "web01", token) == 200


def test_nodes_enroll_of_a_new_node_needs_its_owner_and_registers_nothing_without(api, settings):
    result = skillfleet(settings, "nodes", "enroll", "edge3")

    assert result.returncode == 1
    assert "'edge3' is new: name its owner with --owner." in result.stderr
    assert "sf_" not in result.stdout
    with api.services.sessions() as session:
        assert session.get(Node, "edge3") is None


def test_nodes_enroll_refuses_a_bad_name_and_registers_nothing(api, settings):
    result = skillfleet(settings, "nodes", "enroll", "Bad_Name")

    assert result.returncode == 1
    assert "A node name is 1-64 characters" in result.stderr
    with api.services.sessions() as session:
        assert session.get(Node, "Bad_Name") is None


# -- skillfleet db current|history|downgrade ------------------------------------------------


@pytest.mark.slow
def test_db_current_history_and_downgrade_answer_as_alembic_does(tmp_path):
    settings = Settings(data_dir=tmp_path / "var")
    settings.data_dir.mkdir()

    empty = skillfleet(settings, "db", "current")
    upgraded = skillfleet(settings, "db", "upgrade")
    current = skillfleet(settings, "db", "current")
    history = skillfleet(settings, "db", "history")

    assert empty.returncode == 0 and "empty" in empty.stdout
    assert upgraded.returncode == 0, upgraded.stderr
    head = current.stdout.strip()
    lines = history.stdout.strip().splitlines()
    assert lines[0].startswith(head) and lines[0].endswith("<- database")
    assert len(lines) >= 2 and not any(line.endswith("<- database") for line in lines[1:])
    previous = lines[1].split()[0]

    refused = skillfleet(settings, "db", "downgrade", "-1", input="n\n")
    assert refused.returncode == 1 and skillfleet(settings, "db", "current").stdout.strip() == head

    down = skillfleet(settings, "db", "downgrade", "-1", "--yes")
    assert down.returncode == 0, down.stderr
    assert skillfleet(settings, "db", "current").stdout.strip() == previous
    unknown = skillfleet(settings, "db", "downgrade", "no-such-revision", "--yes")
    assert unknown.returncode == 1 and "Error" in unknown.stderr


# -- settings from a secrets volume ---------------------------------------------------------


def test_secrets_are_read_from_files_and_an_unreadable_one_is_named(tmp_path):
    token_file = tmp_path / "node.token"
    token_file.write_text("sf_from-a-file\n")
    key_file = tmp_path / "manifest.key"
    key_file.write_text("a2V5\n")

    settings = Settings.from_env(
        {
            "SKILLFLEET_NODE_TOKEN_FILE": str(token_file),
            "SKILLFLEET_MANIFEST_KEY_FILE": str(key_file),
        }
    )
    direct = Settings.from_env(
        {"SKILLFLEET_NODE_TOKEN": "sf_direct", "SKILLFLEET_NODE_TOKEN_FILE": str(token_file)}
    )

    assert (settings.node_token, settings.manifest_public_key) == ("sf_from-a-file", "a2V5")
    assert direct.node_token == "sf_direct"
    with pytest.raises(SettingsError, match="SKILLFLEET_NODE_TOKEN_FILE names .*missing"):
        Settings.from_env({"SKILLFLEET_NODE_TOKEN_FILE": str(tmp_path / "missing")})


# -- Flower ------------------------------------------------------------------------------


def test_flower_credentials_are_generated_once_and_kept_private(tmp_path):
    settings = Settings(data_dir=tmp_path / "var")

    user, password = credentials(settings)

    assert user == "admin" and len(password) >= 20
    assert credentials(settings) == (user, password)
    assert stat.S_IMODE(settings.flower_password_file.stat().st_mode) == 0o600
    chosen = settings.with_overrides(flower_user="ops", flower_password="pw-from-env")
    assert credentials(chosen) == ("ops", "pw-from-env")


def test_flower_listens_on_loopback_even_when_the_api_listens_everywhere():
    wide = Settings.from_env({"SKILLFLEET_HOST": "0.0.0.0"})
    chosen = Settings.from_env(
        {"SKILLFLEET_FLOWER_HOST": "0.0.0.0", "SKILLFLEET_FLOWER_PORT": "6000"}
    )

    assert (wide.flower_host, wide.flower_port) == ("127.0.0.1", 5555)
    assert (chosen.flower_host, chosen.flower_port) == ("0.0.0.0", 6000)


@pytest.mark.fleet
def test_flower_answers_401_without_credentials_and_lists_a_worker_with_them(tmp_path):
    port = free_port()
    data_dir = tmp_path / "var"
    env = clean_env(
        REDIS_URL=REDIS_URL,
        SKILLFLEET_DATA_DIR=str(data_dir),
        SKILLFLEET_FLOWER_PORT=str(port),
        SKILLFLEET_FLOWER_PASSWORD="flower-test-password",
    )
    log = open(tmp_path / "flower.log", "wb")  # noqa: SIM115 - closed below
    flower = subprocess.Popen([SKILLFLEET, "flower"], env=env, stdout=log, stderr=log)
    control = subprocess.Popen([SKILLFLEET, "worker", "control"], env=env, stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _status(url + "/api/workers") == 401, 90, "Flower to answer")
        auth = ("admin", "flower-test-password")
        wrong = httpx.get(url + "/api/workers", auth=("admin", "wrong"), timeout=10)

        def listed() -> dict[str, object] | None:
            found = httpx.get(url + "/api/workers?refresh=1", auth=auth, timeout=30).json()
            return found if any(name.startswith("control-") for name in found) else None

        workers = wait_until(listed, 60, "Flower to list the control worker", every=1)
    finally:
        for process in (flower, control):
            process.terminate()
        for process in (flower, control):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:  # Flower can hang on its way out; a control
                process.kill()  # worker left behind would take the later tests' tasks
                process.wait()
        log.close()
    assert wrong.status_code == 401
    assert any(name.startswith("control-") for name in workers)
    command = (tmp_path / "flower.log").read_text(errors="replace")
    assert "flower-test-password" not in command


@pytest.mark.fleet
@pytest.mark.parametrize("module", ["workers.app", "relay.app"])
def test_celery_inspect_ping_answers_for_a_running_worker(tmp_path, module):
    env = clean_env(REDIS_URL=REDIS_URL, SKILLFLEET_DATA_DIR=str(tmp_path / "var"))
    log = open(tmp_path / "control.log", "wb")  # noqa: SIM115 - closed below
    control = subprocess.Popen([SKILLFLEET, "worker", "control"], env=env, stdout=log, stderr=log)
    celery = str(Path(SKILLFLEET).with_name("celery"))

    def pong() -> str | None:
        # inspect waits out its whole --timeout for replies; a ready worker's comes at once.
        answer = subprocess.run(
            [celery, "-A", module, "inspect", "ping", "--timeout", "2"], env=env,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        return answer.stdout if re.search(r"control-\S+: OK\s+pong", answer.stdout) else None

    def ready() -> bool:
        return " ready." in (tmp_path / "control.log").read_text(errors="replace")

    try:
        wait_until(ready, 90, "the control worker to say it is ready", every=0.2)
        output = wait_until(pong, 60, f"`celery -A {module} inspect ping` to answer", every=1)
    finally:
        control.terminate()
        control.wait(timeout=20)
        log.close()
    assert "1 node online" in output or "nodes online" in output, output


def _status(url: str) -> int:
    try:
        return httpx.get(url, timeout=2).status_code
    except httpx.HTTPError:
        return 0


# -- JSON logs ---------------------------------------------------------------------------


def test_log_lines_are_json_with_the_bound_ids(capsys):
    configure_logging("info", "json")
    try:
        with structlog.contextvars.bound_contextvars(run_id="run-1", call_id="call-1"):
            structlog.get_logger("test").info("run ended", status="succeeded")
    finally:
        configure_logging("info", "console")
    out = capsys.readouterr().out
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    (line,) = [entry for entry in lines if entry.get("event") == "run ended"]
    assert (line["run_id"], line["call_id"], line["status"]) == ("run-1", "call-1", "succeeded")
    assert line["level"] == "info" and "ts" in line


def test_celery_per_task_lines_are_quiet_unless_debugging():
    celery_lines = ("celery.app.trace", "celery.worker.strategy")
    try:
        configure_logging("info", "json")
        assert {logging.getLogger(n).getEffectiveLevel() for n in celery_lines} == {logging.WARNING}
        configure_logging("debug", "json")
        assert {logging.getLogger(n).getEffectiveLevel() for n in celery_lines} == {logging.DEBUG}
    finally:
        configure_logging("info", "console")

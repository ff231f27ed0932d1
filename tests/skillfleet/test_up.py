"""`skillfleet up` for real: the API on SQLite with an embedded Redis, started and stopped.

Each test starts the installed console script as its own process group, so a SIGINT sent to
the group is what Ctrl-C in a terminal does.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from factories import skill_files, skill_md, write_skill, zip_bytes

pytestmark = pytest.mark.fleet

SKILLFLEET = str(Path(sys.executable).parent / "skillfleet")
HOST = "127.0.0.1"
# A start on a loaded machine (the suite starts several side by side) can take a minute.
START_LIMIT = 120.0
STOP_LIMIT = 20.0
REFUSAL_LIMIT = 90.0  # a refused start-up ends by itself, well before this, even loaded
TOKEN_LINE = re.compile(r"^\s*owner token: (\S+)\s*$")
AGENT_TOKEN_LINE = re.compile(r"^\s*agent token: (\S+)\s*$")
EXPORT_LINE = re.compile(r"^\s*export SKILLFLEET_URL=")
# Variables of the developer's shell that would point a test at another database or server.
CLEARED = (
    "DATABASE_URL",
    "REDIS_URL",
    "SKILLFLEET_BOOTSTRAP_TOKEN",
    "SKILLFLEET_CONFIG",
    "SKILLFLEET_HOST",
    "SKILLFLEET_POLICY",
    "SKILLFLEET_TOKEN",
    "SKILLFLEET_URL",
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def clean_env(**values: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in CLEARED}
    env.update(values)
    return env


def up_env(data_dir: Path, port: int, **values: str) -> dict[str, str]:
    # Flower's own port too: `skillfleet up`s running side by side must not share 5555.
    values.setdefault("SKILLFLEET_FLOWER_PORT", str(free_port()))
    return clean_env(SKILLFLEET_DATA_DIR=str(data_dir), SKILLFLEET_PORT=str(port), **values)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex((HOST, port)) == 0


def processes_mentioning(*needles: str) -> dict[int, str]:
    """Live processes (zombies have no command line) whose command line holds a needle."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # it ended while we looked
        if any(needle in command for needle in needles):
            found[int(entry.name)] = command
    return found


class Running:
    """A `skillfleet up` process whose stdout is read line by line by a thread."""

    def __init__(self, data_dir: Path, port: int, env: dict[str, str], log: Path) -> None:
        self.data_dir = data_dir
        self.port = port
        self.flower_port = int(env["SKILLFLEET_FLOWER_PORT"])
        self.url = f"http://{HOST}:{port}"
        self.log = log
        self.lines: list[str] = []
        self.token = ""
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._stderr = log.open("w")
        self.process = subprocess.Popen(
            [SKILLFLEET, "up"],
            env=env,
            cwd=data_dir.parent,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            start_new_session=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def read_until(self, pattern: re.Pattern[str], limit: float = START_LIMIT) -> re.Match[str]:
        """Read stdout until a line matches; fail with everything printed when it never does."""
        deadline = time.monotonic() + limit
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            self.lines.append(line)
            if found := pattern.search(line):
                return found
        pytest.fail(f"`skillfleet up` never printed {pattern.pattern!r}.\n{self.transcript()}")

    def wait_for_token(self) -> str:
        """Read stdout until the owner token line; the token (also kept as `self.token`)."""
        self.token = self.read_until(TOKEN_LINE).group(1)
        return self.token

    def rest_of_output(self) -> list[str]:
        """Every line still to come; call once the process has ended."""
        rest = []
        while (line := self._queue.get(timeout=STOP_LIMIT)) is not None:
            rest.append(line)
        self.lines += rest
        return rest

    def transcript(self) -> str:
        stdout = "\n".join(self.lines)
        return f"stdout:\n{stdout}\nstderr:\n{self.log.read_text()}"

    def ctrl_c(self) -> int:
        """Send SIGINT to the whole process group, as a terminal does; the exit status."""
        os.killpg(self.process.pid, signal.SIGINT)
        return self.wait()

    def wait(self) -> int:
        try:
            return self.process.wait(timeout=STOP_LIMIT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"`skillfleet up` did not stop within {STOP_LIMIT:.0f} s.")

    def leftovers(self) -> dict[int, str]:
        return processes_mentioning(str(self.data_dir.resolve()), f"{HOST}:{self.port}")

    def close(self) -> None:
        """Make sure nothing outlives the test, whatever it asserted.

        Redis runs as a daemon in its own session, out of reach of a signal to the group:
        stop `skillfleet up` the way a user does, and kill by id whatever is left.
        """
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(timeout=STOP_LIMIT)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        for pid in self.leftovers():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._stderr.close()


@contextlib.contextmanager
def starting(tmp_path: Path) -> Iterator[Callable[..., Running]]:
    """Start `skillfleet up` on tmp_path/var with extra environment; killed at the end."""
    started: list[Running] = []

    def start_up(**values: str) -> Running:
        data_dir = tmp_path / "var"
        port = free_port()
        log = tmp_path / f"stderr-{len(started)}.log"
        started.append(Running(data_dir, port, up_env(data_dir, port, **values), log))
        return started[-1]

    try:
        yield start_up
    finally:
        for running in started:
            running.close()


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Running]]:
    with starting(tmp_path) as start_up:
        yield start_up


def shared_start(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """One `skillfleet up` with the default configuration, its whole banner read, for a
    module's tests to share (each start costs a dozen processes); stopped at the end."""
    with starting(tmp_path_factory.mktemp("up")) as start_up:
        running = start_up()
        running.wait_for_token()
        running.read_until(EXPORT_LINE)
        yield running


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """For the tests that only look at the banner and call the system."""
    yield from shared_start(tmp_path_factory)


def banner_match(up: Running, pattern: re.Pattern[str]) -> re.Match[str]:
    """The banner's line that matches `pattern` (the `up` fixture read the whole banner)."""
    found = next((m for line in up.lines if (m := pattern.search(line))), None)
    assert found is not None, up.transcript()
    return found


def run_up_to_failure(tmp_path: Path, config: Path) -> subprocess.CompletedProcess[str]:
    """Run `skillfleet up` with `config`, expecting it to stop by itself."""
    port = free_port()
    env = up_env(tmp_path / "var", port, SKILLFLEET_CONFIG=str(config))
    result = subprocess.run(
        [SKILLFLEET, "up"], env=env, capture_output=True, text=True, timeout=REFUSAL_LIMIT
    )
    assert not listening(port)
    assert processes_mentioning(str((tmp_path / "var").resolve()), f"{HOST}:{port}") == {}
    return result


def write_config(path: Path, *skill_paths: Path) -> Path:
    lines = ["skills:", "  paths:"] + [f"    - {p}" for p in skill_paths]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_up_prints_the_url_docs_and_token_and_serves_the_api_with_embedded_redis(
    up: Running,
) -> None:
    token = up.token
    assert f"skillfleet is running on {up.url}" in up.lines
    assert f"  API docs:    {up.url}/api/docs" in up.lines
    mcp_line = f"  MCP:         {up.url}/mcp (the agent token; or `skillfleet mcp` on stdio)"
    assert mcp_line in up.lines
    assert f"  console:     {up.url}/" in up.lines
    assert token.startswith("sf_")

    health = httpx.get(f"{up.url}/api/health", timeout=10)
    assert health.status_code == 200
    # The MCP line's URL answers there, and asks for a token.
    mcp = httpx.post(f"{up.url}/mcp", json={}, timeout=10)
    assert mcp.status_code == 401 and mcp.headers["www-authenticate"].startswith("Bearer")
    assert health.json() == {"status": "ok", "database": "sqlite", "redis": "ok"}
    assert httpx.get(f"{up.url}/api/docs", timeout=10).status_code == 200
    console = httpx.get(f"{up.url}/", timeout=10)
    assert console.status_code == 200 and "/console/app.js" in console.text

    anonymous = httpx.get(f"{up.url}/api/skills", timeout=10)
    assert anonymous.status_code == 401
    assert anonymous.json()["code"] == "unauthorized"
    listed = httpx.get(f"{up.url}/api/skills", headers=bearer(token), timeout=10)
    assert listed.status_code == 200
    assert "skill-authoring" in [skill["name"] for skill in listed.json()]

    assert (up.data_dir / "skillfleet.db").is_file()
    assert stat.S_ISSOCK((up.data_dir / "redis.socket").stat().st_mode)
    # A first start warns of nothing: Redis runs before the skills index is first written.
    assert up.log.read_text() == "", up.transcript()


def test_up_prints_an_agent_token_that_calls_tools_but_cannot_answer_approvals(
    up: Running,
) -> None:
    owner = up.token
    agent = banner_match(up, AGENT_TOKEN_LINE).group(1)
    assert agent.startswith("sf_") and agent != owner
    after = up.lines[up.lines.index(banner_match(up, AGENT_TOKEN_LINE).string) :]
    assert any("Give agents the agent" in line for line in after)

    called = httpx.post(
        f"{up.url}/api/tools/list_skills", headers=bearer(agent), json={}, timeout=10
    )
    assert called.status_code == 200 and called.json()["status"] == "done"
    answer = httpx.post(
        f"{up.url}/api/approvals/0a0b", headers=bearer(agent), json={"decision": "approve"},
        timeout=10,
    )  # fmt: skip
    assert answer.status_code == 403 and answer.json()["code"] == "owner_only"
    kept = up.data_dir / "agent-token"
    assert kept.read_text().strip() == agent
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600


def test_a_bootstrap_token_from_the_environment_and_a_configured_folder_of_skills_are_served(
    tmp_path: Path, start: Callable[..., Running]
) -> None:
    """One start for both (each start costs a dozen processes): the token the environment
    chose is printed and works, and a folder of two skills is served read-only."""
    chosen = "sf_test_bootstrap_token_for_up"
    shelf = tmp_path / "shelf"
    write_skill(shelf, "disk-report")
    write_skill(shelf, "log-tail")
    config = write_config(tmp_path / "skillfleet.yaml", shelf)
    up = start(SKILLFLEET_BOOTSTRAP_TOKEN=chosen, SKILLFLEET_CONFIG=str(config))

    assert up.wait_for_token() == chosen
    listed = httpx.get(f"{up.url}/api/skills", headers=bearer(chosen), timeout=10)
    assert listed.status_code == 200
    configured = {s["name"]: s for s in listed.json() if s["source"] == "path"}
    assert sorted(configured) == ["disk-report", "log-tail"]
    assert all(skill["read_only"] is True for skill in configured.values())
    assert up.ctrl_c() == 0
    assert not (up.data_dir / "owner-token").exists()


def test_a_missing_configured_path_stops_start_up_naming_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-folder"
    config = write_config(tmp_path / "skillfleet.yaml", missing)

    result = run_up_to_failure(tmp_path, config)

    assert result.returncode != 0
    assert f"Skill path {missing} does not exist." in result.stderr
    assert "owner token" not in result.stdout
    assert "Traceback" not in result.stderr


def test_an_invalid_configured_skill_stops_start_up_naming_the_path_and_problem(
    tmp_path: Path,
) -> None:
    shelf = tmp_path / "shelf"
    files = {"SKILL.md": skill_md("broken").encode(), "scripts/run.py": b"def run(:\n"}
    broken = write_skill(shelf, "broken", files)
    config = write_config(tmp_path / "skillfleet.yaml", shelf)

    result = run_up_to_failure(tmp_path, config)

    assert result.returncode != 0
    assert f"Skill path {broken} is not a valid skill" in result.stderr
    assert "scripts/run.py" in result.stderr
    assert "Traceback" not in result.stderr


def test_two_configured_paths_with_the_same_skill_name_stop_start_up(tmp_path: Path) -> None:
    first = write_skill(tmp_path / "team-a", "disk-report")
    second = write_skill(tmp_path / "team-b", "disk-report")
    config = write_config(tmp_path / "skillfleet.yaml", first.parent, second.parent)

    result = run_up_to_failure(tmp_path, config)

    assert result.returncode != 0
    assert (
        f"Skill path {second} holds a skill named 'disk-report', which {first} already provides."
    ) in result.stderr
    assert "Traceback" not in result.stderr


READ_SCRIPT = {"skillfleet.tier": "read", "skillfleet.execution": "node"}


def import_read_skill(up: Running, name: str, execution: str = "node") -> None:
    files = skill_files(name, metadata={**READ_SCRIPT, "skillfleet.execution": execution})
    response = httpx.post(
        f"{up.url}/api/skills",
        headers=bearer(up.token),
        files={"file": ("s.zip", zip_bytes(files, top=name))},
        timeout=30,
    )
    assert response.status_code == 201, response.text


def run_hello(up: Running, name: str) -> httpx.Response:
    body = {"arguments": {"skill_name": name, "script": "scripts/hello.py", "node": "local"}}
    return httpx.post(
        f"{up.url}/api/tools/run_skill_script",
        params={"wait": 30},
        headers=bearer(up.token),
        json=body,
        timeout=60,
    )


def children_of(pid: int, needle: str) -> list[int]:
    found = []
    for child in processes_mentioning(needle):
        try:
            stat_line = Path(f"/proc/{child}/stat").read_text()
        except (FileNotFoundError, ProcessLookupError):  # it ended since it was listed
            continue
        if int(stat_line.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(child)
    return found


def wait_for_done(call: Callable[[], httpx.Response], limit: float = 60) -> httpx.Response:
    """The restarted worker beats when it is ready; until then calls answer no_runner."""
    deadline = time.monotonic() + limit
    while True:
        answer = call()
        if answer.json().get("status") == "done" or time.monotonic() > deadline:
            assert answer.json()["status"] == "done", answer.text
            return answer
        time.sleep(0.5)


def test_a_busy_port_stops_start_up_with_one_clear_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [SKILLFLEET, "up"],
            env=up_env(tmp_path / "var", port),
            capture_output=True,
            text=True,
            timeout=REFUSAL_LIMIT,
        )

    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"Error: Port {port} on {HOST} is in use (Address already in use); "
        "stop what uses it or choose another with SKILLFLEET_PORT (or --port)."
    ]
    assert "skillfleet is running" not in result.stdout


def wait_until(found: Callable[[], Any], what: str, limit: float = 30) -> Any:
    deadline = time.monotonic() + limit
    while not (value := found()):
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {limit:.0f} s")
        time.sleep(0.1)
    return value


def api_log_lines(up: Running) -> list[dict[str, Any]]:
    path = up.data_dir / "logs" / "api.log"
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text.splitlines() if line.endswith("}")]


def test_the_api_logs_each_request_to_api_log_without_query_values_bodies_or_tokens(
    up: Running,
) -> None:
    token = up.token
    before = len(api_log_lines(up))
    listed = httpx.get(
        f"{up.url}/api/skills", params={"enabled": "true", "access_token": "sf_query_secret"},
        headers=bearer(token), timeout=10,
    )  # fmt: skip
    body = {"arguments": {"query": "body-marker-okapi"}, "chat_id": "log-test"}
    called = httpx.post(
        f"{up.url}/api/tools/list_skills", headers=bearer(token), json=body, timeout=10
    )
    anonymous = httpx.get(f"{up.url}/api/runs", timeout=10)
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "log-test", "version": "1"},
    }
    arguments = {"query": "body-marker-okapi"}
    params = {"name": "list_skills", "arguments": arguments, "_meta": meta}
    mcp_call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    mcp_headers = {**bearer(token), "Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call",
                   "Mcp-Name": "list_skills"}  # fmt: skip
    # Other tests of the module call /mcp too (some refused): this call's line is told by a
    # query name of its own.
    over_mcp = httpx.post(
        f"{up.url}/mcp", params={"log_mark": "1"}, headers=mcp_headers, json=mcp_call, timeout=10
    )

    made = {
        ("GET", "/api/skills"), ("POST", "/api/tools/list_skills"), ("GET", "/api/runs"),
        ("POST", "/mcp"),
    }  # fmt: skip

    def logged() -> list[dict[str, Any]]:
        """The request lines of these four requests, once all four are written (a line
        goes out after its answer; other requests of the fixture's may come before them)."""
        found = [line for line in api_log_lines(up)[before:] if line.get("event") == "request"]
        lines = [
            line for line in found if (line.get("method"), line.get("path")) in made
            and (line["path"] != "/mcp" or "log_mark" in line.get("query", []))
        ]  # fmt: skip
        return lines if {(line["method"], line["path"]) for line in lines} == made else []

    lines = wait_until(logged, "the four requests' lines in api.log")
    by_path = {(line["method"], line["path"]): line for line in lines}
    mcp_line = by_path[("POST", "/mcp")]
    assert mcp_line["status"] == over_mcp.status_code == 200, over_mcp.text
    assert (mcp_line["mcp_method"], mcp_line["mcp_tool"]) == ("tools/call", "list_skills")
    assert "mcp_method" not in by_path[("GET", "/api/skills")]
    skills = by_path[("GET", "/api/skills")]
    assert skills["status"] == listed.status_code
    assert skills["query"] == ["access_token", "enabled"]
    assert by_path[("POST", "/api/tools/list_skills")]["status"] == called.status_code == 200
    assert by_path[("GET", "/api/runs")]["status"] == anonymous.status_code == 401
    for line in lines:
        assert {"ts", "level", "ms", "client"} <= line.keys()
        assert isinstance(line["ms"], float) and line["client"] == HOST
    text = (up.data_dir / "logs" / "api.log").read_text()
    for secret in (token, "sf_query_secret", "body-marker-okapi", "Bearer"):
        assert secret not in text


FLOWER_LINE = re.compile(r"^\s*Flower:\s+(http://127\.0\.0\.1:\d+) \(user (\S+), password (\S+)\)$")


def test_up_starts_flower_on_loopback_behind_the_credentials_it_prints(up: Running) -> None:
    url, user, password = banner_match(up, FLOWER_LINE).groups()
    assert url == f"http://127.0.0.1:{up.flower_port}"
    assert (up.data_dir / "flower-password").read_text().strip() == password

    def refused() -> bool:
        try:
            return httpx.get(url + "/api/workers", timeout=2).status_code == 401
        except httpx.HTTPError:
            return False

    wait_until(refused, "Flower's 401 without credentials", 90)

    def listed() -> list[str] | None:
        found = httpx.get(url + "/api/workers?refresh=1", auth=(user, password), timeout=30)
        names = list(found.json())
        return names if any(name.startswith("node-local-") for name in names) else None

    names = wait_until(listed, "Flower to list the local node's worker", 60)
    assert any(name.startswith("control-") for name in names)


@pytest.mark.skipif(
    os.environ.get("SKILLFLEET_TEST_KVM") == "1", reason="on a KVM host the sandbox worker serves"
)
def test_up_help_names_the_port_and_the_other_start_options() -> None:
    result = subprocess.run([SKILLFLEET, "up", "--help"], capture_output=True, text=True)

    for option in ("SKILLFLEET_PORT", "SKILLFLEET_HOST", "SKILLFLEET_DATA_DIR", "DATABASE_URL",
                   "REDIS_URL", "SKILLFLEET_BOOTSTRAP_TOKEN", "SKILLFLEET_CONFIG"):  # fmt: skip
        assert option in result.stdout

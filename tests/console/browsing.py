"""A real fleet and Debian's Chromium for the console's browser tests.

Playwright drives the system's Chromium (`/usr/bin/chromium`); browsers are never downloaded.
Without it the tests skip, and fail in CI. Test modules import the fixtures from here.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import IN_CI, REDIS_URL
from fleet import Fleet, fleet
from github_standin import serve

from relay import naming
from store.settings import Settings

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
# The console's bar: its first page usable this soon after navigation; approvals this soon.
FIRST_PAGE_MS = 300
NODE = f"c-{uuid.uuid4().hex[:6]}"
APPROVAL_SECONDS = 1.0

CHANGE_NODE = {"skillfleet.tier": "change", "skillfleet.execution": "node"}
READ_NODE = {"skillfleet.tier": "read", "skillfleet.execution": "node"}
TICKER = (
    "import json, os, sys, time\n"
    "args = json.loads(os.environ['SKILLFLEET_ARGS'])\n"
    "for i in range(args.get('count', 3)):\n"
    "    print(f'line {i}', flush=True)\n"
    "    time.sleep(args.get('every', 0))\n"
    "print('done', file=sys.stderr)\n"
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} is missing: install Debian's chromium package"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Fleet]:
    """The API (which serves the console) and one node worker, on SQLite and the test Redis.

    GitHub imports go to the local stand-in for GitHub's API (tests/github_standin.py).
    """
    root = tmp_path_factory.mktemp("console")
    database = root / "skillfleet.db"
    shutil.copy(sqlite_template, database)
    with serve() as github:
        settings = Settings(
            data_dir=root / "var",
            database_url=f"sqlite:///{database}",
            redis_url=REDIS_URL,
            run_timeout=60,
            github_api_url=github.base_url,
        )
        with fleet(settings) as started:
            started.start_node(NODE)
            started.import_skill("ticker", READ_NODE, {"scripts/tick.py": TICKER})
            started.import_skill("changer", CHANGE_NODE, {"scripts/tick.py": TICKER})
            yield started


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport=DESKTOP)
    opened = context.new_page()
    yield opened
    context.close()


def sign_in(page: Any, console: Fleet, token: str | None = None) -> None:
    page.goto(console.url + "/")
    page.get_by_label("Owner token").fill(token or console.owner_token)
    page.get_by_role("button", name="Sign in").click()


def signed_in(page: Any, console: Fleet) -> None:
    sign_in(page, console)
    page.wait_for_selector("main[data-ready=approvals]")
    page.wait_for_selector("#live.live-open")  # the event feed is connected


def call_script(console: Fleet, skill: str, **arguments: object) -> dict[str, Any]:
    body = {
        "arguments": {
            "skill_name": skill,
            "script": "scripts/tick.py",
            "arguments": {"node": NODE, **arguments},
        },
        "chat_id": "console-chat",
    }
    with console.http() as client:
        response = client.post("/api/tools/run_skill_script", json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def call_tool(
    console: Fleet, tool: str, arguments: dict[str, Any], chat: str = "console-chat"
) -> dict[str, Any]:
    """A tool call as an agent makes it (with the owner's token)."""
    with console.http() as client:
        response = client.post(f"/api/tools/{tool}", json={"arguments": arguments, "chat_id": chat})
    assert response.status_code == 200, response.text
    return dict(response.json())


def import_owned(console: Fleet, name: str) -> dict[str, Any]:
    """A read skill of the owner's own, imported as a zip."""
    return console.import_skill(name, READ_NODE, {"scripts/tick.py": TICKER})


def propose_edit(console: Fleet, skill: str, text: str) -> dict[str, Any]:
    """An agent's edit_skill call replacing the skill's script; it waits for the owner."""
    edit = {
        "skill_name": skill,
        "changes": {"files": {"scripts/tick.py": text}},
        "rationale": "Print less.",
    }
    asked = call_tool(console, "edit_skill", edit)
    assert asked["status"] == "pending_approval", asked
    return asked


def with_control_worker(console: Fleet) -> None:
    """The control worker runs job runs; started once per fleet."""
    if "control" not in console.processes:
        console.start("control", "worker", "control")
    console.wait_for_queue(naming.CONTROL)


def ticker_job(name: str, cron: str = "15 7 * * 1-5", time_zone: str = "UTC") -> dict[str, Any]:
    """A job body whose one step runs the ticker skill's script on the console's node."""
    step = {
        "tool": "run_skill_script",
        "arguments": {
            "skill_name": "ticker",
            "script": "scripts/tick.py",
            "arguments": {"node": NODE, "count": 2},
        },
    }
    return {
        "name": name,
        "cron": cron,
        "time_zone": time_zone,
        "steps": [step],
        "skills": ["ticker"],
    }


def run_frames(client: Any, run_id: str) -> list[tuple[str, str]]:
    """Every SSE frame of a finished run: (event id, frame text)."""
    frames = []
    with client.stream("GET", f"/api/runs/{run_id}/events") as response:
        fields: dict[str, str] = {}
        for line in response.iter_lines():
            if line:
                key, _, value = line.partition(": ")
                fields[key] = value
                continue
            if "id" in fields:
                text = "".join(f"{key}: {value}\n" for key, value in fields.items()) + "\n"
                frames.append((fields["id"], text))
                if fields.get("event") == "exit":
                    break
            fields = {}
    return frames


def first_page_ms(browser: Any, console: Fleet) -> float:
    """Milliseconds from navigation to the approvals page with its data, in a signed-in tab."""
    context = browser.new_context(viewport=DESKTOP)
    opened = context.new_page()
    try:
        opened.goto(console.url + "/console/console.css")  # same origin, to set the tab's token
        opened.evaluate(
            "token => sessionStorage.setItem('skillfleet.owner-token', token)", console.owner_token
        )
        opened.goto(console.url + "/")
        opened.wait_for_selector("main[data-ready=approvals]")
        ready: float = opened.evaluate("performance.getEntriesByName('console-ready')[0].startTime")
        return ready
    finally:
        context.close()

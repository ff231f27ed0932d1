"""Debian's Chromium, driven by Playwright, for the console's browser tests: `browser`, one a
test process, and `page`, each test's own in a context of its own.

Playwright drives the system's Chromium (`/usr/bin/chromium`); browsers are never downloaded.
Without it the tests skip, and fail in CI. tests/conftest.py registers the fixtures, so that a
test process starts Chromium (and Playwright's driver) once, not once a test file: some 4 s of
CPU each time.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

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


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    from conftest import IN_CI

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


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport=DESKTOP)
    opened = context.new_page()
    yield opened
    context.close()

"""The API docs page (Swagger UI) renders and works under its Content-Security-Policy."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from browsing import browser  # noqa: F401 - the module's Chromium
from flask import Flask
from werkzeug.serving import make_server


@pytest.fixture
def served(app: Flask) -> Iterator[str]:
    """The app over real HTTP on loopback: the browser enforces the headers it sends."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_the_docs_page_renders_and_tries_a_route_with_no_policy_violation(
    browser: Any,  # noqa: F811
    served: str,
) -> None:
    page = browser.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("console", lambda message: _note_violation(message, problems))
    requested: list[str] = []
    page.on("request", lambda sent: requested.append(sent.url))

    page.goto(f"{served}/api/docs")
    page.wait_for_selector(".opblock")
    page.locator(".opblock-summary", has_text="/api/health").first.click()
    page.get_by_role("button", name="Try it out").click()
    page.get_by_role("button", name="Execute").click()
    status = page.locator(".live-responses-table .response .response-col_status").first

    assert status.inner_text().strip() == "200"
    assert problems == []
    assert all(
        url.startswith(f"{served}/api/docs/assets/")
        for url in requested
        if url.endswith((".js", ".css"))
    ), requested
    page.close()


def _note_violation(message: Any, problems: list[str]) -> None:
    if message.type == "error" and "Content Security Policy" in message.text:
        problems.append(message.text)

"""The API's gunicorn configuration, as gunicorn itself reads it from skillfleet.serving, and
the request log around the app it serves."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
from typing import Any

import pytest
from gunicorn.app.base import Application

from skillfleet.serving import RequestLog
from store.logs import line_logger


class ConfigOnly(Application):  # type: ignore[misc]
    """gunicorn's application loading skillfleet's configuration module, serving nothing."""

    def load_config(self) -> None:
        self.load_config_from_module_name_or_filename("python:skillfleet.serving")

    def load(self) -> Any:
        raise AssertionError("nothing is served")


def collected(thing: object) -> bool:
    """Whether a full pass of the garbage collector would walk `thing`."""
    return any(seen is thing for seen in gc.get_objects())


@pytest.mark.parametrize("name", ["when_ready", "post_worker_init"])
def test_the_master_and_each_worker_freeze_what_they_made_while_starting_and_collect_again(
    name: str,
) -> None:
    # The master before its first fork (the workers share those pages), each worker once its
    # app is made. What they freeze stays frozen, as the test process's own start-up heap does
    # (tests/conftest.py).
    hook = getattr(ConfigOnly().cfg, name)  # gunicorn ignores a misspelt hook silently
    made_at_startup: list[object] = []
    assert collected(made_at_startup)
    gc.disable()  # as the master's on_starting leaves it for its imports
    try:
        hook(None)
        assert gc.isenabled()
    finally:
        gc.enable()
    assert not collected(made_at_startup)
    made_later: list[object] = []
    assert collected(made_later)


def test_the_api_opens_no_control_socket_every_gunicorn_of_the_user_would_share() -> None:
    # By default gunicorn 25+ listens on $HOME/.gunicorn/gunicorn.ctl: a second API on the
    # machine took it over and the first one's exit removed it under the second.
    assert ConfigOnly().cfg.control_socket_disable is True


class Lines(logging.Handler):
    """Keeps what a standard library logger was given."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


async def answer_204(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def test_the_request_log_has_method_path_status_and_duration_but_no_query_values() -> None:
    logger = logging.getLogger("skillfleet.tests.requests")
    lines = Lines()
    logger.addHandler(lines)
    logger.propagate = False
    app = RequestLog(answer_204, line_logger(logger.name))
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/api/calls/c1",
        "query_string": b"wait=30&token=sf_in_the_query&token=again",
        "headers": [(b"authorization", b"Bearer sf_in_the_header")],
        "client": ("127.0.0.1", 50000),
    }
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    try:
        asyncio.run(app(scope, receive, send))
    finally:
        logger.removeHandler(lines)

    assert [message["type"] for message in sent] == ["http.response.start", "http.response.body"]
    [line] = lines.messages
    logged = json.loads(line)
    assert logged["event"] == "request" and logged["level"] == "info"
    assert (logged["method"], logged["path"], logged["status"]) == ("GET", "/api/calls/c1", 204)
    assert logged["query"] == ["token", "wait"]
    assert logged["client"] == "127.0.0.1" and logged["ms"] >= 0
    assert "sf_in_the" not in line and "30" not in line.replace(logged["ts"], "")

"""What a failing model's error says: the HTTP status with its standard phrase and the model
API's own JSON error message, cleaned and cut; never another body, a made-up reason phrase or
the owner's key. Each case is a real HTTP server on loopback answering the request."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from relay.errors import ModelFailed
from store.egress import Egress
from store.limits import MAX_MODEL_ERROR_BYTES, MAX_MODEL_ERROR_CHARS
from store.modelsettings import ModelConfig
from workers.model import complete

KEY = "sk-owner-3f9a7c1e5b2d4a6f8e0c"
INTERNAL = "db-password=hunter2 internal-only"
# path -> (status, reason phrase, content type, body)
ANSWERS: dict[str, tuple[int, str, str, bytes]] = {
    "/html/chat/completions": (
        500, "Leaked " + INTERNAL, "text/html", f"<h1>Oops</h1><pre>{INTERNAL}</pre>".encode()
    ),
    "/api-error/chat/completions": (
        401, "Unauthorized", "application/json",
        json.dumps({"error": {
            "message": f"Incorrect API key provided:\n{KEY}.\x1b[31m See the docs.",
            "type": "invalid_request_error", "code": "invalid_api_key",
        }}).encode(),
    ),
    "/plain-error/chat/completions": (
        404, "Not Found", "application/json", json.dumps({"error": "model 'm' not found"}).encode()
    ),
    "/other-json/chat/completions": (
        404, "Not Found", "application/json", json.dumps({"detail": INTERNAL}).encode()
    ),
    "/long-error/chat/completions": (
        400, "Bad Request", "application/json",
        json.dumps({"error": {"message": "context too long " * 40}}).encode(),
    ),
    "/huge-error/chat/completions": (
        500, "Internal Server Error", "application/json",
        json.dumps({"error": {"message": "x" * MAX_MODEL_ERROR_BYTES}}).encode(),
    ),
    "/odd-status/chat/completions": (599, INTERNAL, "text/plain", INTERNAL.encode()),
    "/not-a-stream/chat/completions": (200, "OK", "text/html", f"<p>{INTERNAL}</p>".encode()),
    "/error-event/chat/completions": (
        200, "OK", "text/event-stream",
        b'data: {"error": {"message": "The server is overloaded."}}\n\n',
    ),
    "/garbage-event/chat/completions": (
        200, "OK", "text/event-stream", f"data: {INTERNAL}\n\n".encode()
    ),
    "/moved/chat/completions": (307, "Temporary Redirect", "text/plain", b""),
}  # fmt: skip


@contextmanager
def model_server() -> Iterator[tuple[str, list[str]]]:
    """The answers above on 127.0.0.1; the paths it was asked for."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 - the http.server name
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            asked.append(self.path)
            status, phrase, kind, body = ANSWERS[self.path]
            self.send_response(status, phrase)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            if status == 307:
                self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
            self.end_headers()
            self.wfile.write(body)

    with ThreadingHTTPServer(("127.0.0.1", 0), Handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{server.server_port}", asked
        finally:
            server.shutdown()


def failure(base: str, path: str) -> str:
    config = ModelConfig(f"{base}{path}", "m", KEY)
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(ModelFailed) as failed:
        complete(config, messages, [], lambda _text: None, lambda: False, 5, Egress(["127.0.0.1"]))
    refused = path == "/api-error"  # a 401: the key was refused
    assert failed.value.code == ("model_key_refused" if refused else "model_failed")
    return failed.value.message


def test_a_body_that_is_not_the_model_api_s_json_error_is_never_shown():
    with model_server() as (base, asked):
        said = {path: failure(base, path) for path in ("/html", "/other-json", "/odd-status")}

    assert said == {
        "/html": f"The model at {base}/html answered HTTP 500 (Internal Server Error).",
        "/other-json": f"The model at {base}/other-json answered HTTP 404 (Not Found).",
        "/odd-status": f"The model at {base}/odd-status answered HTTP 599.",
    }
    assert len(asked) == 3


def test_the_model_api_s_json_error_is_shown_on_one_line_without_the_key():
    with model_server() as (base, _asked):
        api = failure(base, "/api-error")
        plain = failure(base, "/plain-error")

    assert api == (
        f"The model at {base}/api-error answered HTTP 401 (Unauthorized): "
        "Incorrect API key provided: [redacted]. [31m See the docs."
    )
    assert plain == f"The model at {base}/plain-error answered HTTP 404 (Not Found): " + (
        "model 'm' not found"
    )


def test_a_long_error_message_is_cut_and_a_huge_error_body_is_not_read_as_one():
    with model_server() as (base, _asked):
        long = failure(base, "/long-error")
        huge = failure(base, "/huge-error")

    reason = long.split(": ", 1)[1]
    assert MAX_MODEL_ERROR_CHARS - 5 < len(reason) <= MAX_MODEL_ERROR_CHARS and reason.endswith("…")
    assert reason.startswith("context too long context too long")
    assert huge == f"The model at {base}/huge-error answered HTTP 500 (Internal Server Error)."


def test_an_answer_that_is_not_a_stream_of_chunks_fails_without_quoting_it():
    with model_server() as (base, _asked):
        said = {p: failure(base, p) for p in ("/not-a-stream", "/error-event", "/garbage-event")}

    assert said == {
        "/not-a-stream": f"The model at {base}/not-a-stream answered without a stream of "
        "chat-completion events.",
        "/error-event": f"The model at {base}/error-event reported an error: "
        "The server is overloaded.",
        "/garbage-event": f"The model at {base}/garbage-event sent an event that is not a "
        "chat-completion chunk.",
    }


def test_a_redirect_is_not_followed_and_says_so():
    with model_server() as (base, asked):
        said = failure(base, "/moved")

    assert said == (
        f"The model at {base}/moved answered HTTP 307 (Temporary Redirect); redirects are not "
        "followed, give the URL it moved to."
    )
    assert asked == ["/moved/chat/completions"]

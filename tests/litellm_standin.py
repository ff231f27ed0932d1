"""A local stand-in for a LiteLLM proxy: it mints virtual keys with its master key, lists its
models and streams chat completions to the keys it minted (or a key it was given), and can be
told to refuse them all, so the re-mint path can be followed.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MASTER_KEY = "sk-master-of-the-proxy"
MODELS = ["gpt-5-mini", "local-llama"]


@dataclass
class LiteLLMStandin:
    url: str = ""
    static_keys: set[str] = field(default_factory=set)  # keys good without minting
    minted: list[str] = field(default_factory=list)
    valid: set[str] = field(default_factory=set)
    mints: list[dict[str, Any]] = field(default_factory=list)  # each /key/generate body
    chats: list[dict[str, Any]] = field(default_factory=list)  # each chat request body
    refuse_everything: bool = False  # every key (minted ones too) answers 401
    models_body: bytes | None = None  # another /models answer

    def revoke(self) -> None:
        """Every key minted so far is refused from now on."""
        self.valid.clear()


def _reply(text: str) -> bytes:
    chunk = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    return f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()


@contextmanager
def litellm_standin() -> Iterator[LiteLLMStandin]:
    state = LiteLLMStandin()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _key_ok(self) -> bool:
            key = self.headers.get("Authorization", "").removeprefix("Bearer ")
            with lock:
                good = key in state.valid or key in state.static_keys
                return good and not state.refuse_everything

        def _refuse(self) -> None:
            error = {"error": {"message": "Authentication Error, invalid key", "code": "401"}}
            self._send(401, json.dumps(error).encode())

        def do_GET(self) -> None:  # noqa: N802 - the http.server name
            if self.path != "/v1/models":
                return self._send(404, b'{"detail": "Not Found"}')
            if not self._key_ok():
                return self._refuse()
            body = state.models_body
            listed = {"object": "list", "data": [{"id": m, "object": "model"} for m in MODELS]}
            self._send(200, body if body is not None else json.dumps(listed).encode())

        def do_POST(self) -> None:  # noqa: N802 - the http.server name
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            if self.path == "/key/generate":
                if self.headers.get("Authorization") != f"Bearer {MASTER_KEY}":
                    return self._refuse()
                with lock:
                    key = f"sk-virtual-{len(state.minted) + 1}"
                    state.mints.append(body)
                    state.minted.append(key)
                    state.valid.add(key)
                return self._send(200, json.dumps({"key": key, "key_name": None}).encode())
            if self.path != "/v1/chat/completions":
                return self._send(404, b'{"detail": "Not Found"}')
            with lock:
                state.chats.append(body)
            if not self._key_ok():
                return self._refuse()
            self._send(200, _reply("Hello from LiteLLM."), "text/event-stream")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_port}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

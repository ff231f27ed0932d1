"""A local OpenAI-compatible chat-completions server with scripted, streamed replies.

Each request takes the next reply from the script: text, tool calls (streamed in fragments the
way real servers send them), or slow text for stop and time-limit tests; a reply may start with
reasoning (`reasoning_content`, as vLLM and DeepSeek send it) and end with a usage chunk.
Requests are kept so a test can read what the model was sent.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def text(content: str) -> dict[str, Any]:
    return {"text": content}


def tools(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"tool_calls": list(calls)}


def thinking(reasoning: str, content: str, **usage: int) -> dict[str, Any]:
    """Reasoning, then text, then (when the request asks for it) `usage`'s token counts."""
    return {"reasoning": reasoning, "text": content, "usage": usage}


def slow(pieces: int, every: float) -> dict[str, Any]:
    return {"slow": pieces, "every": every}


@dataclass
class ModelStandin:
    url: str
    script: list[dict[str, Any]]
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)  # each request's client port: its connection


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {
        "id": "chatcmpl-standin",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": "standin",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n".encode()


def _usage(counts: dict[str, int]) -> bytes:
    body = {"id": "chatcmpl-standin", "object": "chat.completion.chunk", "choices": [],
            "usage": {**counts, "total_tokens": sum(counts.values())}}  # fmt: skip
    return f"data: {json.dumps(body)}\n\n".encode()


def _frames(reply: dict[str, Any], usage: bool = False) -> Iterator[tuple[bytes, float]]:
    yield _chunk({"role": "assistant", "content": ""}), 0
    for start in range(0, len(reply.get("reasoning", "")), 7):
        yield _chunk({"reasoning_content": reply["reasoning"][start : start + 7]}), 0
    yield from _texts(reply)
    if usage and reply.get("usage"):
        yield _usage(reply["usage"]), 0


def _texts(reply: dict[str, Any]) -> Iterator[tuple[bytes, float]]:
    if "slow" in reply:
        for index in range(reply["slow"]):
            yield _chunk({"content": f"word{index} "}), reply["every"]
        yield _chunk({}, "stop"), 0
        return
    if "text" in reply:
        content = reply["text"]
        for start in range(0, len(content), 7):  # a few characters at a time
            yield _chunk({"content": content[start : start + 7]}), 0
    if "tool_calls" in reply:
        for index, (name, arguments) in enumerate(reply["tool_calls"]):
            head = {"index": index, "id": f"call_{index}", "type": "function",
                    "function": {"name": name, "arguments": ""}}  # fmt: skip
            yield _chunk({"tool_calls": [head]}), 0
            encoded = json.dumps(arguments)
            middle = len(encoded) // 2
            for part in (encoded[:middle], encoded[middle:]):
                yield _chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]}), 0
        yield _chunk({}, "tool_calls"), 0
        return
    yield _chunk({}, "stop"), 0


@contextmanager
def model_standin(script: list[dict[str, Any]], keep_alive: bool = False) -> Iterator[ModelStandin]:
    """The stand-in serving `script`; each answer ends its connection, or with `keep_alive`
    comes chunked on a connection kept open for the next request, as hosted models answer."""
    state = ModelStandin("", list(script))
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 - the http.server name
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length))
            with lock:
                state.requests.append(body)
                state.headers.append(dict(self.headers))
                state.ports.append(self.client_address[1])
                reply = state.script.pop(0) if state.script else {"text": "(script ended)"}
            if self.path != "/v1/chat/completions" or not body.get("stream"):
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header(
                *(("Transfer-Encoding", "chunked") if keep_alive else ("Connection", "close"))
            )
            self.end_headers()
            try:
                usage = bool(body.get("stream_options", {}).get("include_usage"))
                for frame, pause in _frames(reply, usage):
                    time.sleep(pause)
                    self._send(frame)
                self._send(b"data: [DONE]\n\n")
                if keep_alive:
                    self._send(b"")  # the last chunk
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client stopped reading (a stopped turn)
            self.close_connection = not keep_alive

        def _send(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n" if keep_alive else data)
            self.wfile.flush()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_port}/v1"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

"""One streamed request to the owner's model, an OpenAI-compatible chat-completions endpoint.

The request goes out through the egress client as a webhook's does (store/egress.py): the
model's host is resolved at each request and only an address that passes the rules is
connected to, so a loopback, private or metadata address is reached only when the operator
lists it in SKILLFLEET_EGRESS_ALLOW, however the name resolved when the owner set it. A
redirect is not followed (it fails the request with its status), and the whole request, the
streamed answer included, is over by the turn's time limit (store/deadlines.py).

The answer is read as the chat-completions stream defines it: server-sent events whose `data:`
is a JSON chunk, up to `data: [DONE]`. Reasoning comes as servers send it beside the text
(`reasoning_content`, or `reasoning`), and the token usage from the last chunk, which the
request asks for (`stream_options.include_usage`). A failure says what
broker/modelanswers.py lets it say; a 401 or 403 is `model_key_refused`, which a turn on a
minted LiteLLM key answers by minting a new one once. The request carries `reasoning_effort`
only when the config holds one, which it does only where the source takes it
(store/modelchoice.py).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import httpx

from broker.modelanswers import KEY_REFUSED, error_message, status_failure
from relay.errors import ModelFailed, ModelKeyRefused, ModelRefused, ModelTimedOut
from store.deadlines import Deadline
from store.egress import Egress, EgressRefused
from store.jsoncodec import compact
from store.modelsettings import ModelConfig
from workers import usage

# Stop requests are looked for at most this often while the model streams.
STOP_CHECK_SECONDS = 0.25
# A request gets at least this long, even at the very end of a turn.
MIN_REQUEST_SECONDS = 1.0
# Local servers often take no key, and some insist on the header all the same.
NO_KEY = "none"
USER_AGENT = "skillfleet-model/1"
DONE = "[DONE]"


@dataclass
class ToolRequest:
    """A function call the model asked for; `arguments` is the JSON text it sent."""

    id: str
    name: str = ""
    arguments: str = ""


@dataclass
class Reply:
    text: str = ""
    tool_calls: list[ToolRequest] = field(default_factory=list)
    stopped: bool = False
    usage: dict[str, int] = field(default_factory=dict)  # workers/usage.py reads it

    def message(self) -> dict[str, Any]:
        """The assistant message to send back with the next request."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments or "{}"},
                }
                for call in self.tool_calls
            ]
        return message


def complete(
    config: ModelConfig,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    on_text: Callable[[str], None],
    should_stop: Callable[[], bool],
    timeout: float,
    egress: Egress,
    on_reasoning: Callable[[str], None] | None = None,
    client: httpx.Client | None = None,
) -> Reply:
    """Stream one answer: text goes to `on_text` as it arrives, reasoning to `on_reasoning`;
    tool calls are assembled. The request goes out on `client` (one of `egress`'s, whose
    connections stay open for the next request and are over by its deadline), else on a client
    of its own, over within `timeout` (at least MIN_REQUEST_SECONDS)."""
    deadline = Deadline.after(max(timeout, MIN_REQUEST_SECONDS))
    body: dict[str, Any] = {
        "model": config.name,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if tools:
        body["tools"] = tools
    if config.reasoning_effort is not None:  # only set where the source takes it
        body["reasoning_effort"] = config.reasoning_effort
    headers = {
        "Authorization": f"Bearer {config.api_key or NO_KEY}",
        "Accept": "text/event-stream",
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
    }
    # The compact JSON httpx would write, written by orjson: the tools' definitions make a body
    # of some 15 KB, 0.1 ms for the standard library each request, 5 µs so.
    payload = compact(body)
    sent: dict[str, Any] = {"content": payload} if payload is not None else {"json": body}
    model = f"The model at {config.base_url}"
    url = f"{config.base_url.rstrip('/')}/chat/completions"
    held: AbstractContextManager[httpx.Client] = (
        contextlib.nullcontext(client)  # the caller's to close
        if client is not None
        else egress.client(deadline, follow_redirects=False)
    )
    try:
        with held as used, used.stream("POST", url, headers=headers, **sent) as response:
            if not response.is_success:
                failure = status_failure(response, config.api_key)
                error = ModelKeyRefused if response.status_code in KEY_REFUSED else ModelFailed
                raise error(f"{model} answered {failure}")
            heard = _Heard(on_text, on_reasoning)
            return _read(response, heard, should_stop, model, config.api_key)
    except EgressRefused as e:
        raise ModelRefused(f"{model} is refused: {e.message}") from e
    except httpx.TimeoutException as e:
        raise ModelTimedOut(f"{model} did not answer within {deadline.seconds:g} seconds.") from e
    except (httpx.HTTPError, httpx.InvalidURL) as e:
        raise ModelFailed(f"{model} can't be reached.") from e


@dataclass
class _Heard:
    """Where the streamed text and reasoning go."""

    on_text: Callable[[str], None]
    on_reasoning: Callable[[str], None] | None = None


def _read(
    response: httpx.Response,
    heard: _Heard,
    should_stop: Callable[[], bool],
    model: str,
    key: str | None,
) -> Reply:
    reply = Reply()
    calls: dict[int, ToolRequest] = {}
    streamed = False
    checked = time.monotonic()
    events = _events(response.iter_lines())
    for data in events:
        streamed = True
        if data == DONE:
            break
        if time.monotonic() - checked >= STOP_CHECK_SECONDS:
            checked = time.monotonic()
            if should_stop():
                reply.stopped = True
                return reply
        _take(_chunk(data, model, key), reply, calls, heard)
    for _after in events:  # the body read to its end, as OpenAI's own client reads it: its
        pass  # connection then serves the turn's next request
    if not streamed:
        raise ModelFailed(f"{model} answered without a stream of chat-completion events.")
    reply.tool_calls = [calls[index] for index in sorted(calls)]
    return reply


def _events(lines: Iterator[str]) -> Iterator[str]:
    """The data of each server-sent event: its `data:` lines, joined by newlines."""
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
            data = []
            continue
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value.removeprefix(" "))
    if data:
        yield "\n".join(data)


def _chunk(data: str, model: str, key: str | None) -> dict[str, Any]:
    """An event's JSON chunk; ModelFailed for one that is not, or that reports an error."""
    try:
        chunk = json.loads(data)
    except ValueError:
        chunk = None
    if not isinstance(chunk, dict):
        raise ModelFailed(f"{model} sent an event that is not a chat-completion chunk.")
    if chunk.get("error"):
        reason = error_message(chunk, key)
        raise ModelFailed(f"{model} reported an error" + (f": {reason}" if reason else "."))
    return chunk


def _take(
    chunk: dict[str, Any],
    reply: Reply,
    calls: dict[int, ToolRequest],
    heard: _Heard,
) -> None:
    """Add a chunk's text to the reply and its tool-call fragments to their calls."""
    if isinstance(chunk.get("usage"), dict):
        reply.usage = usage.of(chunk["usage"])
    choices = chunk.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    delta = first.get("delta") if isinstance(first, dict) else None
    if not isinstance(delta, dict):
        return
    thought = delta.get("reasoning_content") or delta.get("reasoning")
    if isinstance(thought, str) and heard.on_reasoning is not None:
        heard.on_reasoning(thought)
    content = delta.get("content")
    if isinstance(content, str) and content:
        reply.text += content
        heard.on_text(content)
    fragments = delta.get("tool_calls")
    for part in fragments if isinstance(fragments, list) else []:
        if isinstance(part, dict):
            _add_fragment(calls, part)


def _add_fragment(calls: dict[int, ToolRequest], part: dict[str, Any]) -> None:
    index = part.get("index")
    index = index if isinstance(index, int) else 0
    call = calls.setdefault(index, ToolRequest(id=f"call_{index}"))
    if isinstance(part.get("id"), str) and part["id"]:
        call.id = part["id"]
    function = part.get("function")
    if isinstance(function, dict):
        name, arguments = function.get("name"), function.get("arguments")
        call.name += name if isinstance(name, str) else ""
        call.arguments += arguments if isinstance(arguments, str) else ""

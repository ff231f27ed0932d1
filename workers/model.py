"""One streamed request to an OpenAI-compatible chat-completions endpoint (the openai SDK)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import openai

from relay.errors import ModelFailed
from store.modelsettings import ModelConfig

# Stop requests are looked for at most this often while the model streams.
STOP_CHECK_SECONDS = 0.25
# Local servers often take no key; the SDK insists on one.
NO_KEY = "none"


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
) -> Reply:
    """Stream one answer: text goes to `on_text` as it arrives; tool calls are assembled."""
    client = openai.OpenAI(
        base_url=config.base_url,
        api_key=config.api_key or NO_KEY,
        timeout=max(timeout, 1.0),
        max_retries=0,
    )
    reply = Reply()
    calls: dict[int, ToolRequest] = {}
    try:
        stream = client.chat.completions.create(
            model=config.name,
            messages=cast(Any, messages),
            tools=cast(Any, tools),
            stream=True,
        )
        with stream:
            checked = time.monotonic()
            for chunk in stream:
                if time.monotonic() - checked >= STOP_CHECK_SECONDS:
                    checked = time.monotonic()
                    if should_stop():
                        reply.stopped = True
                        break
                if not chunk.choices:
                    continue
                delta = chunk.choices[0].delta
                if delta.content:
                    reply.text += delta.content
                    on_text(delta.content)
                for part in delta.tool_calls or []:
                    call = calls.setdefault(part.index, ToolRequest(id=f"call_{part.index}"))
                    if part.id:
                        call.id = part.id
                    if part.function is not None:
                        call.name += part.function.name or ""
                        call.arguments += part.function.arguments or ""
    except openai.APITimeoutError as e:
        raise ModelFailed(f"The model at {config.base_url} did not answer in time.") from e
    except openai.APIConnectionError as e:
        raise ModelFailed(f"The model at {config.base_url} can't be reached.") from e
    except openai.APIStatusError as e:
        raise ModelFailed(
            f"The model at {config.base_url} answered HTTP {e.status_code}: {_short(e)}"
        ) from e
    except openai.OpenAIError as e:
        raise ModelFailed(f"The model at {config.base_url} failed: {type(e).__name__}.") from e
    reply.tool_calls = [calls[index] for index in sorted(calls)]
    return reply


def _short(error: openai.APIStatusError) -> str:
    message = str(getattr(error, "message", "") or "").strip().splitlines()
    return (message[0][:200] if message else "no message") or "no message"

"""Which model a turn runs on: a source of the owner's, a model name, a reasoning effort and a
context tier. The owner's default (`PUT /api/settings/model`) holds one; a job may hold its own.

Reasoning effort is OpenAI's `reasoning_effort` (none, minimal, low, medium, high) or None,
which sends nothing. A request carries it only where the source takes it: a source says so
(`takes_reasoning_effort` true or false), or, left unset, the model's name decides: OpenAI's
reasoning families (o1, o3, o4, gpt-5, gpt-oss, after any `provider/` prefix) take it, others
don't, so a local model that would refuse an unknown field never gets one.

The context tier bounds what a turn sends: `small` (8,192 tokens), `medium` (32,768), `large`
(131,072), or a number of tokens. A quarter of that window is kept free for the answer; the
history of the chat's earlier turns is cut, oldest first, until the request fits (tokens
estimated as characters / 4). The system prompt, the skill content the chat loaded and the
turn's own prompt are never cut. None: no bound but the number of turns kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from store.errors import StoreError
from store.limits import MAX_CONTEXT_TOKENS, MAX_MODEL_NAME_CHARS, MIN_CONTEXT_TOKENS

EFFORTS = ("none", "minimal", "low", "medium", "high")
TIERS = {"small": 8_192, "medium": 32_768, "large": 131_072}
CHARS_PER_TOKEN = 4
# Model names that take reasoning_effort when their source does not say.
REASONING_MODELS = re.compile(r"^(o1|o3|o4|gpt-5|gpt-oss)([-.:_].*)?$")


class InvalidModelChoice(StoreError):
    """Raised when a model name, reasoning effort or context tier is not one skillfleet takes."""

    code = "invalid_setting"
    status = 422


@dataclass(frozen=True)
class ModelChoice:
    """A source's name and a model on it; a None field falls back to the owner's default."""

    source: str | None = None
    model: str | None = None
    reasoning_effort: str | None = None
    context: str | None = None

    def over(self, default: ModelChoice | None) -> ModelChoice:
        """This choice, its unset fields taken from `default` (a source comes with its model)."""
        if default is None:
            return self
        own = self.source is not None
        return ModelChoice(
            self.source if own else default.source,
            self.model if own else default.model,
            self.reasoning_effort or default.reasoning_effort,
            self.context or default.context,
        )


def check_model(model: str, field: str = "model") -> str:
    if not isinstance(model, str) or not model.strip() or len(model) > MAX_MODEL_NAME_CHARS:
        raise InvalidModelChoice(f"'{field}' must be 1 to {MAX_MODEL_NAME_CHARS} characters.")
    if any(not c.isprintable() for c in model):
        raise InvalidModelChoice(f"'{field}' holds a control character.")
    return model


def check_effort(effort: object) -> str | None:
    if effort is None or isinstance(effort, str) and effort in EFFORTS:
        return effort
    raise InvalidModelChoice(f"'reasoning_effort' is one of {', '.join(EFFORTS)}, or null.")


def check_context(context: object) -> str | None:
    """The tier as it is stored: a tier's name, or a number of tokens as digits."""
    if context is None or isinstance(context, str) and context in TIERS:
        return context
    text = context if isinstance(context, str) else ""
    if isinstance(context, int) and not isinstance(context, bool):
        text = str(context)
    if text.isdigit() and MIN_CONTEXT_TOKENS <= int(text) <= MAX_CONTEXT_TOKENS:
        return text
    raise InvalidModelChoice(
        f"'context' is small, medium, large, a number of tokens from {MIN_CONTEXT_TOKENS:,} to "
        f"{MAX_CONTEXT_TOKENS:,}, or null."
    )


def shown_context(context: str | None) -> str | int | None:
    """The stored tier as the API gives it back: a name, or the number of tokens."""
    return int(context) if context is not None and context.isdigit() else context


def window(context: str | None) -> int | None:
    """The tokens of a context tier's window; None for no tier."""
    if context is None:
        return None
    return TIERS.get(context) or int(context)


def takes_effort(flag: bool | None, model: str) -> bool:
    """Whether a request to `model` on a source whose flag is `flag` carries reasoning_effort."""
    if flag is not None:
        return flag
    return bool(REASONING_MODELS.match(model.rsplit("/", 1)[-1].lower()))


def tokens(text: str) -> int:
    """A cheap estimate of the tokens `text` takes."""
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def kept_history(
    history: list[tuple[str, str]], fixed: int, context_tokens: int | None
) -> list[tuple[str, str]]:
    """The newest prompts and answers of `history` that fit a window of `context_tokens` with
    a quarter of it free and `fixed` tokens (the system prompt, the skills, the tools, the
    prompt) taken; all of it when there is no window."""
    if context_tokens is None:
        return history
    room = context_tokens - context_tokens // 4 - fixed
    kept: list[tuple[str, str]] = []
    for prompt, answer in reversed(history):
        room -= tokens(prompt) + tokens(answer)
        if room < 0:
            break
        kept.append((prompt, answer))
    return kept[::-1]

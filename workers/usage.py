"""Token usage: what a model reported for one request, and a turn's requests summed.

Shown in the AI SDK's message metadata (api/chatstream.py) with the SDK's names.
"""

from __future__ import annotations

from typing import Any

KEYS = ("inputTokens", "outputTokens", "totalTokens", "reasoningTokens")


def of(reported: dict[str, Any]) -> dict[str, int]:
    """A chat-completions `usage` object in the AI SDK's names; what it lacks is left out."""
    details = reported.get("completion_tokens_details")
    found = {
        "inputTokens": reported.get("prompt_tokens"),
        "outputTokens": reported.get("completion_tokens"),
        "totalTokens": reported.get("total_tokens"),
        "reasoningTokens": details.get("reasoning_tokens") if isinstance(details, dict) else None,
    }
    return {k: v for k, v in found.items() if isinstance(v, int) and not isinstance(v, bool)}


def add(total: dict[str, int], more: dict[str, int]) -> dict[str, int]:
    """`total` and `more` summed key by key."""
    return {k: total.get(k, 0) + more.get(k, 0) for k in KEYS if k in total or k in more}

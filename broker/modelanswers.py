"""What a model server's failed answer may show: the HTTP status with its standard phrase and,
when the body is the model API's JSON error (`{"error": {"message": ...}}`), that message,
cleaned and cut. No other body (an internal service's page, a proxy's) is ever shown. Chat
requests (workers/model.py) and a source's model list and keys (broker/modelaccess.py) both
say their failures this way.
"""

from __future__ import annotations

import json
from http import HTTPStatus

import httpx

from broker.results import REDACTED, redact_text
from store.egress import read_at_most
from store.limits import MAX_MODEL_ERROR_BYTES, MAX_MODEL_ERROR_CHARS

# The statuses that say the key was refused.
KEY_REFUSED = (401, 403)


def status_failure(response: httpx.Response, key: str | None) -> str:
    """`HTTP 401 (Unauthorized): <the API's error message>`, never the body itself."""
    code = response.status_code
    try:
        shown = f"HTTP {code} ({HTTPStatus(code).phrase})"
    except ValueError:  # a status Python does not name: the server's own phrase is not shown
        shown = f"HTTP {code}"
    if response.is_redirect:
        return f"{shown}; redirects are not followed, give the URL it moved to."
    reason = error_message(json_error(response), key)
    return f"{shown}: {reason}" if reason else f"{shown}."


def json_error(response: httpx.Response) -> object:
    """The body as JSON when it is small enough to be an API's error; None otherwise."""
    body = read_at_most(response, MAX_MODEL_ERROR_BYTES)
    try:
        return None if body is None else json.loads(body)
    except ValueError:
        return None


def error_message(data: object, *keys: str | None) -> str:
    """The message of a model API's JSON error, `{"error": {"message": ...}}` (or `{"error":
    "..."}`), on one line, without control characters, credentials or any of `keys`, cut;
    "" for any other body."""
    error = data.get("error") if isinstance(data, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    if not isinstance(message, str):
        return ""
    text = " ".join("".join(c if c.isprintable() else " " for c in message).split())
    for key in keys:
        text = text.replace(key, REDACTED) if key else text
    text = redact_text(text)
    if len(text) > MAX_MODEL_ERROR_CHARS:
        text = text[: MAX_MODEL_ERROR_CHARS - 1].rstrip() + "…"
    return text

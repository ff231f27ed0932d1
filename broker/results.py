"""What a tool's result looks like to the model: JSON, credentials redacted, 48 KB at most."""

import functools
import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from store import jsoncodec
from store.errors import SkillfleetError
from store.limits import MAX_RESULT_DEPTH, RESULT_CAP

REDACTED = "[redacted]"
CUT_NOTE = (
    f"[skillfleet: the result was cut at {RESULT_CAP // 1024} KB; "
    "ask for less, e.g. a narrower query.]"
)
UNEXPECTED = ("tool_failed", "The tool failed unexpectedly.")

# Field names whose value is a secret, compared without case, "-" or "_"; a name ending in one
# counts too (refresh_token, DB_PASSWORD).
SECRET_FIELDS = (
    "password",
    "passwd",
    "secret",
    "token",
    "apikey",
    "accesskey",
    "privatekey",
    "clientsecret",
    "authorization",
    "credentials",
)
_KEY_WORDS = r"password|passwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|credentials"

# (pattern, replacement); a group kept in the replacement keeps the label, drops the value.
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # A PEM private key, also one cut off before its END line.
    (
        re.compile(
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)",
            re.DOTALL,
        ),
        REDACTED,
    ),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9\-._~+/]{8,}=*"), rf"\1 {REDACTED}"),
    (re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"), REDACTED),
    (re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), REDACTED),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"), REDACTED),
    (re.compile(r"\bsf_[A-Za-z0-9_-]{16,}"), REDACTED),
    (re.compile(r"(://[^/\s:@]{1,200}:)[^/\s@]{1,200}@"), rf"\1{REDACTED}@"),
    # key=value and key: value, the key ending in a secret word (GITHUB_TOKEN=..., "password": ...).
    # A run's own mark of a secret it hid, [secret:NAME] (workers/secrets.py), stays readable.
    (
        re.compile(
            rf"(?i)\b([\w-]{{0,40}}(?:{_KEY_WORDS})[\"']?\s*[=:]\s*[\"']?)"
            rf"(?!\[redacted\])(?<!\[secret:)[^\s\"'&,;}}]+"
        ),
        rf"\1{REDACTED}",
    ),
)


# Every pattern above needs one of these (lowercased) to match, and most strings a tool returns
# hold none of them: substring tests are far cheaper than running the patterns.
_MARKERS = (
    "-----begin", "bearer", "basic", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_",
    "akia", "asia", "eyj", "sf_", "://",
    "password", "passwd", "secret", "token", "api_key", "api-key", "apikey", "access_key",
    "access-key", "accesskey", "private_key", "private-key", "privatekey", "credentials",
    "authoriz", "authoris",
)  # fmt: skip


_BYTE_MARKERS = tuple(marker.encode() for marker in _MARKERS)


def _scan(text: str | bytes) -> bool:
    lowered = text.lower()  # the markers are ASCII: bytes lower the same letters
    if isinstance(lowered, bytes):
        return any(marker in lowered for marker in _BYTE_MARKERS)
    return any(marker in lowered for marker in _MARKERS)


# A long text scans at ~0.5 ms per 36 KB, and the same ones come back (list_skills, a skill
# loaded again): the answers for the last long texts are kept, keyed by the whole text.
_REMEMBERED_FROM = 4096
_remembered_scan = functools.lru_cache(maxsize=64)(_scan)


def _might_hold_secret(text: str | bytes) -> bool:
    return _remembered_scan(text) if len(text) >= _REMEMBERED_FROM else _scan(text)


def shape_result(value: object, cap: int = RESULT_CAP, note: str = CUT_NOTE) -> object:
    """The result as JSON-ready data, credentials redacted, cut to `cap` bytes with `note`."""
    clean = _clean_json(value, cap)
    if clean is not None:
        return value  # plain JSON, small enough, and nothing in it looks like a secret
    shaped = _redact(value, 0)
    if json_size(shaped) <= cap:
        return shaped
    if isinstance(shaped, str):
        return _fit(lambda n: f"{shaped[:n]}\n{note}", len(shaped), cap)
    text = json.dumps(shaped, ensure_ascii=False, separators=(",", ":"))
    return _fit(lambda n: {"truncated": True, "note": note, "text": text[:n]}, len(text), cap)


def _clean_json(value: object, cap: int) -> bytes | None:
    """The compact UTF-8 JSON of `value` when it needs no redaction and no cut, else None."""
    text = jsoncodec.compact(value)
    if text is None or len(text) > cap:
        return None
    return None if _might_hold_secret(text) else text


def tool_failure(exc: BaseException) -> tuple[str, str]:
    """The (code, message) a failed call reports.

    Our own errors keep their code and message; anything else becomes a generic
    tool_failed, so no stack trace, exception text or path reaches the model.
    """
    if isinstance(exc, SkillfleetError):
        return exc.code, exc.message
    return UNEXPECTED


def redact_text(text: str) -> str:
    """Text with credential-looking parts replaced by [redacted]."""
    if not _might_hold_secret(text):
        return text
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def is_secret_field(name: str) -> bool:
    """Whether a field of this name holds a secret (case, "-" and "_" ignored)."""
    folded = name.lower().replace("-", "").replace("_", "")
    return folded.endswith(SECRET_FIELDS)


def _redact(value: object, depth: int) -> object:
    if depth > MAX_RESULT_DEPTH:
        return "[nested too deeply]"
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, bytes | bytearray):
        return redact_text(bytes(value).decode("utf-8", "replace"))
    if isinstance(value, Mapping):
        return {str(key): _redact_field(str(key), item, depth) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_redact(item, depth + 1) for item in value]
    return redact_text(str(value))


def _redact_field(name: str, value: object, depth: int) -> object:
    if value is not None and is_secret_field(name):
        return REDACTED
    return _redact(value, depth + 1)


def json_size(value: object) -> int:
    """The bytes of `value` as compact UTF-8 JSON, the measure every cap here uses."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return len(text.encode("utf-8", "surrogatepass"))


def _fit(build: Callable[[int], Any], length: int, cap: int) -> Any:
    """build(n) for the largest n whose result fits `cap` (binary search)."""
    # Every character takes at least one byte, so no more than `cap` of them can fit.
    low, high = 0, min(length, cap)
    while low < high:
        middle = (low + high + 1) // 2
        if json_size(build(middle)) <= cap:
            low = middle
        else:
            high = middle - 1
    return build(low)

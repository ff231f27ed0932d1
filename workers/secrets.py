"""A run's secrets on the worker: the names its skill declares, their values fetched from the
API for this run only, and output with every value replaced by `[secret:NAME]`.

The names are read from the verified folder of the run's hash, like its command line; the
values come over the node's authenticated channel (PackageCache.secrets) and live in the
runner's Job and the script's environment only, never in a message, row, stream or log.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from relay.errors import RunError
from store.errors import StoreError
from store.frontmatter import read_loose
from store.leniency import read_header

# Shorter values are left in output: replacing every "a" or "42" would garble it and hide
# nothing worth hiding.
MIN_REDACTED_CHARS = 4


class SecretMissing(RunError):
    """Raised when a run gets none of its declared secrets: the API refused them (not set,
    not allowed, or the skill changed since the run was queued)."""

    code = "secret_missing"
    status = 409


class SecretSource(Protocol):
    """Where a worker gets a run's secrets: the API, with the node's token."""

    def secrets(self, run_id: str) -> dict[str, str]: ...


def run_secrets(
    source: SecretSource, folder: Path, name: str, skill_hash: str, run_id: str
) -> dict[str, str]:
    """The values of the secrets the skill in `folder` declares, for this run; {} when it
    declares none (no request is made). Raises SecretMissing when one is missing."""
    try:
        names = declared(str(folder), name, skill_hash)
    except (StoreError, OSError) as e:  # read for the command line already: a safety net
        raise RunError(f"The skill's SKILL.md could not be read for its secrets: {e}") from e
    if not names:
        return {}
    values = source.secrets(run_id)
    lacking = [secret for secret in names if secret not in values]
    if lacking:
        raise SecretMissing(f"The API gave the run no value for {', '.join(lacking)}.")
    return {secret: values[secret] for secret in names}


@functools.lru_cache(maxsize=512)
def declared(folder: str, name: str, skill_hash: str) -> tuple[str, ...]:
    """skillfleet.secrets of the verified copy, read once per hash."""
    loose = read_loose((Path(folder) / "SKILL.md").read_bytes())
    return read_header(loose.header, loose.body, name).secrets


class Redactor:
    """Replaces each secret value in one output stream by `[secret:NAME]`.

    A value may arrive split across reads: the end of what was fed that could still begin a
    value is held back until the next read shows whether it does (`release` gives it up at
    the end).
    """

    def __init__(self, secrets: Mapping[str, str]) -> None:
        found = [
            (value.encode(), f"[secret:{name}]".encode())
            for name, value in secrets.items()
            if len(value) >= MIN_REDACTED_CHARS
        ]
        self.values = sorted(found, key=lambda pair: -len(pair[0]))  # longest first
        self.held = b""

    def __bool__(self) -> bool:
        return bool(self.values)

    def feed(self, data: bytes) -> bytes:
        """What of `held + data` may go out now, every whole value replaced."""
        text = self.held + data
        for value, mark in self.values:
            text = text.replace(value, mark)
        keep = self._open_prefix(text)
        self.held = text[len(text) - keep :] if keep else b""
        return text[: len(text) - keep]

    def release(self) -> bytes:
        """The held end, once no more output comes: it never completed a value."""
        held, self.held = self.held, b""
        return held

    def _open_prefix(self, text: bytes) -> int:
        """The length of the longest end of `text` that begins some value."""
        longest = 0
        for value, _mark in self.values:
            for size in range(min(len(value) - 1, len(text)), longest, -1):
                if text.endswith(value[:size]):
                    longest = size
                    break
        return longest

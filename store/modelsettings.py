"""The model an owner's agent turns run on: an OpenAI-compatible chat-completions endpoint.

Its address passes the egress rules (store/egress.py) when it is set, so a loopback, private
or metadata address is refused at once unless the operator allowed it (SKILLFLEET_EGRESS_ALLOW),
and again at every request a turn makes (workers/model.py): a name's DNS answer can change.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from sqlalchemy.orm import Session

from store.db import SessionFactory
from store.egress import Egress, EgressRefused
from store.errors import StoreError
from store.limits import MAX_API_KEY_CHARS, MAX_BASE_URL_CHARS, MAX_MODEL_NAME_CHARS
from store.models import ModelSetting, utcnow
from store.secrets import Sealer


class InvalidModelSetting(StoreError):
    """Raised when a model setting is not a usable URL, name or key."""

    code = "invalid_setting"
    status = 422


class ModelUrlRefused(InvalidModelSetting):
    """Raised when the model's host is, or resolves to, an address requests may not reach."""

    code = "model_url_refused"
    status = 422


@dataclass(frozen=True)
class ModelConfig:
    base_url: str
    name: str
    api_key: str | None


def load(sessions: SessionFactory, sealer: Sealer, owner_id: int) -> ModelConfig | None:
    """The owner's model with its key decrypted, or None when none is configured."""
    with sessions() as session:
        row = session.get(ModelSetting, owner_id)
    if row is None:
        return None
    key = sealer.unseal(row.api_key) if row.api_key else None
    return ModelConfig(row.base_url, row.name, key)


def shown(session: Session, owner_id: int) -> dict[str, object]:
    """The setting as the API shows it: never the key, only whether one is kept."""
    row = session.get(ModelSetting, owner_id)
    if row is None:
        return {"base_url": None, "name": None, "api_key_set": False}
    return {"base_url": row.base_url, "name": row.name, "api_key_set": row.api_key is not None}


def save(
    session: Session,
    sealer: Sealer,
    owner_id: int,
    base_url: str,
    name: str,
    api_key: str | None,
    keep_key: bool,
) -> None:
    """Set the owner's model; `keep_key` keeps the stored key when none was sent."""
    check(base_url, name, api_key)
    row = session.get(ModelSetting, owner_id)
    if row is None:
        row = ModelSetting(owner_id=owner_id)
        session.add(row)
    row.base_url = base_url.rstrip("/")
    row.name = name
    if not keep_key:
        row.api_key = sealer.seal(api_key) if api_key else None
    row.updated_at = utcnow()


def remove(session: Session, owner_id: int) -> None:
    row = session.get(ModelSetting, owner_id)
    if row is not None:
        session.delete(row)


def check_address(base_url: str, egress: Egress) -> None:
    """Refuse a base URL whose host may not be reached now (a DNS lookup): call it before the
    transaction that saves the setting. Each request to the model checks the host again."""
    _check_url_form(base_url)
    try:
        egress.check_url(base_url)
    except EgressRefused as e:
        raise ModelUrlRefused(f"'model.base_url' is refused: {e.message}") from e


def check(base_url: str, name: str, api_key: str | None) -> None:
    _check_url_form(base_url)
    if not name.strip() or len(name) > MAX_MODEL_NAME_CHARS:
        raise InvalidModelSetting(f"'model.name' must be 1 to {MAX_MODEL_NAME_CHARS} characters.")
    if api_key is not None and len(api_key) > MAX_API_KEY_CHARS:
        raise InvalidModelSetting(f"'model.api_key' is longer than {MAX_API_KEY_CHARS} characters.")


def _check_url_form(base_url: str) -> None:
    try:
        parts = urlsplit(base_url)
        parts.port  # noqa: B018 - reading it checks it
    except ValueError:  # brackets that hold no IPv6 address, a port that is not a number
        parts = None
    if len(base_url) > MAX_BASE_URL_CHARS or parts is None or parts.scheme not in ("http", "https"):
        raise InvalidModelSetting(
            "'model.base_url' must be an http(s) URL such as https://api.openai.com/v1."
        )
    if not parts.hostname:
        raise InvalidModelSetting("'model.base_url' has no host.")

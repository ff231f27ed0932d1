"""The model an owner's agent turns run on: an OpenAI-compatible chat-completions endpoint."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from sqlalchemy.orm import Session

from store.db import SessionFactory
from store.errors import StoreError
from store.limits import MAX_API_KEY_CHARS, MAX_BASE_URL_CHARS, MAX_MODEL_NAME_CHARS
from store.models import ModelSetting, utcnow
from store.secrets import Sealer


class InvalidModelSetting(StoreError):
    """Raised when a model setting is not a usable URL, name or key."""

    code = "invalid_setting"
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


def check(base_url: str, name: str, api_key: str | None) -> None:
    parts = urlsplit(base_url)
    if len(base_url) > MAX_BASE_URL_CHARS or parts.scheme not in ("http", "https"):
        raise InvalidModelSetting(
            "'model.base_url' must be an http(s) URL such as http://127.0.0.1:8000/v1."
        )
    if not parts.hostname:
        raise InvalidModelSetting("'model.base_url' has no host.")
    if not name.strip() or len(name) > MAX_MODEL_NAME_CHARS:
        raise InvalidModelSetting(f"'model.name' must be 1 to {MAX_MODEL_NAME_CHARS} characters.")
    if api_key is not None and len(api_key) > MAX_API_KEY_CHARS:
        raise InvalidModelSetting(f"'model.api_key' is longer than {MAX_API_KEY_CHARS} characters.")

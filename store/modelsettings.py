"""The owner's default model: one of their sources (store/modelsources.py), a model on it, a
reasoning effort and a context tier (store/modelchoice.py); and the config a turn runs with.

The first form of this setting, one endpoint per owner (`{"base_url", "name", "api_key"}`),
still works: it writes the owner's source named `default` (kind openai) and picks it with that
model. Addresses pass the egress rules (store/egress.py) when they are set, and again at every
request a turn makes (workers/model.py): a name's DNS answer can change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, and_, bindparam, select
from sqlalchemy.orm import Session

from store import modelsources
from store.db import SessionFactory, core_connection
from store.egress import Egress, EgressRefused
from store.errors import StoreError
from store.limits import MAX_API_KEY_CHARS, MAX_MODEL_NAME_CHARS
from store.modelchoice import (
    ModelChoice,
    check_context,
    check_effort,
    check_model,
    shown_context,
    takes_effort,
    window,
)
from store.models import ModelSetting, ModelSource, utcnow
from store.names import is_valid_name
from store.secrets import Sealer

# The source the first form of the setting writes.
DEFAULT_SOURCE = "default"


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
    """What one request to a model needs. `api_key` is a minted key's for a `virtual_key`
    source (None until one is minted); `reasoning_effort` is set only where the source takes
    it; `context_tokens` is the window the history is bounded by (None: no bound)."""

    base_url: str
    name: str
    api_key: str | None
    source: str = DEFAULT_SOURCE
    virtual_key: bool = False
    reasoning_effort: str | None = None
    context_tokens: int | None = None


def default_choice(session: Session, owner_id: int) -> ModelChoice | None:
    row = session.get(ModelSetting, owner_id)
    if row is None:
        return None
    return ModelChoice(row.source, row.name, row.reasoning_effort, row.context)


# What a config needs of a source, named as ModelSource's attributes (config_of takes either).
_SOURCE_COLUMNS = (
    ModelSource.name,
    ModelSource.base_url,
    ModelSource.api_key,
    ModelSource.minted_key,
    ModelSource.virtual_key,
    ModelSource.reasoning_effort,
)
# Every turn reads the owner's default and the source it names: one round trip, built once.
_DEFAULT = (
    select(
        ModelSetting.source.label("choice_source"),
        ModelSetting.name.label("choice_model"),
        ModelSetting.reasoning_effort.label("choice_effort"),
        ModelSetting.context.label("choice_context"),
        *_SOURCE_COLUMNS,
    )
    .outerjoin(
        ModelSource,
        and_(
            ModelSource.owner_id == ModelSetting.owner_id, ModelSource.name == ModelSetting.source
        ),
    )
    .where(ModelSetting.owner_id == bindparam("owner_id"))
)
# A source a job's choice names over the default's.
_SOURCE = select(*_SOURCE_COLUMNS).where(
    ModelSource.owner_id == bindparam("owner_id"), ModelSource.name == bindparam("name")
)


def load(
    sessions: SessionFactory, sealer: Sealer, owner_id: int, choice: ModelChoice | None = None
) -> ModelConfig | None:
    """The config of `choice` over the owner's default, keys decrypted; None when neither
    names a source and a model. A source the choice names that is gone raises UnknownSource."""
    with core_connection(sessions) as connection:
        return read(connection, sealer, owner_id, choice)


def read(
    connection: Connection, sealer: Sealer, owner_id: int, choice: ModelChoice | None = None
) -> ModelConfig | None:
    """`load` on the caller's connection."""
    chosen = _chosen(connection, owner_id, choice)
    return None if chosen is None else config_of(chosen[0], sealer, chosen[1])


def configured(connection: Connection, owner_id: int) -> bool:
    """Whether `load` finds the owner a default model, on the caller's connection and without
    decrypting a key; a source the default names that is gone raises UnknownSource."""
    return _chosen(connection, owner_id) is not None


def _chosen(
    connection: Connection, owner_id: int, choice: ModelChoice | None = None
) -> tuple[Any, ModelChoice] | None:
    """The source and the choice `choice` over the owner's default makes; None when neither
    names a source and a model."""
    row = connection.execute(_DEFAULT, {"owner_id": owner_id}).first()
    default = None
    if row is not None:
        default = ModelChoice(
            row.choice_source, row.choice_model, row.choice_effort, row.choice_context
        )
    picked = (choice or ModelChoice()).over(default)
    if picked.source is None or picked.model is None:
        return None
    source: Any = row  # a Row of the source's columns
    if row is None or picked.source != row.choice_source:
        source = None
        if is_valid_name(picked.source):
            parameters = {"owner_id": owner_id, "name": picked.source}
            source = connection.execute(_SOURCE, parameters).first()
    if source is None or source.base_url is None:  # none, or the default's is gone
        raise modelsources.unknown(picked.source)
    return source, picked


def config_of(source: Any, sealer: Sealer, choice: ModelChoice) -> ModelConfig:
    """The config of `choice` on `source` (a ModelSource, or a row of _SOURCE_COLUMNS)."""
    assert choice.model is not None
    sealed = source.minted_key if source.virtual_key else source.api_key
    effort = choice.reasoning_effort
    if effort is not None and not takes_effort(source.reasoning_effort, choice.model):
        effort = None
    return ModelConfig(
        source.base_url,
        choice.model,
        sealer.unseal(sealed) if sealed else None,
        source.name,
        source.virtual_key,
        effort,
        window(choice.context),
    )


def shown(session: Session, owner_id: int) -> dict[str, object]:
    """The default as the API shows it: the choice, and (as the first form of the setting had
    them) its source's base URL and whether a key is kept; never the key."""
    row = session.get(ModelSetting, owner_id)
    if row is None:
        return {"source": None, "model": None, "reasoning_effort": None, "context": None,
                "base_url": None, "name": None, "api_key_set": False}  # fmt: skip
    source = modelsources.find(session, owner_id, row.source)
    key_set = source is not None and (source.api_key or source.minted_key) is not None
    return {
        "source": row.source,
        "model": row.name,
        "reasoning_effort": row.reasoning_effort,
        "context": shown_context(row.context),
        "base_url": source.base_url if source is not None else None,
        "name": row.name,
        "api_key_set": key_set,
    }


def choose(session: Session, owner_id: int, choice: ModelChoice) -> None:
    """Make `choice` (a source of the owner's and a model on it) the owner's default."""
    assert choice.source is not None and choice.model is not None
    check_model(choice.model)
    effort, context = check_effort(choice.reasoning_effort), check_context(choice.context)
    modelsources.named(session, owner_id, choice.source)
    row = session.get(ModelSetting, owner_id)
    if row is None:
        row = ModelSetting(owner_id=owner_id)
        session.add(row)
    row.source, row.name = choice.source, choice.model
    row.reasoning_effort, row.context = effort, context
    row.updated_at = utcnow()


def save(
    session: Session,
    sealer: Sealer,
    owner_id: int,
    base_url: str,
    name: str,
    api_key: str | None,
    keep_key: bool,
) -> None:
    """The first form: set the owner's `default` source to this endpoint and pick it with the
    model `name` (effort and tier stay); `keep_key` keeps the stored key when none was sent."""
    check(base_url, name, api_key)
    spec = modelsources.SourceSpec(DEFAULT_SOURCE, base_url, api_key=api_key, keep_key=keep_key)
    modelsources.save(session, sealer, owner_id, spec)
    kept = default_choice(session, owner_id) or ModelChoice()
    choose(
        session, owner_id,
        ModelChoice(DEFAULT_SOURCE, name, kept.reasoning_effort, kept.context),
    )  # fmt: skip


def remove(session: Session, owner_id: int) -> None:
    """Forget the default (the sources stay); turns then fail with no_model."""
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
    modelsources.check_url_form(base_url, "model.base_url", InvalidModelSetting)

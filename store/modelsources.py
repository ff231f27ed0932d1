"""An owner's model sources: OpenAI-compatible endpoints, each with a name and a sealed key.

A source is `openai` (any OpenAI-compatible server: OpenAI, a local vLLM or Ollama, a LiteLLM
proxy with a key the owner gives) or `litellm`, which may instead take a virtual key per owner
that skillfleet mints with the operator's master key (store/modelkeys.py). Its address passes
the egress rules when it is saved and again at every request (store/egress.py). Keys are
never shown back: the API says only whether one is kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from store.egress import Egress, EgressRefused
from store.errors import StoreError
from store.limits import MAX_API_KEY_CHARS, MAX_BASE_URL_CHARS, MAX_MODEL_SOURCES
from store.models import Job, ModelSetting, ModelSource, utcnow
from store.names import is_valid_name
from store.secrets import Sealer

KINDS = ("openai", "litellm")
NAME_RULE = (
    "A source's name is 1 to 64 characters of a-z, 0-9 and single hyphens, "
    "not starting or ending with one."
)


class SourceInvalid(StoreError):
    """Raised when a source's name, kind, address or key is not one skillfleet takes."""

    code = "source_invalid"
    status = 422


class SourceRefusedAddress(SourceInvalid):
    """Raised when a source's host is, or resolves to, an address requests may not reach."""

    code = "source_refused_address"
    status = 422


class VirtualKeysUnavailable(SourceInvalid):
    """Raised when a source asks for minted keys the operator's LiteLLM can't give it."""

    code = "virtual_keys_unavailable"
    status = 422


class SourceNotFound(StoreError):
    """Raised when the owner has no source of that name (in a route's path)."""

    code = "source_not_found"
    status = 404


class UnknownSource(StoreError):
    """Raised when a setting or a job names a source the owner does not have."""

    code = "unknown_source"
    status = 422


class SourceInUse(StoreError):
    """Raised when a source to delete is the owner's default or a job's."""

    code = "source_in_use"
    status = 409


class TooManySources(StoreError):
    """Raised when an owner already keeps the most sources allowed."""

    code = "too_many_sources"
    status = 409


@dataclass(frozen=True)
class SourceSpec:
    """A source as the owner sent it; `keep_key` keeps the stored key when none was sent."""

    name: str
    base_url: str
    kind: str = "openai"
    api_key: str | None = None
    keep_key: bool = False
    virtual_key: bool = False
    takes_reasoning_effort: bool | None = None


def check(spec: SourceSpec) -> None:
    """Every rule a source keeps that needs neither the network nor the database."""
    check_name(spec.name)
    if spec.kind not in KINDS:
        raise SourceInvalid(f"'kind' is one of {', '.join(KINDS)}.")
    check_url_form(spec.base_url, "base_url", SourceInvalid)
    if spec.api_key is not None and len(spec.api_key) > MAX_API_KEY_CHARS:
        raise SourceInvalid(f"'api_key' is longer than {MAX_API_KEY_CHARS} characters.")
    if spec.virtual_key and spec.kind != "litellm":
        raise SourceInvalid("'virtual_key' is for a source of kind litellm.")


def check_name(name: str) -> None:
    if not is_valid_name(name):
        raise SourceInvalid(NAME_RULE)


def check_address(base_url: str, egress: Egress) -> None:
    """Refuse a base URL whose host may not be reached now (a DNS lookup): call it before the
    transaction that saves the source. Each request to the source checks the host again."""
    try:
        egress.check_url(base_url)
    except EgressRefused as e:
        raise SourceRefusedAddress(f"'base_url' is refused: {e.message}") from e


def check_url_form(base_url: str, field: str, error: type[StoreError]) -> None:
    """`error` unless `base_url` is an http(s) URL with a host, of at most the column's size."""
    try:
        parts = urlsplit(base_url)
        parts.port  # noqa: B018 - reading it checks it
    except ValueError:  # brackets that hold no IPv6 address, a port that is not a number
        parts = None
    if len(base_url) > MAX_BASE_URL_CHARS or parts is None or parts.scheme not in ("http", "https"):
        raise error(f"'{field}' must be an http(s) URL such as https://api.openai.com/v1.")
    if not parts.hostname:
        raise error(f"'{field}' has no host.")


def save(session: Session, sealer: Sealer, owner_id: int, spec: SourceSpec) -> ModelSource:
    """Add the source, or replace the owner's source of that name; a minted key is kept only
    while the source stays at the same address with virtual keys."""
    check(spec)
    row = find(session, owner_id, spec.name)
    if row is None:
        count = session.scalar(
            select(func.count()).select_from(ModelSource).where(ModelSource.owner_id == owner_id)
        )
        if (count or 0) >= MAX_MODEL_SOURCES:
            raise TooManySources(f"You already have {MAX_MODEL_SOURCES} model sources.")
        row = ModelSource(owner_id=owner_id, name=spec.name, created_at=utcnow())
        try:
            with session.begin_nested():
                _fill(row, sealer, spec)
                session.add(row)
        except IntegrityError:  # a concurrent request added it first: this one replaces it
            row = find(session, owner_id, spec.name)
            assert row is not None
    _fill(row, sealer, spec)
    session.flush()
    return row


def _fill(row: ModelSource, sealer: Sealer, spec: SourceSpec) -> None:
    base_url = spec.base_url.rstrip("/")
    if row.base_url != base_url or not spec.virtual_key:
        row.minted_key = None
    row.kind = spec.kind
    row.base_url = base_url
    if not spec.keep_key:
        row.api_key = sealer.seal(spec.api_key) if spec.api_key else None
    row.virtual_key = spec.virtual_key
    row.reasoning_effort = spec.takes_reasoning_effort
    row.updated_at = utcnow()


def find(session: Session, owner_id: int, name: str) -> ModelSource | None:
    if not is_valid_name(name):
        return None
    query = select(ModelSource).where(ModelSource.owner_id == owner_id, ModelSource.name == name)
    return session.scalar(query)


def get(session: Session, owner_id: int, name: str) -> ModelSource:
    """The owner's source `name`; SourceNotFound for any other (another owner's included)."""
    row = find(session, owner_id, name)
    if row is None:
        raise SourceNotFound(f"You have no model source named {name[:64]!r}.")
    return row


def named(session: Session, owner_id: int, name: str) -> ModelSource:
    """The source a setting or a job names; UnknownSource when the owner has none of that name."""
    row = find(session, owner_id, name)
    if row is None:
        raise unknown(name)
    return row


def unknown(name: str) -> UnknownSource:
    return UnknownSource(
        f"'source' names {name[:64]!r}, which is none of your model sources; add it first "
        "(POST /api/model-sources)."
    )


def listed(session: Session, owner_id: int) -> list[ModelSource]:
    query = select(ModelSource).where(ModelSource.owner_id == owner_id).order_by(ModelSource.name)
    return list(session.scalars(query))


def shown(row: ModelSource) -> dict[str, object]:
    """The source as the API shows it: never a key, only whether one is kept."""
    return {
        "name": row.name,
        "kind": row.kind,
        "base_url": row.base_url,
        "api_key_set": row.api_key is not None,
        "virtual_key": row.virtual_key,
        "virtual_key_minted": row.minted_key is not None,
        "takes_reasoning_effort": row.reasoning_effort,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }


def remove(session: Session, owner_id: int, name: str) -> None:
    """Delete the source; refused while the default or a job names it."""
    row = get(session, owner_id, name)
    users = []
    default = session.get(ModelSetting, owner_id)
    if default is not None and default.source == name:
        users.append("your default model (PUT /api/settings/model)")
    jobs = session.scalars(
        select(Job.name).where(Job.owner_id == owner_id, Job.model_source == name).limit(5)
    ).all()
    users += [f"the job {job!r}" for job in jobs]
    if users:
        raise SourceInUse(f"The model source {name!r} is used by {', '.join(users)}.")
    session.delete(row)

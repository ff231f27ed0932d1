"""The owner's secrets (request_secret, /api/secrets): sealed at rest, listed by name only.

A secret belongs to its owner and, when `skill` is named, to that skill alone ("" stands for
none in the table, so the unique key holds). Values leave here only unsealed for a run's
environment; nothing else ever reads them.

A skill's scripts get the secrets it declares (`skillfleet.secrets`) only while the owner
allows that exact version: a grant row of scope `secret` whose key is `secret:<skill>@<full
hash>`. Storing a secret for a skill allows the version the owner was shown (the secret card's,
or the one the Secrets page or the CLI read); any edit changes the hash, and the scripts get
nothing until the owner allows the new one. The grants live apart from the owner's settings
(scope `owner`), which are replaced as a whole list.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import Select, delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from store.errors import StoreError
from store.models import Grant, OwnerSecret, utcnow
from store.secrets import Sealer
from store.skills import current_hashes

SCOPE = "secret"
HOW_TO_GIVE = (
    "the agent can ask for each with request_secret, or the owner sets it with "
    "`skillfleet secrets set NAME --skill {skill}` or on the console's Secrets page"
)


class SecretMissing(StoreError):
    """Raised when a skill's declared secret is not stored, or the owner has not allowed the
    skill's current version to have its secrets."""

    code = "secret_missing"
    status = 409


def grant_key(skill: str, skill_hash: str) -> str:
    """The key of the owner's consent: this skill, at exactly this content hash."""
    return f"secret:{skill}@{skill_hash}"


def put(
    session: Session,
    sealer: Sealer,
    owner_id: int,
    name: str,
    value: str,
    skill: str | None,
    version: str | None = None,
) -> OwnerSecret:
    """Store or replace the owner's secret `name` (of `skill`, when given).

    A secret given for a skill is the owner's consent for the version of it they saw: the
    full content hash `version`, which the caller checked against what it showed them.
    """
    sealed = sealer.seal(value)
    row = session.scalar(_one(owner_id, name, skill))
    if row is None:
        try:
            with session.begin_nested():
                row = OwnerSecret(owner_id=owner_id, name=name, skill_name=skill or "")
                row.value = sealed
                session.add(row)
        except IntegrityError:  # a concurrent request stored it first: this one replaces it
            row = session.scalar(_one(owner_id, name, skill))
            assert row is not None
    row.value = sealed
    row.updated_at = utcnow()
    session.flush()
    if skill and version is not None:
        allow(session, owner_id, skill, version)
    return row


def listed(session: Session, owner_id: int) -> list[OwnerSecret]:
    """The owner's secrets, by skill then name (their values stay sealed)."""
    query = select(OwnerSecret).where(OwnerSecret.owner_id == owner_id)
    return list(session.scalars(query.order_by(OwnerSecret.skill_name, OwnerSecret.name)))


def remove(session: Session, owner_id: int, name: str, skill: str | None) -> bool:
    """Delete one secret; False when there was none."""
    gone = session.execute(
        delete(OwnerSecret).where(
            OwnerSecret.owner_id == owner_id,
            OwnerSecret.name == name,
            OwnerSecret.skill_name == (skill or ""),
        )
    )
    return int(gone.rowcount) == 1  # type: ignore[attr-defined]


def _one(owner_id: int, name: str, skill: str | None) -> Select[OwnerSecret]:
    return select(OwnerSecret).where(
        OwnerSecret.owner_id == owner_id,
        OwnerSecret.name == name,
        OwnerSecret.skill_name == (skill or ""),
    )


# -- the owner's consent, per skill version ---------------------------------------------


def current_hash(session: Session, owner_id: int, skill: str) -> str | None:
    """The content hash of `skill` as the owner sees it (their own before a shared one)."""
    return current_hashes(session, owner_id, {skill}).get(skill)


def allow(session: Session, owner_id: int, skill: str, skill_hash: str) -> None:
    """Let `skill` at `skill_hash` have its declared secrets; older versions lose the grant."""
    key = grant_key(skill, skill_hash)
    session.execute(
        delete(Grant).where(
            Grant.owner_id == owner_id,
            Grant.scope == SCOPE,
            Grant.subject == skill,
            Grant.key != key,
        )
    )
    if allowed(session, owner_id, skill, skill_hash):
        return
    try:
        with session.begin_nested():
            session.add(Grant(owner_id=owner_id, scope=SCOPE, subject=skill, key=key))
    except IntegrityError:  # a concurrent request allowed it first
        pass


def disallow(session: Session, owner_id: int, skill: str) -> bool:
    """Withdraw the consent for every version of `skill`; False when there was none."""
    gone = session.execute(
        delete(Grant).where(
            Grant.owner_id == owner_id, Grant.scope == SCOPE, Grant.subject == skill
        )
    )
    return int(gone.rowcount) > 0  # type: ignore[attr-defined]


def allowed(session: Session, owner_id: int, skill: str, skill_hash: str) -> bool:
    query = select(Grant.id).where(
        Grant.owner_id == owner_id,
        Grant.scope == SCOPE,
        Grant.key == grant_key(skill, skill_hash),
    )
    return session.scalar(query) is not None


def allowed_keys(session: Session, owner_id: int) -> set[str]:
    """Every `secret:<skill>@<hash>` key the owner granted."""
    query = select(Grant.key).where(Grant.owner_id == owner_id, Grant.scope == SCOPE)
    return set(session.scalars(query))


# -- what a run gets ---------------------------------------------------------------------


@dataclass(frozen=True)
class Lack:
    """What keeps a skill's run from its secrets: names with no value, and whether the owner
    has yet to allow this version."""

    missing: tuple[str, ...]
    not_allowed: bool

    def __bool__(self) -> bool:
        return bool(self.missing) or self.not_allowed


def lack(
    session: Session, owner_id: int, skill: str, skill_hash: str, names: Iterable[str]
) -> Lack:
    """What the run of `skill@skill_hash` would lack of `names` (nothing is unsealed)."""
    wanted = tuple(names)
    found = _sealed(session, owner_id, skill, wanted)
    missing = tuple(name for name in wanted if name not in found)
    return Lack(missing, bool(wanted) and not allowed(session, owner_id, skill, skill_hash))


def check(
    session: Session, owner_id: int, skill: str, skill_hash: str, names: Iterable[str]
) -> None:
    """Raise SecretMissing, naming what lacks and how to give it, unless a run may start."""
    lacking = lack(session, owner_id, skill, skill_hash, names)
    if lacking:
        raise SecretMissing(explain(skill, skill_hash, lacking))


def for_run(
    session: Session,
    sealer: Sealer,
    owner_id: int,
    skill: str,
    skill_hash: str,
    names: Iterable[str],
) -> dict[str, str]:
    """The unsealed values of `names` for a run of `skill@skill_hash`: the skill's own secret
    first, else the owner's general one. Raises SecretMissing when one lacks."""
    wanted = tuple(names)
    check(session, owner_id, skill, skill_hash, wanted)
    sealed = _sealed(session, owner_id, skill, wanted)
    return {name: sealer.unseal(sealed[name]) for name in wanted}


def explain(skill: str, skill_hash: str, lacking: Lack) -> str:
    """The sentence a refused call gets: what lacks, and how the owner or agent gives it."""
    parts = []
    if lacking.missing:
        names = ", ".join(lacking.missing)
        parts.append(
            f"HOST: the skill '{skill}' needs the owner's secret{_s(lacking.missing)} {names}, "
            f"which {'is' if len(lacking.missing) == 1 else 'are'} not set; "
            + HOW_TO_GIVE.format(skill=skill)
            + "."
        )
    if lacking.not_allowed:
        parts.append(
            f"HOST: the owner has not allowed this version of '{skill}' ({skill_hash[:8]}) to "
            "have its secrets; a secret stored for the skill allows it, or the owner runs "
            f"`skillfleet secrets allow {skill}` or allows it on the console's Secrets page."
        )
    return " ".join(parts)


def _sealed(session: Session, owner_id: int, skill: str, names: tuple[str, ...]) -> dict[str, str]:
    """The sealed value of each of `names`, the skill's own before the owner's general one."""
    if not names:
        return {}
    rows = session.execute(
        select(OwnerSecret.name, OwnerSecret.skill_name, OwnerSecret.value).where(
            OwnerSecret.owner_id == owner_id,
            OwnerSecret.name.in_(names),
            OwnerSecret.skill_name.in_(("", skill)),
        )
    ).all()
    found: dict[str, str] = {}
    for name, _skill, value in sorted(rows, key=lambda row: row[1] == skill):
        found[name] = value  # the skill's own row sorts last, so it wins
    return found


def _s(items: tuple[str, ...]) -> str:
    return "" if len(items) == 1 else "s"

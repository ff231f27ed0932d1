"""What a run of a skill gets of the owner's secrets: the skill's own first, else the owner's
general one, and only for the exact version the owner allowed."""

from __future__ import annotations

import pytest
from factories import owner_id_of

from store import ownersecrets
from store.db import transaction
from store.secrets import Sealer
from store.tokens import create_owner_token

HASH = "a" * 64
NEW = "b" * 64


@pytest.fixture
def owner(services) -> int:
    with transaction(services.sessions) as session:
        create_owner_token(session, "alice")
    return owner_id_of(services)


def test_the_skills_own_secret_wins_over_the_owners_general_one(services, owner):
    sealer = Sealer(services.settings.keys_dir)
    with transaction(services.sessions) as session:
        ownersecrets.put(session, sealer, owner, "API_TOKEN", "general", None)
        ownersecrets.put(session, sealer, owner, "API_TOKEN", "its-own", "caller")
        ownersecrets.put(session, sealer, owner, "OTHER", "other", None)
        ownersecrets.allow(session, owner, "caller", HASH)
    names = ("API_TOKEN", "OTHER")
    with services.sessions() as session:
        got = ownersecrets.for_run(session, sealer, owner, "caller", HASH, names)
    assert got == {"API_TOKEN": "its-own", "OTHER": "other"}

    with transaction(services.sessions) as session:
        assert ownersecrets.remove(session, owner, "API_TOKEN", "caller")
        got = ownersecrets.for_run(session, sealer, owner, "caller", HASH, names)
    assert got == {"API_TOKEN": "general", "OTHER": "other"}


def test_another_version_or_a_missing_name_gets_nothing_and_says_why(services, owner):
    sealer = Sealer(services.settings.keys_dir)
    with transaction(services.sessions) as session:
        ownersecrets.put(session, sealer, owner, "API_TOKEN", "general", None)
        ownersecrets.allow(session, owner, "caller", HASH)
        ownersecrets.allow(session, owner, "caller", NEW)  # drops the older version's grant
    with services.sessions() as session, pytest.raises(ownersecrets.SecretMissing) as refused:
        ownersecrets.for_run(session, sealer, owner, "caller", HASH, ("API_TOKEN", "MISSING"))
    message = refused.value.message
    assert "MISSING" in message and "API_TOKEN" not in message.split(";")[0]
    assert f"({HASH[:8]})" in message and refused.value.code == "secret_missing"
    with services.sessions() as session:
        assert ownersecrets.lack(session, owner, "caller", NEW, ("API_TOKEN",)).missing == ()
        assert not ownersecrets.lack(session, owner, "caller", NEW, ("API_TOKEN",))

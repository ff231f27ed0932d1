"""OAuth grants in the store, on SQLite and PostgreSQL: a code is exchanged once, a refresh
token rotates the agent token's secret, and reuse of either revokes the host's token."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from store import oauth, oauthclients
from store.db import transaction
from store.models import ApiToken, OAuthRefreshToken
from store.tokens import authenticate, create_owner_token

pytestmark = pytest.mark.both_databases

REDIRECT = "http://127.0.0.1:9/callback"
RESOURCE = "http://127.0.0.1:8750/mcp"


def allowed_code(sessions, owner: str = "alice") -> tuple[str, str]:
    """A registered client's code the owner allowed; its client id and the code."""
    with transaction(sessions) as session:
        create_owner_token(session, owner)
        oauthclients.register_client(
            session, {"client_id": "c-1", "client_name": "Host", "redirect_uris": [REDIRECT]}
        )
        request_id = oauth.open_grant(
            session, "c-1", REDIRECT, True, "challenge", "st", [], RESOURCE
        )
        owner_id = session.scalar(select(ApiToken.owner_id))
        signed = oauth.sign_in(session, request_id, owner_id)
        grant = oauth.signed_in_grant(
            session, request_id, signed, oauth.csrf_token(signed, request_id)
        )
        return "c-1", oauth.allow(session, grant)


def test_a_code_gives_one_agent_token_bound_to_its_resource(services):
    client_id, code = allowed_code(services.sessions)
    with transaction(services.sessions) as session:
        grant, revoked = oauth.find_code(session, client_id, code)
        assert grant is not None and not revoked
        issued = oauth.exchange_code(session, grant, "Host")
    with transaction(services.sessions) as session:
        found = authenticate(session, issued.access_token)
        assert found is not None and found.role == "agent" and found.resource == RESOURCE
        with pytest.raises(oauth.GrantRefused):
            oauth.exchange_code(session, grant, "Host")  # the same grant again: already used


def test_a_code_presented_again_revokes_its_token(services):
    client_id, code = allowed_code(services.sessions)
    with transaction(services.sessions) as session:
        grant, _ = oauth.find_code(session, client_id, code)
        issued = oauth.exchange_code(session, grant, "Host")
    with transaction(services.sessions) as session:
        again, revoked = oauth.find_code(session, client_id, code)
        assert again is None and revoked
    with transaction(services.sessions) as session:
        assert authenticate(session, issued.access_token) is None


def test_a_refresh_rotates_the_secret_and_reuse_revokes_the_family(services):
    client_id, code = allowed_code(services.sessions)
    with transaction(services.sessions) as session:
        grant, _ = oauth.find_code(session, client_id, code)
        first = oauth.exchange_code(session, grant, "Host")
    with transaction(services.sessions) as session:
        row, _ = oauth.find_refresh(session, client_id, first.refresh_token)
        second = oauth.rotate(session, row)
    assert second.token_id == first.token_id
    with transaction(services.sessions) as session:
        assert authenticate(session, first.access_token) is None
        assert authenticate(session, second.access_token) is not None
        reused, revoked = oauth.find_refresh(session, client_id, first.refresh_token)
        assert reused is None and revoked
    with transaction(services.sessions) as session:
        assert authenticate(session, second.access_token) is None
        assert session.scalar(select(OAuthRefreshToken.id)) is None


def test_another_owner_cant_take_over_a_signed_in_request(services):
    with transaction(services.sessions) as session:
        create_owner_token(session, "alice")
        create_owner_token(session, "bob")
        oauthclients.register_client(
            session, {"client_id": "c-2", "client_name": "Host", "redirect_uris": [REDIRECT]}
        )
        request_id = oauth.open_grant(session, "c-2", REDIRECT, True, "ch", None, [], RESOURCE)
        alice, bob = session.scalars(select(ApiToken.owner_id).order_by(ApiToken.id)).all()
        oauth.sign_in(session, request_id, alice)
        with pytest.raises(oauth.AnotherOwner):
            oauth.sign_in(session, request_id, bob)

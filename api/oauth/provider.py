"""The storage behind the MCP SDK's OAuth handlers: what they ask of an authorization server,
answered from store/oauth.py and store/oauthclients.py.

The SDK's handlers (api/oauth/routes.py) check the requests: PKCE S256, the code's client,
redirect URI and expiry, the refresh token's client and scopes, client secrets. This module
only finds, stores and issues, each in a worker thread (the database is synchronous), and
announces every token it changes or deletes, as DELETE /api/tokens does, so every API process
refuses the old secret from its next request on and open streams of it end.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from typing import Any, TypeVar

import anyio.to_thread
import redis
import structlog
from flask import Flask
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    RefreshToken,
    RegistrationError,
    TokenError,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyUrl
from sqlalchemy.orm import Session

from api.auth import CACHE_EXTENSION
from api.oauth.urls import CONSENT_PATH, resource_url
from api.services import Services
from relay import generations, naming
from store import oauth, oauthclients
from store.db import transaction
from store.egress import Egress
from store.errors import StoreError
from store.oauthclients import ClientRefused

log = structlog.get_logger(__name__)
T = TypeVar("T")

# The base URL of the request being served (api/oauth/routes.py sets it).
BASE: contextvars.ContextVar[str] = contextvars.ContextVar("oauth_base")


class Provider:
    """skillfleet as the SDK's OAuthAuthorizationServerProvider."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        self.services: Services = app.extensions["skillfleet"]

    # -- clients ---------------------------------------------------------------------

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        try:
            return await self.resolve_client(client_id)
        except StoreError:
            return None

    async def resolve_client(self, client_id: str) -> OAuthClientInformationFull | None:
        """The client `client_id` names; a metadata document's is fetched (again, when stale).
        ClientRefused or EgressRefused say why a document can't be used."""
        found = await self._run(lambda session: _client_info(session, client_id))
        if found is not None or not oauthclients.is_document_url(client_id):
            return found
        egress = Egress(self.services.settings.egress_allow)
        document = await anyio.to_thread.run_sync(
            functools.partial(oauthclients.fetch_document, client_id, egress)
        )

        def save(session: Session) -> OAuthClientInformationFull:
            return _info(oauthclients.save_document(session, client_id, document))

        return await self._run(save)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        info = client_info.model_dump(mode="json", exclude_none=True)
        try:
            await self._run(lambda session: oauthclients.register_client(session, info))
        except ClientRefused as e:
            raise RegistrationError("invalid_client_metadata", e.message) from e

    # -- authorization ---------------------------------------------------------------

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        base = BASE.get()
        wanted = resource_url(base)
        if not params.resource:
            raise AuthorizeError(
                "invalid_target", f"Name the resource (RFC 8707): resource={wanted}."
            )
        if params.resource != wanted:
            raise AuthorizeError(
                "invalid_target", f"This server grants tokens for {wanted} only, not for "
                f"{params.resource}."
            )  # fmt: skip
        assert client.client_id is not None

        def open_grant(session: Session) -> str:
            return oauth.open_grant(
                session,
                str(client.client_id),
                str(params.redirect_uri),
                params.redirect_uri_provided_explicitly,
                params.code_challenge,
                params.state,
                params.scopes or [],
                wanted,
            )

        request_id = await self._run(open_grant)
        return f"{base}{CONSENT_PATH}?request={request_id}"

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        row, revoked = await self._run(
            lambda session: oauth.find_code(session, str(client.client_id), authorization_code)
        )
        if revoked:
            await self._announce()
        if row is None:
            return None
        return AuthorizationCode(
            code=authorization_code,
            scopes=row.scopes.split(),
            expires_at=row.expires_at.timestamp(),
            client_id=row.client_id,
            code_challenge=row.code_challenge,
            redirect_uri=AnyUrl(row.redirect_uri),
            redirect_uri_provided_explicitly=row.redirect_uri_explicit,
            resource=row.resource,
            subject=str(row.owner_id),
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        label = oauthclients.display_name(client.model_dump(mode="json"))

        def exchange(session: Session) -> oauth.Issued:
            row, _ = oauth.find_code(session, str(client.client_id), authorization_code.code)
            if row is None:
                raise oauth.GrantRefused("This code was already used.")
            return oauth.exchange_code(session, row, label)

        issued = await self._token_call(exchange)
        return _token(issued, authorization_code.scopes)

    # -- refresh -----------------------------------------------------------------------

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        row, revoked = await self._run(
            lambda session: oauth.find_refresh(session, str(client.client_id), refresh_token)
        )
        if revoked:
            log.warning(
                "refresh token used twice: its agent token revoked", client=client.client_id
            )
            await self._announce()
        if row is None:
            return None
        return RefreshToken(
            token=refresh_token,
            client_id=row.client_id,
            scopes=row.scopes.split(),
            expires_at=int(row.expires_at.timestamp()),
        )

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        def rotate(session: Session) -> oauth.Issued:
            row = oauth.refresh_row(session, str(client.client_id), refresh_token.token)
            if row is None:
                raise oauth.GrantRefused("This refresh token is not known.")
            # Used meanwhile by a refresh that ran at once with this one: a reuse, whose
            # revocation _token_call makes in a transaction of its own (this one rolls back).
            return oauth.rotate(session, row)

        issued = await self._token_call(rotate)
        await self._announce()  # the agent token's old secret is refused from now on
        return _token(issued, scopes)

    # -- access tokens -----------------------------------------------------------------

    async def load_access_token(self, token: str) -> AccessToken | None:
        """An OAuth agent token, for revocation (RFC 7009); /mcp checks tokens as /api does."""

        def load(session: Session) -> AccessToken | None:
            found = oauth.access_client(session, token)
            if found is None:
                return None
            client_id, row = found
            expires = int(row.expires_at.timestamp()) if row.expires_at else None
            return AccessToken(
                token=token, client_id=client_id, scopes=[], expires_at=expires,
                resource=row.resource,
            )  # fmt: skip

        return await self._run(load)

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        def revoke(session: Session) -> None:
            family = oauth.family_of(session, token.client_id, token.token)
            if family is not None:
                oauth.revoke_family(session, family)

        await self._run(revoke)
        await self._announce()

    # -- plumbing ------------------------------------------------------------------------

    async def _token_call(self, work: Callable[[Session], oauth.Issued]) -> oauth.Issued:
        try:
            return await self._run(work)
        except oauth.RefreshReused as e:
            family = e.token_id
            await self._run(lambda session: oauth.revoke_family(session, family))
            await self._announce()
            raise TokenError("invalid_grant", e.message) from e
        except StoreError as e:
            raise TokenError("invalid_grant", e.message) from e

    async def _run(self, work: Callable[[Session], T]) -> T:
        def in_transaction() -> T:
            with transaction(self.services.sessions) as session:
                return work(session)

        return await anyio.to_thread.run_sync(in_transaction)

    async def _announce(self) -> None:
        """Tell every API process that tokens changed (as deleting one does)."""

        def bump() -> None:
            self.app.extensions[CACHE_EXTENSION].clear()
            try:
                generations.bump(self.services.redis, naming.tokens_generation())
            except redis.RedisError as e:
                log.warning("could not announce an OAuth token change", error=str(e))

        await anyio.to_thread.run_sync(bump)


def _client_info(session: Session, client_id: str) -> OAuthClientInformationFull | None:
    row = oauthclients.find_client(session, client_id)
    return None if row is None else _info(row)


def _info(row: Any) -> OAuthClientInformationFull:
    return OAuthClientInformationFull.model_validate({**row.info, "client_id": row.client_id})


def _token(issued: oauth.Issued, scopes: list[str]) -> OAuthToken:
    return OAuthToken(
        access_token=issued.access_token,
        token_type="Bearer",
        expires_in=issued.expires_in,
        refresh_token=issued.refresh_token,
        scope=" ".join(scopes) or None,
    )

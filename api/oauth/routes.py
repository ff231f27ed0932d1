"""The OAuth 2.1 endpoints MCP hosts sign in through, on the API's own port: the MCP SDK's
handlers (PKCE, codes, refresh, registration, revocation) over api/oauth/provider.py, and the
two metadata documents that tell a host where they are.

- `/.well-known/oauth-protected-resource/mcp` (RFC 9728): /mcp is the resource, skillfleet its
  authorization server.
- `/.well-known/oauth-authorization-server` (RFC 8414): S256 PKCE only, client ID metadata
  documents (CIMD) first and dynamic registration (RFC 7591) as the fallback, public clients.
- `/oauth/authorize`: a CIMD client's document is fetched first, so a refused one gets its
  reason; then the SDK's handler, which sends the owner to the consent page (api/oauth/consent.py).
- `/oauth/token`, `/oauth/register`, `/oauth/revoke`: the SDK's handlers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from mcp.server.auth.handlers.authorize import AuthorizationHandler
from mcp.server.auth.handlers.register import RegistrationHandler
from mcp.server.auth.handlers.revoke import RevocationHandler
from mcp.server.auth.handlers.token import TokenHandler
from mcp.server.auth.json_response import PydanticJSONResponse
from mcp.server.auth.middleware.client_auth import ClientAuthenticator
from mcp.server.auth.settings import ClientRegistrationOptions
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, RequestBodyLimitMiddleware
from mcp.shared.auth import OAuthMetadata, ProtectedResourceMetadata
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, Router, request_response
from starlette.types import ASGIApp

from api.oauth.provider import BASE, Provider
from api.oauth.urls import (
    AUTHORIZE_PATH,
    MCP_PATH,
    REGISTER_PATH,
    RESOURCE_METADATA_PATH,
    REVOKE_PATH,
    SERVER_METADATA_PATH,
    TOKEN_PATH,
    base_url,
    resource_url,
)
from store.errors import StoreError

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
AUTH_METHODS = ["none", "client_secret_post", "client_secret_basic"]
NO_STORE = {"Cache-Control": "no-store"}


class OAuthEndpoints:
    """The ASGI app of the OAuth paths (api/oauth/urls.PATHS)."""

    def __init__(self, provider: Provider, public_url: str | None) -> None:
        self.provider = provider
        self.public_url = public_url
        authenticator = ClientAuthenticator(provider)  # type: ignore[arg-type]
        token = TokenHandler(provider, authenticator)  # type: ignore[arg-type]
        register = RegistrationHandler(provider, ClientRegistrationOptions(enabled=True))  # type: ignore[arg-type]
        revoke = RevocationHandler(provider, authenticator)  # type: ignore[arg-type]
        self.authorization = AuthorizationHandler(provider)  # type: ignore[arg-type]
        read = ["GET", "OPTIONS"]
        post = ["POST", "OPTIONS"]
        authorize = _limited(request_response(self.authorize))
        self.router = Router(
            routes=[
                Route(RESOURCE_METADATA_PATH + MCP_PATH, _cors(self.resource, read), methods=read),
                Route(RESOURCE_METADATA_PATH, _cors(self.resource, read), methods=read),
                Route(SERVER_METADATA_PATH, _cors(self.server, read), methods=read),
                Route(AUTHORIZE_PATH, authorize, methods=["GET", "POST"]),
                Route(TOKEN_PATH, _cors(token.handle, post, limited=True), methods=post),
                Route(REGISTER_PATH, _cors(register.handle, post, limited=True), methods=post),
                Route(REVOKE_PATH, _cors(revoke.handle, post, limited=True), methods=post),
            ]
        )

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        reset = BASE.set(base_url(scope, self.public_url))
        try:
            await self.router(scope, receive, send)
        finally:
            BASE.reset(reset)

    async def resource(self, request: Request) -> Response:
        base = BASE.get()
        # Validated from text, so the model keeps each URL exactly (no "/" added to the base).
        metadata = ProtectedResourceMetadata.model_validate(
            {
                "resource": resource_url(base),
                "authorization_servers": [base],
                "resource_name": "skillfleet",
            }
        )
        return PydanticJSONResponse(metadata)

    async def server(self, request: Request) -> Response:
        base = BASE.get()
        metadata = OAuthMetadata.model_validate(
            {
                "issuer": base,
                "authorization_endpoint": base + AUTHORIZE_PATH,
                "token_endpoint": base + TOKEN_PATH,
                "registration_endpoint": base + REGISTER_PATH,
                "revocation_endpoint": base + REVOKE_PATH,
                "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", "refresh_token"],
                "token_endpoint_auth_methods_supported": AUTH_METHODS,
                "revocation_endpoint_auth_methods_supported": AUTH_METHODS,
                "code_challenge_methods_supported": ["S256"],
                "client_id_metadata_document_supported": True,
                "authorization_response_iss_parameter_supported": True,
            }
        )
        return PydanticJSONResponse(metadata)

    async def authorize(self, request: Request) -> Response:
        """A CIMD client's document is fetched before the SDK's handler looks the client up,
        so one that can't be used is refused with its reason, not as an unknown client."""
        params = request.query_params if request.method == "GET" else await request.form()
        client_id = params.get("client_id")
        if isinstance(client_id, str) and client_id.startswith(("https://", "http://")):
            try:
                await self.provider.resolve_client(client_id)
            except StoreError as e:
                body = {"error": "invalid_client", "error_description": e.message}
                return JSONResponse(body, status_code=400, headers=NO_STORE)
        return await self.authorization.handle(request)


def _limited(app: ASGIApp) -> ASGIApp:
    return RequestBodyLimitMiddleware(app, DEFAULT_MAX_REQUEST_BODY_SIZE)


def _cors(
    handler: Callable[[Request], Awaitable[Response]], methods: list[str], limited: bool = False
) -> ASGIApp:
    """Any origin may read the metadata and call the token endpoints (a host in a browser, as
    the MCP Inspector is); they carry no cookie."""
    app = request_response(handler)
    return CORSMiddleware(
        _limited(app) if limited else app,
        allow_origins=["*"],
        allow_methods=methods,
        allow_headers=["mcp-protocol-version", "authorization", "content-type"],
    )

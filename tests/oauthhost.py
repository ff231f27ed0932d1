"""An MCP host signing in through OAuth, as remote hosts do: the MCP SDK's OAuthClientProvider,
with the owner's consent given by an HTTP client posting the consent page's forms."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import anyio.to_thread
import httpx
from conftest import TLS
from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from pydantic import AnyUrl

REDIRECT = "http://127.0.0.1:9/callback"  # never reached: the test reads the redirect itself
_FIELD = re.compile(r'name="(request|csrf)" value="([^"]*)"')


def fields(page: str) -> dict[str, str]:
    """The hidden fields (request, csrf) of a consent page's form."""
    return dict(_FIELD.findall(page))


def sign_in(client: httpx.Client, consent_url: str, owner_token: str) -> httpx.Response:
    """Open the consent page and sign in on it; the answer is the Allow/Deny page."""
    page = client.get(consent_url)
    assert page.status_code == 200, page.text
    return client.post(
        consent_url.split("?")[0],
        data={**fields(page.text), "token": owner_token, "decision": "sign-in"},
    )


def consent(
    client: httpx.Client, authorization_url: str, owner_token: str, decision: str = "allow"
) -> httpx.Response:
    """The owner's answer to an authorization request, as a browser posts it: the redirect
    back to the host (303), or the refusal."""
    opened = client.get(authorization_url)
    assert opened.status_code == 302, opened.text
    consent_url = opened.headers["location"]
    signed = sign_in(client, consent_url, owner_token)
    assert signed.status_code == 200, signed.text
    return client.post(
        consent_url.split("?")[0], data={**fields(signed.text), "decision": decision}
    )


def query(response: httpx.Response) -> dict[str, str]:
    """The parameters of a redirect back to the host."""
    return {k: v[0] for k, v in parse_qs(urlsplit(response.headers["location"]).query).items()}


@dataclass
class MemoryStorage(TokenStorage):
    """A host's tokens and client registration, kept in memory."""

    tokens: OAuthToken | None = None
    client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


@dataclass
class Host:
    """An MCP host's OAuth side: the SDK's provider, the owner who consents, what it saw."""

    url: str
    owner_token: str
    name: str = "Test Host"
    storage: MemoryStorage = field(default_factory=MemoryStorage)
    authorizations: list[str] = field(default_factory=list)
    answer: AuthorizationCodeResult | None = None

    def provider(self) -> OAuthClientProvider:
        metadata = OAuthClientMetadata(
            client_name=self.name,
            redirect_uris=[AnyUrl(REDIRECT)],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        )
        return OAuthClientProvider(
            f"{self.url}/mcp",
            metadata,
            self.storage,
            redirect_handler=self.redirect,
            callback_handler=self.callback,
        )

    async def redirect(self, authorization_url: str) -> None:
        self.authorizations.append(authorization_url)
        answer = await anyio.to_thread.run_sync(self._consent, authorization_url)
        found = query(answer)
        self.answer = AuthorizationCodeResult(
            code=found["code"], state=found.get("state"), iss=found.get("iss")
        )

    async def callback(self) -> AuthorizationCodeResult:
        assert self.answer is not None
        return self.answer

    def _consent(self, authorization_url: str) -> httpx.Response:
        with httpx.Client(verify=TLS, timeout=30) as client:
            answer = consent(client, authorization_url, self.owner_token)
        assert answer.status_code == 303, answer.text
        return answer

"""Where the OAuth endpoints and the protected resource live, as a host sees them.

The base is SKILLFLEET_PUBLIC_URL when set (behind a proxy, or under another name), else the
scheme and Host of the request being answered; every URL the metadata names, and the resource
an OAuth token is bound to, come from it.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

from starlette.datastructures import Headers

MCP_PATH = "/mcp"
RESOURCE_METADATA_PATH = "/.well-known/oauth-protected-resource"
SERVER_METADATA_PATH = "/.well-known/oauth-authorization-server"
AUTHORIZE_PATH = "/oauth/authorize"
TOKEN_PATH = "/oauth/token"
REGISTER_PATH = "/oauth/register"
REVOKE_PATH = "/oauth/revoke"
CONSENT_PATH = "/oauth/consent"
# Served by the SDK's handlers (api/oauth/routes.py); the consent page is the Flask app's.
PATHS = frozenset(
    {
        RESOURCE_METADATA_PATH,
        RESOURCE_METADATA_PATH + MCP_PATH,
        SERVER_METADATA_PATH,
        AUTHORIZE_PATH,
        TOKEN_PATH,
        REGISTER_PATH,
        REVOKE_PATH,
    }
)


def base_url(scope: MutableMapping[str, Any], public_url: str | None) -> str:
    """The API's base URL for a request's `scope` (no trailing slash)."""
    if public_url:
        return public_url
    host = Headers(scope=scope).get("host")
    if not host:
        server = scope.get("server") or ("127.0.0.1", 80)
        host = f"{server[0]}:{server[1]}"
    return f"{scope.get('scheme', 'http')}://{host}"


def resource_url(base: str) -> str:
    """The protected resource: /mcp, exactly as a token is bound to it."""
    return base + MCP_PATH


def resource_metadata_url(base: str) -> str:
    """RFC 9728's metadata of /mcp: the well-known path with the resource's path after it."""
    return base + RESOURCE_METADATA_PATH + MCP_PATH

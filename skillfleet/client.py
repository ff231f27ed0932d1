"""A small HTTP client of the skillfleet API for the CLI."""

from __future__ import annotations

from typing import Any

import httpx

from store.limits import MAX_PAGE_SIZE
from store.settings import ClientSettings

TOKEN_HINT = "export SKILLFLEET_TOKEN=… (the owner token `make up` printed, on its `export` line)"
# The API names its own parameters in a few messages; the CLI's user knows them as options.
CLI_SPELLING = {
    "pass replace=true": "pass --replace",
    "name (name= in the API, --name in the CLI)": "name (--name)",
}


class ClientError(Exception):
    """Raised when the API answers with an error or can't be reached."""

    def __init__(self, message: str, code: str = "error", errors: list[Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.errors = errors or []


class Client:
    def __init__(self, settings: ClientSettings, timeout: float | None = 60.0) -> None:
        headers = {"User-Agent": "skillfleet-cli"}
        if settings.token:
            headers["Authorization"] = f"Bearer {settings.token}"
        self.base = settings.url
        self.has_token = bool(settings.token)
        self.http = httpx.Client(base_url=settings.url, headers=headers, timeout=timeout)

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as e:
            raise ClientError(
                f"Can't reach skillfleet at {self.base}: {e}. Is `skillfleet up` running?",
                code="unreachable",
            ) from e
        if response.status_code >= 400:
            raise self._error(response)
        return response

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.request(method, path, **kwargs)
        return response.json() if response.content else None

    def listing(
        self, path: str, params: dict[str, Any] | None = None, limit: int | None = None
    ) -> tuple[list[Any], bool]:
        """A list route's items, page after page (the Link header's rel="next" address), up
        to `limit` (None: all); and whether more were left unread."""
        items: list[Any] = []
        query = dict(params or {})
        if limit is not None:
            query["page_size"] = max(1, min(limit, MAX_PAGE_SIZE))
        address: str | None = path
        while address is not None:
            # httpx's params replace an address's query: the next address carries its own.
            response = self.request("GET", address, **({"params": query} if query else {}))
            items.extend(response.json())
            query = {}
            address = response.links.get("next", {}).get("url")
            if limit is not None and len(items) >= limit:
                return items[:limit], address is not None or len(items) > limit
        return items, False

    def error_of(self, response: httpx.Response) -> ClientError:
        """The error a read response of 4xx or 5xx stands for, in the CLI's words."""
        return self._error(response)

    def _error(self, response: httpx.Response) -> ClientError:
        """The API's error in the CLI's words: its options, and how to give it a token."""
        error = _error(response)
        if response.status_code == 401:
            if self.has_token:
                error.message = f"SKILLFLEET_TOKEN is not a valid token here: {TOKEN_HINT}."
            else:
                error.message = f"No token: {TOKEN_HINT}, then try again."
        error.message = cli_words(error.message)
        return error


def cli_words(message: str) -> str:
    """`message` with the API's parameters spelled as the CLI's options."""
    for api_words, cli in CLI_SPELLING.items():
        message = message.replace(api_words, cli)
    return message


def _error(response: httpx.Response) -> ClientError:
    try:
        body = response.json()
    except ValueError:
        return ClientError(f"HTTP {response.status_code}: {response.text[:200]}")
    if not isinstance(body, dict):
        return ClientError(f"HTTP {response.status_code}")
    errors = body.get("errors")
    return ClientError(
        str(body.get("message") or f"HTTP {response.status_code}"),
        code=str(body.get("code") or "error"),
        errors=errors if isinstance(errors, list) else [],
    )

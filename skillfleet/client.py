"""A small HTTP client of the skillfleet API for the CLI."""

from __future__ import annotations

from typing import Any

import httpx

from store.settings import ClientSettings


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
            raise _error(response)
        return response

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.request(method, path, **kwargs)
        return response.json() if response.content else None


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

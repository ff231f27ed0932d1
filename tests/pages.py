"""Following a list route's pages as a client does: the Link header's rel="next" address."""

from __future__ import annotations

import re
from typing import Any

NEXT = re.compile(r'<([^>]*)>;\s*rel="next"')


def next_link(response: Any) -> str | None:
    """The next page's address in the answer's Link header (None: this was the last page)."""
    found = NEXT.search(response.headers.get("Link", ""))
    return found.group(1) if found else None


def cursor_of(response: Any) -> str:
    """The cursor of the next page's address."""
    link = next_link(response)
    assert link is not None, "no next page"
    return link.rsplit("cursor=", 1)[1]


def walk(client: Any, path: str, headers: dict[str, str]) -> list[list[Any]]:
    """Every page of a list, first to last, following the Link headers."""
    pages = []
    address: str | None = path
    while address is not None:
        response = client.get(address, headers=headers)
        assert response.status_code == 200, response.json
        pages.append(response.json)
        address = next_link(response)
        assert len(pages) < 1000, "the pages never end"
    return pages

"""Short ids: every CLI command that takes an id also takes a unique start of it, such as the
eight characters the console shows.

A whole id is used as it is. A shorter one is looked for in the owner's list of that kind
(every page of it, through the same route `list` uses, so a token sees only what it may): one
match is the id, none is `<kind>_not_found`, several are `ambiguous_id` naming them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from skillfleet.client import Client, ClientError
from store.limits import MAX_PAGE_SIZE

# ids made by uuid.uuid4(), written as str() writes them
WHOLE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
START = re.compile(r"[0-9a-f][0-9a-f-]{0,35}")
SHOWN_CANDIDATES = 10


@dataclass(frozen=True)
class Kind:
    """One kind of thing with an id: its name in messages, its list route and its id field."""

    name: str
    list_path: str
    field: str = "id"


RUN = Kind("run", "/api/runs", "run_id")
APPROVAL = Kind("approval", "/api/approvals")
QUESTION = Kind("question", "/api/questions")
JOB = Kind("job", "/api/jobs")


def job_run(job_id: str) -> Kind:
    """The runs of one job (its id whole)."""
    return Kind("job run", f"/api/jobs/{job_id}/runs")


def resolve(client: Client, kind: Kind, given: str) -> str:
    """The whole id that `given` is, or starts; ClientError when none or several match."""
    text = given.strip().lower()
    if WHOLE.fullmatch(text):
        return text
    if not START.fullmatch(text):
        raise _not_found(kind, given)
    found = [item for item in _ids(client, kind) if item.startswith(text)]
    if not found:
        raise _not_found(kind, given)
    if len(found) > 1:
        shown = ", ".join(found[:SHOWN_CANDIDATES])
        more = f" and {len(found) - SHOWN_CANDIDATES} more" if len(found) > SHOWN_CANDIDATES else ""
        raise ClientError(
            f"'{given}' is the start of {len(found)} {kind.name} ids: {shown}{more}. "
            "Give more of the id.",
            code="ambiguous_id",
        )
    return found[0]


def resolve_token(given: str) -> int:
    """A token's id is a number, given whole (as the console and `tokens list` show it)."""
    text = given.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 10:
        raise ClientError(
            f"A token's id is the number `skillfleet tokens list` shows, not '{given}'.",
            code="token_not_found",
        )
    return int(text)


def _ids(client: Client, kind: Kind) -> Iterator[str]:
    items, _ = client.listing(kind.list_path, {"page_size": MAX_PAGE_SIZE})
    for item in items:
        yield str(item[kind.field])


def _not_found(kind: Kind, given: str) -> ClientError:
    code = kind.name.replace(" ", "_") + "_not_found"
    return ClientError(f"You have no {kind.name} whose id starts with '{given}'.", code=code)

"""Keyset pagination of every list route: `?page_size=` and an opaque `?cursor=`, the next page
in an RFC 8288 `Link: <...>; rel="next"` header.

A page is the rows after the last one of the page before in the list's order (newest first:
`created_at` then `id`, both descending; by name: ascending), never an OFFSET: a deep page
costs what the first does, and rows inserted meanwhile neither repeat nor skip one.

The cursor holds that last row's order key, the owner, and a digest of the route and its
filters, signed with HMAC-SHA256 under a key derived from the server's secret key (the one in
`SKILLFLEET_KEYS_DIR` every API process shares). A cursor that was changed, is of another
format, another owner, another list or other filters is refused: 400 `invalid_cursor`.

No list counts all its rows: the first page (no cursor) carries `X-Total-Count`, for a
database list the matching rows counted up to `COUNT_CAP` (`1000+` past it), for a list held in
memory (at most a few hundred items) its exact length.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Callable, Sequence
from copy import deepcopy
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache, wraps
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode

import marshmallow as ma
from flask import current_app, request
from flask_smorest.utils import unpack_tuple_response
from sqlalchemy import Select, func, literal, select, tuple_
from sqlalchemy.orm import InstrumentedAttribute, Session
from sqlalchemy.types import TypeDecorator

from api.blueprint import Blueprint
from api.errors import ApiError
from api.services import services
from store import secrets
from store.limits import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE

Row = TypeVar("Row")
Key = tuple[Any, ...]

CURSOR_VERSION = 1
COUNT_CAP = 1000
MAX_CURSOR_CHARS = 2000
TOTAL_HEADER = "X-Total-Count"
_KEY_PURPOSE = b"skillfleet list cursors"


class PageQuerySchema(ma.Schema):
    """The paging arguments every list route reads."""

    class Meta:
        unknown = ma.EXCLUDE

    page_size = ma.fields.Integer(
        load_default=DEFAULT_PAGE_SIZE,
        validate=ma.validate.Range(min=1, max=MAX_PAGE_SIZE),
        metadata={"description": f"Items per page (default {DEFAULT_PAGE_SIZE})"},
    )
    cursor = ma.fields.String(
        validate=ma.validate.Length(min=1, max=MAX_CURSOR_CHARS),
        metadata={"description": "Where the page starts: the cursor of the Link header's "
                  'rel="next" address; none for the first page'},
    )  # fmt: skip

    @ma.validates_schema(pass_original=True)
    def _no_page_numbers(self, data: Any, original: Any, **_: Any) -> None:
        """`?page=` was the number of an OFFSET page: refused, not ignored, so a client that
        still counts pages is told rather than shown the first page again and again."""
        if "page" in original:
            message = 'Lists page by cursor: follow the Link header\'s rel="next" address.'
            raise ma.ValidationError(message, field_name="page")


@dataclass
class Page:
    """The page a request asks for, and what the view found for the next one."""

    size: int
    cursor: str | None
    scope: str  # the route and its filters, digested
    next_key: Key | None = None
    total: str | None = None
    _owner: int | None = field(default=None, repr=False)

    def after(self, owner: int) -> Key | None:
        """The order key the page starts after (None: the first page); the cursor must be
        `owner`'s, for this route and these filters, else 400 `invalid_cursor`."""
        self._owner = owner
        if self.cursor is None:
            return None
        return _decode(self.cursor, owner, self.scope)

    def next_cursor(self) -> str | None:
        if self.next_key is None or self._owner is None:
            return None
        return _encode(self._owner, self.scope, self.next_key)


def keyset(blp: Blueprint) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Page the view by cursor: it gets `page` and fills it with `sql_page` or `memory_page`;
    the answer gets the Link header to the next page and, when known, `X-Total-Count`."""
    schema = PageQuerySchema()

    def decorator(view: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            params = blp.ARGUMENTS_PARSER.parse(schema, request, location="query")
            page = Page(params["page_size"], params.get("cursor"), _scope())
            kwargs["page"] = page
            result, status, headers = unpack_tuple_response(
                current_app.ensure_sync(view)(*args, **kwargs)
            )
            headers = dict(headers or {})
            following = page.next_cursor()
            if following is not None:
                headers["Link"] = f'<{_next_address(following)}>; rel="next"'
            if page.total is not None:
                headers[TOTAL_HEADER] = page.total
            return result, status, headers

        wrapper._apidoc = deepcopy(getattr(wrapper, "_apidoc", {}))  # type: ignore[attr-defined]
        wrapper._apidoc["pagination"] = {  # type: ignore[attr-defined]
            "parameters": {"in": "query", "schema": PageQuerySchema},
            "response": {400: "BAD_REQUEST", 422: "UNPROCESSABLE_ENTITY"},
        }
        return wrapper

    return decorator


def sql_page(
    session: Session,
    statement: Select[Row],
    page: Page,
    owner: int,
    order: Sequence[InstrumentedAttribute[Any]],
    descending: bool = True,
) -> list[Row]:
    """One page of `statement` (not yet ordered) in `order`, after the cursor's row."""
    after = page.after(owner)
    if page.cursor is None:
        page.total = capped_count(session, statement)
    if after is not None:
        if len(after) != len(order):
            raise invalid_cursor()
        pairs = list(zip(after, order, strict=True))
        if not all(isinstance(value, _python_type(column)) for value, column in pairs):
            raise invalid_cursor()  # signed, but not a key of this order (never sent to SQL)
        bound = tuple_(*(literal(value, column.type) for value, column in pairs))
        row_key = tuple_(*order)
        statement = statement.where(row_key < bound if descending else row_key > bound)
    ordered = statement.order_by(*(c.desc() if descending else c.asc() for c in order))
    rows = list(session.scalars(ordered.limit(page.size + 1)))
    if len(rows) > page.size:
        rows = rows[: page.size]
        page.next_key = tuple(getattr(rows[-1], column.key) for column in order)
    return rows


def _python_type(column: InstrumentedAttribute[Any]) -> type:
    """What Python type a column's values are (a TypeDecorator's: its implementation's)."""
    kind = column.type
    if isinstance(kind, TypeDecorator):
        kind = kind.impl_instance
    found: type = kind.python_type
    return found


def capped_count(session: Session, statement: Select[Any]) -> str:
    """How many rows `statement` matches, counted up to COUNT_CAP: `"37"` or `"1000+"`."""
    rows = statement.with_only_columns(literal(1), maintain_column_froms=True)
    capped = rows.order_by(None).limit(COUNT_CAP + 1).subquery()
    count = session.scalar(select(func.count()).select_from(capped)) or 0
    return f"{COUNT_CAP}+" if count > COUNT_CAP else str(count)


def memory_page(
    items: Sequence[Row],
    page: Page,
    owner: int,
    key: Callable[[Row], Key] | None = None,
    descending: bool = False,
) -> list[Row]:
    """One page of a short list already in memory and in `key`'s order (descending or not),
    cut before each item is shown (which may cost a query per item). Without a key, an item's
    place is its key: for a list that is the same on every request (the tools)."""
    if key is None:
        places = {id(item): (place,) for place, item in enumerate(items)}
        return memory_page(items, page, owner, lambda item: places[id(item)])
    after = page.after(owner)
    if page.cursor is None:
        page.total = str(len(items))
    if after is not None:
        try:
            items = [i for i in items if (key(i) < after if descending else key(i) > after)]
        except TypeError as e:  # a key of another shape than this list's
            raise invalid_cursor() from e
    found = list(items[: page.size])
    if len(items) > page.size:
        page.next_key = key(found[-1])
    return found


def invalid_cursor() -> ApiError:
    return ApiError(
        400,
        "invalid_cursor",
        "The cursor is not one this list gave for these filters: "
        "ask for the first page again (no cursor).",
    )


def _scope() -> str:
    """The route and its filters (every query argument but the paging ones), digested."""
    filters = sorted(
        (name, value)
        for name, values in request.args.lists()
        if name not in ("cursor", "page_size")
        for value in values
    )
    view_args = sorted((request.view_args or {}).items())
    text = json.dumps([request.endpoint, view_args, filters], default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _next_address(cursor: str) -> str:
    kept = [(n, v) for n, vs in request.args.lists() if n != "cursor" for v in vs]
    return f"{request.script_root}{request.path}?{urlencode([*kept, ('cursor', cursor)])}"


@lru_cache(maxsize=8)
def _cursor_key(keys_dir: Path) -> bytes:
    """A key for cursors only, derived from the server's secret key."""
    return hmac.new(secrets.load_or_create_key(keys_dir), _KEY_PURPOSE, hashlib.sha256).digest()


def _mac(body: bytes) -> bytes:
    key = _cursor_key(services().settings.keys_dir)
    return hmac.new(key, body, hashlib.sha256).digest()


def _encode(owner: int, scope: str, row_key: Key) -> str:
    values = [_tagged(value) for value in row_key]
    body = json.dumps(
        {"v": CURSOR_VERSION, "o": owner, "s": scope, "k": values}, separators=(",", ":")
    ).encode()
    return f"{_b64(body)}.{_b64(_mac(body))}"


def _decode(cursor: str, owner: int, scope: str) -> Key:
    try:
        body_text, mac_text = cursor.split(".")
        body, mac = _unb64(body_text), _unb64(mac_text)
    except (ValueError, binascii.Error) as e:
        raise invalid_cursor() from e
    if not hmac.compare_digest(mac, _mac(body)):
        raise invalid_cursor()
    try:
        found = json.loads(body)
        if found["v"] != CURSOR_VERSION or found["o"] != owner or found["s"] != scope:
            raise invalid_cursor()
        if not isinstance(found["k"], list):
            raise invalid_cursor()
        return tuple(_untagged(value) for value in found["k"])
    except (ValueError, KeyError, TypeError) as e:
        raise invalid_cursor() from e


def _tagged(value: Any) -> Any:
    """A key value as JSON: timestamps kept as timestamps."""
    if isinstance(value, datetime):
        return {"t": value.isoformat()}
    if value is None or isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(f"A list's order key holds {type(value).__name__}: {value!r}")
    return value


def _untagged(value: Any) -> Any:
    if isinstance(value, dict):
        return datetime.fromisoformat(value["t"])
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(value)
    return value


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    if not text or len(text) > MAX_CURSOR_CHARS:
        raise ValueError(text)
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))

"""flask-smorest's Blueprint, with request bodies read by skillfleet's JSON codec and the
paging headers documented as they are sent.

webargs reads a JSON body with the standard library, which raises RecursionError on an array
nested some thousand levels deep and ValueError on an integer of over 4,300 digits: 500s for
bad input. `store.jsoncodec.decode` reads both as bad JSON, and is the decoder the rest of the
API uses; a body that is not JSON is 400 `invalid_json` on every route, as on the skill import.

A list route (`api.paging.keyset`) answers with `Link` (RFC 8288, the next page's address,
absent on the last page) and `X-Total-Count` (the first page's count, capped): both are
documented on every list's 200 answer in place of flask-smorest's `X-Pagination`.
"""

from __future__ import annotations

import json
from typing import Any

import flask
import flask_smorest
import marshmallow as ma
from webargs import core
from webargs.flaskparser import FlaskParser, is_json_request

from api.errors import ApiError
from store import jsoncodec

LINK_HEADER_COMPONENT = "NEXT_PAGE_LINK"
LINK_HEADER = {
    "description": "The next page, as RFC 8288 says: `</api/runs?page_size=25&cursor=...>; "
    'rel="next"`. Absent on the last page.',
    "schema": {"type": "string"},
}
TOTAL_HEADER_COMPONENT = "TOTAL_COUNT"
TOTAL_HEADER = {
    "description": "The list's count of matching items, on its first page (no cursor) only: "
    "exact up to 1000, `1000+` past it, so no request counts a whole table",
    "schema": {"type": "string", "pattern": "^[0-9]+\\+?$"},
}


class Parser(FlaskParser):
    def load_json(self, req: flask.Request, schema: ma.Schema) -> Any:
        """The JSON body (missing when there is none); text that is not JSON is refused."""
        if not is_json_request(req):
            return core.missing
        data = req.get_data(cache=True)
        if not data:
            return core.missing
        try:
            return jsoncodec.decode(data)
        except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
            raise invalid_json(e) from e


def invalid_json(error: ValueError) -> ApiError:
    """400 `invalid_json`, saying why the body is not JSON and, for a syntax error, where."""
    if not isinstance(error, json.JSONDecodeError):
        reason = "it is not UTF-8 text"
    elif error.doc == error.msg:  # the codec's own reason: no position in the text is at fault
        reason = error.msg
    else:
        reason = f"{error.msg} (line {error.lineno}, column {error.colno})"
    return ApiError(400, "invalid_json", f"The request body is not valid JSON: {reason}.")


def register_components(api: flask_smorest.Api) -> None:
    """Add the components the blueprints refer to by name to `api`'s document."""
    api.spec.components.header(LINK_HEADER_COMPONENT, LINK_HEADER, lazy=True)
    api.spec.components.header(TOTAL_HEADER_COMPONENT, TOTAL_HEADER, lazy=True)


class Blueprint(flask_smorest.Blueprint):  # type: ignore[misc]
    ARGUMENTS_PARSER = Parser()

    PAGINATION_HEADER_NAME = None  # flask-smorest's X-Pagination: not sent

    def register_views_in_doc(
        self, api: Any, app: flask.Flask, spec: Any, *, name: str, parameters: Any
    ) -> None:
        """Document the views in `spec`, unless `api` takes a document an earlier app of
        the process made (api/app.py): it holds them already."""
        if getattr(api, "kept_document", None) is not None:
            return
        super().register_views_in_doc(api, app, spec, name=name, parameters=parameters)

    def _document_pagination_metadata(self, spec: Any, resp_doc: dict[str, Any]) -> None:
        """The paging headers (flask-smorest's documented override)."""
        headers = resp_doc.setdefault("headers", {})
        headers["Link"] = LINK_HEADER_COMPONENT
        headers["X-Total-Count"] = TOTAL_HEADER_COMPONENT

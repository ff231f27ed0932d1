"""flask-smorest's Blueprint, with request bodies read by skillfleet's JSON codec.

webargs reads a JSON body with the standard library, which raises RecursionError on an array
nested some thousand levels deep and ValueError on an integer of over 4,300 digits: 500s for
bad input. `store.jsoncodec.decode` reads both as bad JSON, and is the decoder the rest of the
API uses; a body that is not JSON is 400 `invalid_json` on every route, as on the skill import.
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


class Blueprint(flask_smorest.Blueprint):  # type: ignore[misc]
    ARGUMENTS_PARSER = Parser()

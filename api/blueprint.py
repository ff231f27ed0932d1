"""flask-smorest's Blueprint, with request bodies read by skillfleet's JSON codec.

webargs reads a JSON body with the standard library, which raises RecursionError on an array
nested some thousand levels deep: a 500 for bad input. `store.jsoncodec.decode` reads it as
bad JSON (400), and is the decoder the rest of the API uses.
"""

from __future__ import annotations

from typing import Any

import flask
import flask_smorest
from webargs import core
from webargs.flaskparser import FlaskParser, is_json_request

from store import jsoncodec


class Parser(FlaskParser):
    def _raw_load_json(self, req: flask.Request) -> Any:
        if not is_json_request(req):
            return core.missing
        return jsoncodec.decode(req.get_data(cache=True))


class Blueprint(flask_smorest.Blueprint):  # type: ignore[misc]
    ARGUMENTS_PARSER = Parser()

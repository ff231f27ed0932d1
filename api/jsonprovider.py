"""Flask's JSON provider with answers written by orjson (store/jsoncodec.py).

The same text as Flask's own provider out of debug mode (compact, keys in the order the code
builds them), but for non-ASCII characters, which are sent as UTF-8 rather than escaped.
"""

from __future__ import annotations

from typing import Any

from flask import Response
from flask.json.provider import DefaultJSONProvider
from werkzeug.sansio.response import Response as BaseResponse

from store import jsoncodec


class JSONProvider(DefaultJSONProvider):
    ensure_ascii = False
    sort_keys = False

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        if kwargs:
            return super().loads(s, **kwargs)
        return jsoncodec.decode(s)

    def response(self, *args: Any, **kwargs: Any) -> BaseResponse:
        if (self.compact is None and self._app.debug) or self.compact is False:
            return super().response(*args, **kwargs)  # indented, for a person reading it
        body = jsoncodec.response_body(self._prepare_response_obj(args, kwargs), self.default)
        return Response(body + b"\n", mimetype=self.mimetype)

"""`POST /api/tools/<tool>` without Flask's request machinery: the route every run goes through.

Flask's request context, routing, hooks and response objects cost a tool call about half a
millisecond with the caches a script's run leaves cold (docs/benchmarks.md, twelfth pass). A
call whose request is plainly well formed goes straight to the broker here: a known tool, a
JSON body of known length that ToolCallSchema loads, a `wait` that WaitSchema loads, an owner's
or agent's token the token cache knows, and no CORS to answer. It gets the same envelope
through the same schema and JSON codec as the Flask route.

Any other request goes to the Flask route, body and all, and is answered there in its own words
(401, 413, 415, 422...): nothing has happened yet. An error raised once the broker has the call
goes through Flask's error handlers, as it would from the view.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable
from typing import Any
from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

import marshmallow as ma
from flask import Flask

from api.auth import CACHE_EXTENSION, TokenCache
from api.bodies import MAX_BODY_BYTES
from api.jsonprovider import JSONProvider
from api.schemas import ToolCallSchema, ToolResultSchema, WaitSchema
from api.services import services
from api.tools import call_and_wait
from store import jsoncodec
from store.tokens import OWNER_KIND

PREFIX = "/api/tools/"
# The only query string taken here; any other (repeated, blank, encoded) goes to Flask.
QUERY = re.compile(r"(?:wait=(?P<wait>[0-9]{1,3}(?:\.[0-9]{1,6})?))?")
# A Content-Length of ASCII digits (str.isdigit takes other digits, which int() refuses).
LENGTH = re.compile(r"[0-9]{1,10}")
# The caller's owner id, the tool, the loaded body, the seconds to wait and the raw body.
PlainCall = tuple[int, str, dict[str, Any], float, bytes]


class HotRoute:
    """WSGI middleware answering plain tool calls itself and handing the rest to `inner`."""

    def __init__(self, app: Flask, inner: WSGIApplication) -> None:
        self.app = app
        self.inner = inner
        self.call_schema = ToolCallSchema()
        self.wait_schema = WaitSchema()
        self.result_schema = ToolResultSchema()

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if environ["REQUEST_METHOD"] != "POST" or not environ["PATH_INFO"].startswith(PREFIX):
            return self.inner(environ, start_response)
        with self.app.app_context():
            call = self._plain_call(environ)
            if call is not None:
                return self._answer(environ, start_response, call)
        return self.inner(environ, start_response)

    def _answer(
        self, environ: WSGIEnvironment, start_response: StartResponse, call: PlainCall
    ) -> Iterable[bytes]:
        try:
            envelope = self.result_schema.dump(call_and_wait(*call))
            body = jsoncodec.response_body(envelope, JSONProvider.default) + b"\n"  # as Flask's
        except Exception as error:
            return self._flask_error(environ, start_response, error)
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        start_response("200 OK", headers)
        return [body]

    def _plain_call(self, environ: WSGIEnvironment) -> PlainCall | None:
        """The call's (caller, tool, body, wait, raw body), or None to let Flask answer."""
        tool = environ["PATH_INFO"][len(PREFIX) :]
        query = QUERY.fullmatch(environ.get("QUERY_STRING", ""))
        length = environ.get("CONTENT_LENGTH") or ""
        scheme, _, token = environ.get("HTTP_AUTHORIZATION", "").partition(" ")
        if (
            query is None
            or environ.get("SCRIPT_NAME")
            or tool not in services().broker.registry.names
            or _mimetype(environ) != "application/json"
            or "HTTP_TRANSFER_ENCODING" in environ
            or not (LENGTH.fullmatch(length) and 0 < int(length) <= MAX_BODY_BYTES)
            or scheme.lower() != "bearer"
            or not token.strip()
        ):
            return None
        cache: TokenCache = self.app.extensions[CACHE_EXTENSION]
        found = cache.lookup(token.strip())
        if found is None or found.kind != OWNER_KIND or found.owner_id is None:
            return None  # before the body is read, as Flask refuses it
        raw = environ["wsgi.input"].read(int(length))
        environ["wsgi.input"] = io.BytesIO(raw)  # Flask reads it from here, if it answers
        try:
            body = self.call_schema.load(jsoncodec.decode(raw))
            wait = self.wait_schema.load({"wait": query["wait"]} if query["wait"] else {})
        except (ValueError, ma.ValidationError):  # the codec reads too-deep JSON as bad
            return None
        return found.owner_id, tool, body, wait["wait"], raw

    def _flask_error(
        self, environ: WSGIEnvironment, start_response: StartResponse, error: Exception
    ) -> Iterable[bytes]:
        """Answer `error`, the exception being handled, as the Flask route would have."""
        app = self.app
        with app.request_context(environ):
            try:
                # Re-raises what it has no handler for, as it does for the Flask route.
                response = app.finalize_request(app.handle_user_exception(error))
            except Exception as unhandled:
                response = app.handle_exception(unhandled)
            answer: Iterable[bytes] = response(environ, start_response)
            return answer


def _mimetype(environ: WSGIEnvironment) -> str:
    return str(environ.get("CONTENT_TYPE", "")).partition(";")[0].strip().lower()


def install_hot_route(app: Flask, cors_origins: tuple[str, ...]) -> None:
    """Serve plain tool calls through HotRoute; with CORS to answer, Flask serves them all."""
    if not cors_origins:
        app.wsgi_app = HotRoute(app, app.wsgi_app)  # type: ignore[method-assign]

"""The one error shape of the API and the handlers that produce it."""

from __future__ import annotations

import re
from typing import Any

import kombu.exceptions
import marshmallow as ma
import redis
import sqlalchemy.exc
from flask import Flask, Response, jsonify, request
from flask_smorest import Api
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from store.errors import SkillfleetError


class ErrorSchema(ma.Schema):
    """Every error: a stable snake_case code, the HTTP status and a sentence."""

    code = ma.fields.String(required=True, metadata={"description": "Stable error code"})
    status = ma.fields.Integer(required=True, metadata={"description": "HTTP status"})
    message = ma.fields.String(required=True, metadata={"description": "What went wrong"})
    errors = ma.fields.Raw(metadata={"description": "Every problem, when there are several"})


class ApiError(Exception):
    """Raised by views for request problems that have no domain error of their own."""

    def __init__(
        self, status: int, code: str, message: str, errors: Any = None, headers: Any = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.errors = errors
        self.headers = headers


def error_body(status: int, code: str, message: str, errors: Any = None) -> dict[str, Any]:
    """The one error shape, for Flask's answers and for what the ASGI tier answers itself."""
    body: dict[str, Any] = {"code": code, "status": status, "message": message}
    if errors is not None:
        body["errors"] = errors
    return body


def error_response(
    status: int, code: str, message: str, errors: Any = None, headers: Any = None
) -> Response:
    response = jsonify(error_body(status, code, message, errors))
    response.status_code = status
    if headers:
        response.headers.update(headers)
    return response


HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    429: "too_many_requests",
    500: "internal_error",
    503: "unavailable",
}


class SkillfleetApi(Api):  # type: ignore[misc]
    """flask-smorest's Api with skillfleet's error shape."""

    ERROR_SCHEMA = ErrorSchema
    # The document an earlier app of this process made: its views are not documented again
    # (api/blueprint.py), and it becomes this app's `spec` once they are registered.
    kept_document: Any = None

    def handle_http_exception(self, error: HTTPException) -> Response:
        status = error.code or 500
        data = getattr(error, "data", None) or {}
        message = data.get("message") or _sentence(error.description or error.name)
        errors = data.get("errors") or data.get("messages")
        code = HTTP_CODES.get(status, _snake(error.name))
        headers = data.get("headers")
        if status == 500:
            message = "The server failed unexpectedly."
        if isinstance(error, MethodNotAllowed):
            allowed = ", ".join(sorted(error.valid_methods or ()))
            message = f"This route does not take {request.method}; it takes {allowed}."
            headers = {"Allow": allowed}
        return error_response(status, code, message, errors, headers)


def register_error_handlers(app: Flask) -> None:
    def domain_error(error: SkillfleetError) -> Response:
        return error_response(
            error.status, error.code, error.message, getattr(error, "errors", None)
        )

    def api_error(error: ApiError) -> Response:
        return error_response(error.status, error.code, error.message, error.errors, error.headers)

    def invalid_body(error: ma.ValidationError) -> Response:
        return error_response(
            422, "invalid_request", "The request body is not valid.", error.messages
        )

    def redis_down(error: Exception) -> Response:
        return error_response(
            503,
            "service_unavailable",
            "The queue and output streams (Redis) can't be reached; try again shortly.",
        )

    def database_down(error: Exception) -> Response:
        return error_response(
            503, "service_unavailable", "The database can't be reached; try again shortly."
        )

    def concurrent_change(error: sqlalchemy.exc.IntegrityError) -> Response:
        # The checks a request made before writing held, but another request changed the rows
        # in between (a chat deleted while a call on it was recorded): nothing was written.
        return error_response(
            409,
            "concurrent_change",
            "Something this request refers to was changed or deleted at the same time "
            "(for example its chat); nothing was saved. Try again.",
        )

    app.register_error_handler(sqlalchemy.exc.IntegrityError, concurrent_change)
    app.register_error_handler(redis.ConnectionError, redis_down)
    app.register_error_handler(redis.TimeoutError, redis_down)
    app.register_error_handler(kombu.exceptions.OperationalError, redis_down)
    app.register_error_handler(sqlalchemy.exc.OperationalError, database_down)
    app.register_error_handler(sqlalchemy.exc.InterfaceError, database_down)
    app.register_error_handler(ma.ValidationError, invalid_body)
    app.register_error_handler(SkillfleetError, domain_error)
    app.register_error_handler(ApiError, api_error)


def _snake(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith(".") else text + "."

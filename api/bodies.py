"""Request bodies: refused early when too large (after reading them) or not JSON."""

from __future__ import annotations

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from api.errors import ApiError, error_response
from store.archive import size_text
from store.limits import KIB, MAX_DRAINED_BYTES, MAX_ZIP_BYTES

# Room for the multipart envelope around a zip at the limit; the zip itself is checked exactly.
MULTIPART_ALLOWANCE = 64 * KIB
MAX_BODY_BYTES = MAX_ZIP_BYTES + MULTIPART_ALLOWANCE
DRAIN_CHUNK = 64 * KIB
# The one route that takes a multipart form (a skill zip); every other body is JSON.
UPLOAD_ENDPOINTS = frozenset({"skills.Skills"})
NOT_JSON = "Send the body as JSON with the header 'Content-Type: application/json'."


def install_body_checks(app: Flask) -> None:
    """Check every body before authentication reads the request."""
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES  # bodies of unknown length
    app.before_request(check_body)
    app.register_error_handler(413, _too_large_while_read)


def _too_large_while_read(_error: HTTPException) -> Response:
    """A body of unknown length ran past the limit while being read."""
    refused = too_large(headers={"Connection": "close"})
    return error_response(413, refused.code, refused.message, None, refused.headers)


def check_body() -> None:
    if request.method not in ("POST", "PUT", "PATCH") or not _has_body():
        return
    length = request.content_length
    if length is not None and length > MAX_BODY_BYTES:
        drained = _drain(length)
        raise too_large(headers=None if drained else {"Connection": "close"})
    if request.is_json:
        return
    if request.mimetype == "multipart/form-data" and request.endpoint in UPLOAD_ENDPOINTS:
        return
    if request.endpoint in UPLOAD_ENDPOINTS:
        message = "Send a multipart form with a zip in 'file', or JSON {\"github\": url}."
        raise ApiError(415, "unsupported_media_type", message)
    sent = f"was sent as {request.mimetype}" if request.mimetype else "had no Content-Type"
    raise ApiError(415, "unsupported_media_type", f"{NOT_JSON} This one {sent}.")


def too_large(headers: dict[str, str] | None = None) -> ApiError:
    """413 in skillfleet's words: a zip for the skill upload, a body anywhere else."""
    if request.endpoint in UPLOAD_ENDPOINTS:
        message = f"The upload is larger than {size_text(MAX_ZIP_BYTES)}, the limit for a skill."
        return ApiError(413, "zip_too_large", message, headers=headers)
    message = f"The request body is larger than {size_text(MAX_BODY_BYTES)}."
    return ApiError(413, "body_too_large", message, headers=headers)


def _has_body() -> bool:
    length = request.content_length
    return bool(length) or request.headers.get("Transfer-Encoding", "").lower() == "chunked"


def _drain(length: int) -> bool:
    """Read and drop the body, so a client that sends all of it before reading gets the answer.

    Bodies past MAX_DRAINED_BYTES are not read: the connection is closed instead (False).
    """
    if length > MAX_DRAINED_BYTES:
        return False
    stream = request.environ["wsgi.input"]
    left = length
    while left > 0:
        chunk = stream.read(min(DRAIN_CHUNK, left))
        if not chunk:
            break
        left -= len(chunk)
    return True

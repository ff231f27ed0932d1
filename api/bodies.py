"""Request bodies: refused early when too large (after reading them) or not JSON.

A body of unknown length (Transfer-Encoding: chunked) is read here, up to the limit, once its
type passed: the server hands it over as it arrives (api/asgi.py), and werkzeug reads such a
body only up to MAX_CONTENT_LENGTH and stops there without a word, which a view would take for
the whole body.
"""

from __future__ import annotations

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from api.errors import ApiError, error_response
from api.services import services
from store.archive import size_text
from store.limits import KIB, MAX_DRAINED_BYTES, MAX_ZIP_BYTES

# Room for the multipart envelope around a zip at the limit; the zip itself is checked exactly.
MULTIPART_ALLOWANCE = 64 * KIB
MAX_BODY_BYTES = MAX_ZIP_BYTES + MULTIPART_ALLOWANCE
DRAIN_CHUNK = 64 * KIB
# The one route that takes a multipart form (a skill zip); every other body is JSON.
UPLOAD_ENDPOINTS = frozenset({"skills.Skills"})
# The routes that take a file in a multipart form, up to SKILLFLEET_FILE_MAX_BYTES: an owner's
# upload, and what a run made sent back by its node's agent.
FILE_ENDPOINTS = frozenset({"files.Files", "nodes.run_files"})
# The one route that takes a URL-encoded form: OAuth's consent page (api/oauth/consent.py).
FORM_ENDPOINTS = frozenset({"oauth_consent.consent_answer"})
MAX_FORM_BYTES = 16 * KIB
FORM = "application/x-www-form-urlencoded"
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
    limit = body_limit()
    if limit != MAX_BODY_BYTES:
        request.max_content_length = limit  # werkzeug's, for a body of unknown length
    length = request.content_length
    if length is not None and length > limit:
        drained = _drain(length)
        raise too_large(headers=None if drained else {"Connection": "close"})
    _check_type()
    if length is None and request.endpoint not in FILE_ENDPOINTS:
        _read_unmeasured()


def body_limit() -> int:
    """The most bytes the request's route takes: a file's limit for a file upload."""
    if request.endpoint in FILE_ENDPOINTS:
        return int(services().settings.file_max_bytes) + MULTIPART_ALLOWANCE
    if request.endpoint in FORM_ENDPOINTS:
        return MAX_FORM_BYTES
    return MAX_BODY_BYTES


def _check_type() -> None:
    if request.endpoint in FORM_ENDPOINTS:
        if request.mimetype != FORM:
            raise ApiError(415, "unsupported_media_type", f"Post the page's form ({FORM}).")
        return
    if request.is_json or request.endpoint in FILE_ENDPOINTS:
        return  # a file route reads its form itself, once it knows who sent it
    if request.mimetype == "multipart/form-data" and request.endpoint in UPLOAD_ENDPOINTS:
        return
    if request.endpoint in UPLOAD_ENDPOINTS:
        message = "Send a multipart form with a zip in 'file', or JSON {\"github\": url}."
        raise ApiError(415, "unsupported_media_type", message)
    sent = f"was sent as {request.mimetype}" if request.mimetype else "had no Content-Type"
    raise ApiError(415, "unsupported_media_type", f"{NOT_JSON} This one {sent}.")


def _read_unmeasured() -> None:
    """Read a body of unknown length now (views and forms then read what was read); one past the
    limit is refused, the connection closed on what the client still sends."""
    data = request.get_data(cache=True)  # at most MAX_BODY_BYTES, werkzeug's limit
    if len(data) >= MAX_BODY_BYTES and request.environ["wsgi.input"].read(1):
        raise too_large(headers={"Connection": "close"})


def too_large(headers: dict[str, str] | None = None) -> ApiError:
    """413 in skillfleet's words: a zip for the skill upload, a body anywhere else."""
    if request.endpoint in UPLOAD_ENDPOINTS:
        message = f"The upload is larger than {size_text(MAX_ZIP_BYTES)}, the limit for a skill."
        return ApiError(413, "zip_too_large", message, headers=headers)
    if request.endpoint in FILE_ENDPOINTS:
        most = int(services().settings.file_max_bytes)
        message = (
            f"The file is larger than {size_text(most)}, the limit for a file "
            "(SKILLFLEET_FILE_MAX_BYTES)."
        )
        return ApiError(413, "file_too_large", message, headers=headers)
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

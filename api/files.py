"""Owners' files: uploads a run's `files` names by id, and the files runs made.

`POST /api/files` (an owner's or agent's token; a multipart form with the file in `file`) keeps
a file for SKILLFLEET_FILE_TTL; `GET /api/files/<id>` downloads it. Another owner's file answers
404 like a missing one. A node's agent fetches a running run's input files and sends back what
the run made through its node's routes (`/api/nodes/<node>/runs/<run>/files…`), with its token.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from flask import Response, request, stream_with_context
from flask.views import MethodView

from api.auth import owner_only, owner_or_agent
from api.blueprint import Blueprint
from api.errors import ApiError
from api.paging import Page, keyset, sql_page
from api.roles import owner_route
from api.schemas import FileUploadSchema, StoredFileSchema, file_response
from api.services import services
from store.files import FileInfo, clean_name
from store.limits import MIB
from store.models import StoredFile

blp = Blueprint("files", __name__, url_prefix="/api/files", description="Owners' files")

BINARY = "application/octet-stream"
WHOLE_BYTES = 8 * MIB  # a file up to this large is read whole before it is sent
UPLOAD_BODY = {
    "required": True,
    "content": {"multipart/form-data": {"schema": FileUploadSchema}},
}


@blp.route("")
class Files(MethodView):
    @blp.response(200, StoredFileSchema(many=True))
    @keyset(blp)
    def get(self, page: Page) -> list[FileInfo]:
        """List your files that are still kept, newest first"""
        caller = owner_or_agent()
        files = services().files
        with files.sessions() as session:
            order = (StoredFile.created_at, StoredFile.id)
            rows = sql_page(session, files.kept(caller), page, caller, order)
            return [FileInfo.of(row) for row in rows]

    @blp.doc(requestBody=UPLOAD_BODY)
    @blp.response(201, StoredFileSchema)
    def post(self) -> FileInfo:
        """Upload a file for a run's `files`: kept until it expires, downloadable by its id"""
        owner_id = owner_or_agent()
        return save_upload(owner_id)


@blp.route("/<file_id>")
class StoredFileView(MethodView):
    @blp.response(200, content_type=BINARY)
    @blp.doc(responses={"200": file_response("The file's bytes", BINARY)})
    def get(self, file_id: str) -> Response:
        """Download one of your files"""
        files = services().files
        return download(files.find(owner_or_agent(), file_id))

    @owner_route
    @blp.response(204)
    def delete(self, file_id: str) -> None:
        """Delete one of your files before it expires"""
        services().files.delete(owner_only(), file_id)


def save_upload(owner_id: int) -> FileInfo:
    """Keep the multipart form's `file` for `owner_id`."""
    if request.mimetype != "multipart/form-data":
        message = "Send a multipart form with the file in 'file'."
        raise ApiError(415, "unsupported_media_type", message)
    upload = request.files.get("file")
    if upload is None:
        raise ApiError(400, "file_missing", "The multipart form has no 'file' field.")
    unknown = sorted((set(request.form) | set(request.files)) - {"file"})
    if unknown:
        listed = ", ".join(repr(field[:64]) for field in unknown[:5])
        raise ApiError(422, "unknown_fields", f"The form takes 'file' only, not {listed}.")
    return services().files.save(owner_id, clean_name(upload.filename), upload.stream)


def download(info: FileInfo) -> Response:
    """The file's bytes as an attachment: a small one in one piece, a larger one streamed as
    it is read (each piece of a streamed body is a hop from the request's thread)."""
    chunks: Iterator[bytes] = services().files.read(info)
    body = b"".join(chunks) if info.size <= WHOLE_BYTES else stream_with_context(chunks)
    response = Response(body, mimetype=BINARY)
    response.headers["Content-Length"] = str(info.size)
    response.headers["Content-Disposition"] = _attachment(info.name)
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Cache-Control"] = "private, no-store"
    # RFC 9530: the SHA-256 of the bytes, as the file's listing gives it in hex.
    response.headers["Repr-Digest"] = f"sha-256=:{_base64_of(info.sha256)}:"
    return response


def _attachment(name: str) -> str:
    """RFC 6266: an ASCII fallback and the UTF-8 name."""
    plain = "".join(char if char.isascii() and char not in '"\\' else "_" for char in name)
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(name, safe='')}"


def _base64_of(hex_digest: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_digest)).decode("ascii")


def entry(info: FileInfo) -> dict[str, Any]:
    return {"id": info.id, "name": info.name, "size": info.size, "sha256": info.sha256}

"""A run's files over MCP: resource links in the tool's result, readable as resources.

Every file a run made is `skillfleet://files/<id>`; the result of `run_skill_script` links each
(`resource_link` content, with its path as name and its size), and `resources/read` of the URI
returns its bytes (GET /api/files/<id> with the caller's token: another owner's file is
unknown). A host without an upload step sends input files inline (`files` with
`content_base64`).
"""

from __future__ import annotations

import base64
import re
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from api.mcp.rest import Rest, RestError

PREFIX = "skillfleet://files/"
TEMPLATE = types.ResourceTemplate(
    name="run-file",
    uri_template="skillfleet://files/{id}",
    description="A file a run made (or one you uploaded): its bytes, by the id a result gives",
)
_ID = re.compile(r"[0-9a-f-]{36}")


def is_file_uri(uri: str) -> bool:
    return uri.startswith(PREFIX)


def file_uri(file_id: str) -> str:
    return f"{PREFIX}{file_id}"


def links(result: dict[str, Any]) -> list[types.ResourceLink]:
    """A resource link for each file a run's result lists."""
    found = []
    for entry in result.get("files") or []:
        if isinstance(entry, dict) and isinstance(entry.get("id"), str):
            found.append(
                types.ResourceLink(
                    type="resource_link",
                    uri=file_uri(entry["id"]),
                    name=str(entry.get("path") or entry["id"]),
                    mime_type="application/octet-stream",
                    size=entry.get("size"),
                    description=f"sha256 {entry.get('sha256')}",
                )
            )
    return found


async def read(rest: Rest, uri: str) -> types.ReadResourceResult:
    """The bytes of the file `uri` names, as the caller's token may read them."""
    file_id = uri.removeprefix(PREFIX)
    if not _ID.fullmatch(file_id):
        raise MCPError(INVALID_PARAMS, f"Not a file's URI: {uri!r} (skillfleet://files/<id>).")
    try:
        data = await rest.file(file_id)
    except RestError as e:
        raise MCPError(INVALID_PARAMS, f"{e.message} ({e.code})") from e
    blob = base64.b64encode(data).decode("ascii")
    content = types.BlobResourceContents(uri=uri, mime_type="application/octet-stream", blob=blob)
    return types.ReadResourceResult(contents=[content])

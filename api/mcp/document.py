"""`/mcp` in the API's OpenAPI document: its HTTP surface as api/mcp/http.py serves it.

The request body's schema is the JSON Schema of the models that read it (the MCP SDK's
JSON-RPC 2.0 messages, which api/mcp/http.py checks a body against before the SDK sees it),
written in OpenAPI 3.0's dialect; every refusal is the API's one error shape. A POST's answer
is an event stream whose `data:` lines are JSON-RPC messages, or 202 for a notification or a
response; a GET with a session's id is that session's stream of unasked messages.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from flask_smorest import Api
from werkzeug.routing import Map, Rule

from api.errors import ErrorSchema
from api.schemas import NULL_ONLY, SSE_EVENT

PATH = "/mcp"
TAG = "mcp"
_DEFS = "#/$defs/"
_COMPONENTS = "#/components/schemas/"
_NULL = {"type": "null"}

SESSION_HEADER = {
    "in": "header",
    "name": "Mcp-Session-Id",
    "schema": {"type": "string"},
    "description": "The session's id, from the answer to its initialize; it names the chat "
    "the session's calls are recorded in",
}
# Each event's data is one JSON-RPC message (the message schemas below).
EVENT_STREAM = {"text/event-stream": {"schema": SSE_EVENT}}


def document_mcp(api: Api) -> None:
    """Add `/mcp`'s operations, and the JSON-RPC message schemas they use, to `api`'s document."""
    message = types.jsonrpc_message_adapter.json_schema(ref_template=_DEFS + "{model}")
    for name, schema in message.pop("$defs").items():
        api.spec.components.schema(name, component=openapi_schema(schema))
    api.spec.tag({"name": TAG, "description": "The MCP gateway over streamable HTTP"})
    # flask-smorest's spec takes a path as a werkzeug rule; /mcp's is in a map of its own, as
    # the ASGI tier serves it, not Flask.
    rule = next(Map([Rule(PATH, endpoint=TAG)]).iter_rules())
    api.spec.path(rule=rule, operations=_operations(openapi_schema(message)))


def openapi_schema(schema: Any) -> Any:
    """A JSON Schema from pydantic in OpenAPI 3.0's dialect: `const` as a one-value enum, a
    `null` branch as `nullable`, references to the document's components."""
    if isinstance(schema, list):
        return [openapi_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    converted = {key: openapi_schema(value) for key, value in schema.items() if key != "title"}
    if "const" in converted:
        converted["enum"] = [converted.pop("const")]
    if "$ref" in converted:
        converted["$ref"] = converted["$ref"].replace(_DEFS, _COMPONENTS)
    branches = converted.get("anyOf")
    if branches and _NULL in branches:
        others = [branch for branch in branches if branch != _NULL]
        if len(others) == 1 and "type" in others[0]:
            del converted["anyOf"]
            converted.update(others[0])
            converted["nullable"] = True
        else:  # OpenAPI 3.0 has no null type: a nullable value that can only be null
            converted["anyOf"] = [*others, NULL_ONLY]
    return converted


def _operations(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "post": {
            "tags": [TAG],
            "summary": "Send one MCP message (JSON-RPC 2.0) to the gateway",
            "description": "Requests are answered as an event stream: progress notifications, "
            "then the response. The answer to initialize carries the session's "
            "Mcp-Session-Id. A request's token is checked before any problem with its message "
            "is answered; the MCP SDK reads JSON nested at most 200 levels deep. A client of the "
            "2026-07-28 protocol also sends MCP-Protocol-Version, Mcp-Method and Mcp-Name "
            "and is answered in JSON; the SDK answers its protocol errors as JSON-RPC errors.",
            "parameters": [{**SESSION_HEADER, "required": False}],
            "requestBody": {"required": True, "content": {"application/json": {"schema": message}}},
            "responses": {
                "200": {
                    "description": "The request's answer: its `data:` lines are JSON-RPC "
                    "messages (one JSON-RPC message for a 2026-07-28 client)",
                    "content": {**EVENT_STREAM, "application/json": {"schema": message}},
                },
                "202": {"description": "A notification or a response, accepted"},
                **_errors(
                    {
                        400: "The body is not JSON (invalid_json) or not one JSON-RPC message "
                        "(invalid_message)",
                        401: "No token, or not a valid one",
                        403: "A page's origin that may not use /mcp, or a node's token",
                        406: "The request does not accept both JSON and an event stream",
                        413: "The message is larger than the SDK reads (4 MiB)",
                        415: "The body is not sent as application/json",
                        429: "Too many wrong tokens from this address",
                        503: "The API could not check the token",
                    }
                ),
            },
        },
        "get": {
            "tags": [TAG],
            "summary": "Follow a session's stream of unasked messages (resource list changes)",
            "description": "An event stream carrying notifications/resources/list_changed when "
            "the caller's skills change, until the client leaves or its token is deleted.",
            "parameters": [
                {**SESSION_HEADER, "required": True, "schema": {"type": "string", "minLength": 1}}
            ],
            "responses": {
                "200": {"description": "The session's stream", "content": EVENT_STREAM},
                **_errors(
                    {
                        401: "No token, or not a valid one",
                        403: "A page's origin that may not use /mcp, or a node's token",
                        405: "No session id: no stream here, as MCP says; POST each message",
                        406: "The request does not accept an event stream",
                        429: "The token holds too many streams, or too many wrong tokens came "
                        "from this address",
                        503: "The API could not check the token",
                    }
                ),
            },
        },
    }


def _errors(descriptions: dict[int, str]) -> dict[str, Any]:
    """Error answers in the API's one shape, a 401 with its challenge, a 405 with `Allow`."""
    answers: dict[str, Any] = {}
    for status, description in descriptions.items():
        answer: dict[str, Any] = {
            "description": description,
            "content": {"application/json": {"schema": ErrorSchema}},
        }
        if status in HEADERS:
            answer["headers"] = HEADERS[status]
        answers[str(status)] = answer
    return answers


HEADERS = {
    401: {
        "WWW-Authenticate": {
            "schema": {"type": "string", "pattern": r'^Bearer( resource_metadata="[^"]+")?$'},
            "description": 'Without a token, `Bearer resource_metadata="<base>/.well-known/'
            'oauth-protected-resource/mcp"` (OAuth, RFC 9728); with a wrong one, `Bearer`',
        }
    },
    405: {"Allow": {"schema": {"type": "string"}, "description": "GET, POST"}},
}

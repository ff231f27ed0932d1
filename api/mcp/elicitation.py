"""Pointing a waiting call's user at the console: URL elicitation, over MCP's multi-round-trip
requests (protocol 2026-07-28) or, on a connection that can carry the server's own requests
(stdio), in one of those (handshake-era protocols).

A `tools/call` that waits for the owner's approval, from a client that declared URL
elicitation, first answers with an `input_required` result: one URL elicitation whose url is
the console's approvals page and whose message names the approval, and a `requestState`
naming the call. The client shows the link, then sends the same `tools/call` again with the
user's response and that state; the gateway then waits on the same call (no new call, no new
approval) as it waits for any other client.

What the user does with the link answers nothing: accepting only says they saw it, and the
owner still approves or denies in the console, the CLI or a push notification. Declining or
dismissing it ends the wait at once with the call's pending result, whose call_id
`get_call_outcome` collects later; the approval stays pending.

A handshake-era client over stdio is asked with an `elicitation/create` request of the server's
own while the call waits: the link is shown beside the wait, which an answer of the owner ends
(withdrawing the request), and a declined link ends at once with the pending result, as above.
Over stateless `/mcp` such a request has no way back, so those clients get the console's
address in the waiting call's progress notifications instead.

The state is the call's id in clear JSON, not sealed: a stateless gateway behind several
processes would need one key shared by all of them to seal it, and the id needs no secret.
It is read with the caller's token, so a forged state reaches only calls that token could
collect with `get_call_outcome` anyway.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import mcp_types as types
import structlog
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.requests import Request

from store import jsoncodec

log = structlog.get_logger(__name__)

APPROVALS_ROUTE = "/#/approvals"  # the console's page where the owner answers approvals
QUESTIONS_ROUTE = "/#/questions"  # and where they answer questions and type secrets
REQUEST_KEY = "approval"  # the elicitation's key among the result's input requests


@dataclass(frozen=True)
class Resumed:
    """A `tools/call` sent again after its elicitation: the call it waits on, and whether the
    user declined (or dismissed) the link."""

    call_id: str
    declined: bool


class StateError(Exception):
    """Raised when a `tools/call`'s `requestState` is not one this gateway gave."""

    code = "request_state_invalid"


def can_open_urls(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the client takes URL elicitations inside a call's result: a 2026-07-28 client
    that declared `elicitation.url`. A handshake-era client could only be asked in a request
    of the server's own, which stateless `/mcp` has no channel for."""
    if ctx.session.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = ctx.session.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    return elicitation is not None and elicitation.url is not None


def can_be_asked_to_open(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether a handshake-era client can be asked to open a URL in a request of the server's
    own: it declared `elicitation.url` and its connection carries requests back (stdio)."""
    if ctx.session.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = ctx.session.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    return elicitation is not None and elicitation.url is not None and ctx.session.can_send_request


async def ask_to_open(
    ctx: ServerRequestContext[Any, Any], url: str, message: str, call_id: str
) -> bool:
    """Ask the client to show the console's `url`; True when the user declined or dismissed
    it. A client that fails the request is waited for as any other."""
    try:
        answer = await ctx.session.elicit_url(message, url, call_id, ctx.request_id)
    except MCPError as e:
        log.info("mcp client did not show the console's link", code=e.code)
        return False
    return answer.action != "accept"


def console_url(
    ctx: ServerRequestContext[Any, Any], api_url: str, route: str = APPROVALS_ROUTE
) -> str:
    """The console's page `route` (its approvals, unless named) on the address the client
    reached `/mcp` at (the console is served on the API's port), else on `api_url` (stdio has
    no request)."""
    base = str(ctx.request.base_url) if isinstance(ctx.request, Request) else api_url
    return base.rstrip("/") + route


def open_console(url: str, message: str, call_id: str) -> types.InputRequiredResult:
    """The `input_required` result asking the client to show the console's `url`."""
    ask = types.ElicitRequest(params=types.ElicitRequestURLParams(message=message, url=url))
    return types.InputRequiredResult(
        input_requests={REQUEST_KEY: ask}, request_state=json.dumps({"call_id": call_id})
    )


def resumed(params: types.CallToolRequestParams) -> Resumed | None:
    """The call a `tools/call` resumes, from its `requestState`; None for a first round."""
    if params.request_state is None:
        return None
    try:
        state = jsoncodec.decode(params.request_state)
    except ValueError:  # not JSON, or nested too deep to read
        state = None
    call_id = state.get("call_id") if isinstance(state, dict) else None
    if not isinstance(call_id, str) or not call_id:
        raise StateError("The requestState is not one this server gave; call the tool again.")
    response = (params.input_responses or {}).get(REQUEST_KEY)
    declined = isinstance(response, types.ElicitResult) and response.action != "accept"
    return Resumed(call_id, declined)

"""`/mcp`: the gateway over streamable HTTP, on the API's own port.

Stateless: whichever API process receives a request serves it alone, so any number of
processes serve the same clients. What a client's session needs across requests travels with
its requests: its token, and the `Mcp-Session-Id` given with the answer to its `initialize`,
which names the session's chat. Each request, before the MCP SDK's session manager serves it:

1. **Method.** GET and POST; any other is 405 with `Allow: GET, POST` (a session holds nothing
   to end, so DELETE is one of them).
2. **Origin.** A browser's request from an origin other than this host's loopback names or
   `SKILLFLEET_CORS_ORIGINS` is refused (403 `origin_not_allowed`): a page can't reach a local
   API through DNS rebinding.
3. **Token.** `Authorization: Bearer <owner or agent token>`, checked by the API itself, with
   the caller's address and the resource this request serves (an MCP host's OAuth token is
   bound to one, api/oauth/); without one, 401 pointing at the OAuth metadata
   (`resource_metadata`, RFC 9728), with a bad one 401 with `WWW-Authenticate: Bearer`; a node
   token gets the API's 403. A `tools/call` or `tools/list` is checked by the API calls
   it makes anyway: its answer's headers wait until its first body does, and go out only if
   one of those calls succeeded or, when none was made, after a check of its own (GET
   /api/tools for one definition); a refused token gets the API's refusal instead of the
   SDK's answer, so a wrong token counts once toward the failed-login limit. Any other
   request is checked that way before the SDK sees it.
4. **The message.** A POST holds at most DEFAULT_MAX_REQUEST_BODY_SIZE bytes (413), is JSON
   (415 otherwise), accepts both JSON and an event stream (406 otherwise) and, once its token
   passed, is one JSON-RPC 2.0 message (400 `invalid_json` or `invalid_message` otherwise).
   Every refusal is the API's one error shape; JSON-RPC errors answer only well-formed requests,
   inside a 200.
5. **The caller.** The gateway's handlers reach the API in this process with the same token
   (api/mcp/inprocess.py), so every call is decided and recorded as over REST.

A GET with a session's id is that session's stream of unasked messages (handshake-era
protocols): it carries `notifications/resources/list_changed` when the caller's skills change.
Any process serves it, as it needs nothing but the token: each stream looks at its caller's
skills when `wakeup` is woken (api/asgi.py wakes it at every process's change to a skill or a
token) and every LISTEN_POLL seconds regardless.
"""

from __future__ import annotations

import contextlib
import contextvars
import secrets
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import mcp_types as types
import orjson
import pydantic
import pydantic_core
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, check_accept_headers
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from sse_starlette import EventSourceResponse
from starlette.datastructures import Headers
from starlette.requests import Request

from api.errors import ApiError, error_body
from api.mcp.gateway import APPROVAL_WAIT, Caller, Gateway, client_slug
from api.mcp.inprocess import CLIENT_EXTENSION, RESOURCE_EXTENSION, App, InProcessClient
from api.mcp.listens import ListenSlots
from api.mcp.rest import CLIENT_TIMEOUT, Rest, RestError
from api.mcp.skills import Wakeup
from api.oauth.urls import base_url, resource_metadata_url, resource_url
from relay.hub import OUTAGES
from store.tokens import token_digest

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

PATH = "/mcp"
METHODS = ("GET", "POST")
ALLOW = (b"allow", ", ".join(METHODS).encode())
JSON = "application/json"
# Never reaches a network: the in-process transport serves it.
IN_PROCESS_URL = "http://skillfleet.internal"
LOOPBACK_ORIGINS = ("http://127.0.0.1", "http://localhost", "http://[::1]")
FORWARDED = ("x-forwarded-for", "user-agent")

# What a client whose token is missing or refused is told to send.
WHAT_TO_SEND = (
    "Send 'Authorization: Bearer <agent token>' with an agent token of skillfleet (the one "
    "`skillfleet up` prints, or `skillfleet tokens create --owner <you> --role agent`)."
)
NODE_TOKEN = "This is a node's token, which can't use /mcp."

# Methods whose handlers call the API with the caller's token before anything else, so that
# call checks the token: the request needs no check of its own unless its calls fail, and its
# answer waits for the verdict either way (see McpEndpoint._serve).
CHECKED_BY_THEIR_CALLS = frozenset({"tools/call", "tools/list"})
LISTEN_POLL = 30.0  # seconds between a GET stream's looks at its skills when nothing woke it
LISTENERS_PER_TOKEN = 8  # GET streams one token may hold open in one process
LISTEN = "subscriptions/listen"  # its streams are counted per token (api/mcp/listens.py)
# The JSON-RPC error of a listen past its token's limit: a server error of the range the
# specification leaves to implementations (-32000 to -32099), like the SDK's own -32001.
TOO_MANY_LISTENS = -32029
KEEPALIVE_SECONDS = 15

# Where /mcp leaves, in the request's ASGI scope, what the request log says of its message:
# `{"mcp_method": ..., "mcp_tool": ...}` (skillfleet/serving.py logs it with the request).
LOG_SCOPE_KEY = "skillfleet.mcp"
LOGGED_NAME_CHARS = 100  # a longer method or tool name is cut in the log

# The caller of the request being served; the gateway's handlers run in a copy of its context.
CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("mcp_caller", default=None)


class McpEndpoint:
    """The ASGI app of `/mcp`, reaching the API's app `app` in this process."""

    def __init__(
        self,
        app: App,
        origins: tuple[str, ...] = (),
        approval_wait: float = APPROVAL_WAIT,
        listens: ListenSlots | None = None,
        public_url: str | None = None,
    ) -> None:
        self.http = InProcessClient(app, IN_PROCESS_URL, CLIENT_TIMEOUT)
        self.listens = listens  # None: listen streams are not counted
        self.wakeup = Wakeup(LISTEN_POLL)
        self.gateway = Gateway(_caller, approval_wait, self.wakeup)
        self.listening: Counter[str] = Counter()  # open GET streams by token id
        self.manager = StreamableHTTPSessionManager(self.gateway.server, stateless=True)
        self.origins = origins
        self.public_url = public_url
        self._stack: contextlib.AsyncExitStack | None = None

    async def start(self) -> None:
        self._stack = contextlib.AsyncExitStack()
        await self._stack.enter_async_context(self.manager.run())

    async def stop(self) -> None:
        if self._stack is not None:
            await self._stack.aclose()
            self._stack = None
        await self.http.aclose()

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["method"] not in METHODS:
            await _refuse_method(scope["method"], send)
            return
        headers = Headers(scope=scope)
        if not self._origin_allowed(headers.get("origin")):
            message = (
                "Requests from this page's origin may not use /mcp (set SKILLFLEET_CORS_ORIGINS)."
            )
            await _error(send, 403, "origin_not_allowed", message)
            return
        token = _bearer(headers)
        if token is None:
            # The one answer that advertises OAuth (RFC 9728): a host that sends a token
            # never sees it, so a configured static token stays the way in.
            message = f"No token. {WHAT_TO_SEND} Or sign in through OAuth (the "
            message += "resource_metadata of WWW-Authenticate)."
            metadata = resource_metadata_url(base_url(scope, self.public_url))
            challenge = f'Bearer resource_metadata="{metadata}"'.encode()
            await _error(send, 401, "unauthorized", message, [(b"www-authenticate", challenge)])
            return
        if scope["method"] == "GET":
            await self._listen(scope, headers, token, receive, send)
            return
        body = await _body(receive)
        if body is None:
            await _error(send, 413, "body_too_large", "The MCP message is too large.")
            return
        unfit = _unfit_post(scope, headers)
        if unfit is not None:
            await _error(send, unfit.status, unfit.code, unfit.message)
            return
        opened = _Opened(headers, body, token)
        scope[LOG_SCOPE_KEY] = opened.logged()
        rest = self._rest(scope, headers, token)
        if opened.method not in CHECKED_BY_THEIR_CALLS:
            refused = await _refusal(rest)
            if refused is not None:
                await _refuse(send, refused)
                return
        if opened.problem is not None:
            await _error(send, 400, opened.problem.code, opened.problem.message)
            return
        if opened.method == LISTEN and self.listens is not None:
            await self._listen_counted(self.listens, scope, opened, rest, receive, send)
            return
        await self._serve(scope, opened, rest, receive, send)

    async def _listen_counted(
        self,
        listens: ListenSlots,
        scope: Message,
        opened: _Opened,
        rest: Rest,
        receive: Receive,
        send: Send,
    ) -> None:
        """A `subscriptions/listen` stream, served while it holds one of its token's listen
        slots; past the token's limit, a JSON-RPC error at HTTP 429."""
        digest = token_digest(opened.token)
        try:
            slot = await listens.take(digest)
        except OUTAGES:
            message = "Redis can't be reached to count this token's streams; try again shortly."
            await _error(send, 503, "service_unavailable", message)
            return
        if slot is None:
            await _too_many_listens(send, opened.request_id, listens.limit)
            return
        try:
            await self._serve(scope, opened, rest, receive, send)
        finally:
            await listens.release(digest, slot)

    async def _serve(
        self, scope: Message, opened: _Opened, rest: Rest, receive: Receive, send: Send
    ) -> None:
        session = opened.session or (opened.new_session() if opened.initializing else None)
        chat = f"mcp-{session}" if session else f"mcp-{opened.client}-{opened.token_id}"
        reset = CALLER.set(Caller(rest, chat, opened.token_id, guessed=not session))

        unread = [{"type": "http.request", "body": opened.body, "more_body": False}]
        refused = False
        held: list[Message] = []  # the answer's start, until its first body says it may go

        async def replay() -> Message:
            return unread.pop() if unread else await receive()

        async def checked(message: Message) -> None:
            """The SDK's answer, once the token is known good; the API's refusal instead.

            An event stream's headers come before its handler ran: they wait for the first
            body, which comes after the handler's first call to the API, so that call's answer
            is the verdict and the token is not checked (and, when wrong, counted) twice."""
            nonlocal refused
            if refused:
                return  # the client has its refusal; the rest of the SDK's answer is dropped
            if message["type"] == "http.response.start":
                held.append(message)
                return
            if held:
                error = await _refusal(rest)
                if error is not None:
                    refused = True
                    await _refuse(send, error)
                    return
                start = held.pop()
                if session and not opened.session:
                    name = MCP_SESSION_ID_HEADER.encode()
                    start["headers"] = [*start.get("headers", []), (name, session.encode())]
                await send(start)
            await send(message)

        try:
            await self.manager.handle_request(scope, replay, checked)
        finally:
            CALLER.reset(reset)

    async def _listen(
        self, scope: Message, headers: Headers, token: str, receive: Receive, send: Send
    ) -> None:
        """A session's GET stream: `notifications/resources/list_changed` at each change of the
        caller's skills, until the client leaves or its token is deleted."""
        if not headers.get(MCP_SESSION_ID_HEADER):
            message = "Open a session with initialize first, or POST each MCP message to /mcp."
            await _error(send, 405, "method_not_allowed", message, [ALLOW])
            return
        if not check_accept_headers(Request(scope))[1]:
            message = "A GET of /mcp is an event stream: accept text/event-stream."
            await _error(send, 406, "not_acceptable", message)
            return
        rest = self._rest(scope, headers, token)
        refused = await _refusal(rest)
        if refused is not None:
            await _refuse(send, refused)
            return
        token_id = token_digest(token)[:12]
        if self.listening[token_id] >= LISTENERS_PER_TOKEN:
            message = f"This token already holds {LISTENERS_PER_TOKEN} open streams of /mcp."
            await _error(send, 429, "too_many_streams", message)
            return
        self.listening[token_id] += 1
        try:
            changed = _list_changed(self.gateway.skills.changes(rest))
            stream = EventSourceResponse(changed, ping=KEEPALIVE_SECONDS)
            await stream(scope, receive, send)
        finally:
            self.listening[token_id] -= 1
            if not self.listening[token_id]:
                del self.listening[token_id]

    def _rest(self, scope: Message, headers: Headers, token: str) -> Rest:
        passed = {name: headers[name] for name in FORWARDED if name in headers}
        client = scope.get("client") or ("127.0.0.1", 0)
        resource = resource_url(base_url(scope, self.public_url))
        return Rest(
            self.http,
            {**passed, "Authorization": f"Bearer {token}"},
            {CLIENT_EXTENSION: tuple(client), RESOURCE_EXTENSION: resource},
        )

    def _origin_allowed(self, origin: str | None) -> bool:
        if not origin:
            return True  # not a browser: DNS rebinding needs one
        origin = origin.rstrip("/")
        if origin in self.origins or "*" in self.origins:
            return True
        return any(origin == base or origin.startswith(base + ":") for base in LOOPBACK_ORIGINS)


def _caller(ctx: ServerRequestContext[Any, Any]) -> Caller:
    caller = CALLER.get()
    if caller is None:  # pragma: no cover - every request passes McpEndpoint first
        raise RuntimeError("an MCP request was served without its caller")
    return caller


@dataclass
class _Opened:
    """What the endpoint reads of one request: its message, session, client and token;
    `problem` says why the body is no JSON-RPC message, once its token passed."""

    headers: Headers
    body: bytes
    token: str

    def __post_init__(self) -> None:
        self.problem: ApiError | None = None
        try:
            # Read as the SDK reads it (its parser refuses what nests past 200 levels), then
            # checked strictly, as the schema in the API's document reads it (no `false` for
            # a number), so that the SDK is given nothing it would refuse.
            message = pydantic_core.from_json(self.body)
            types.jsonrpc_message_adapter.validate_python(message, strict=True, by_name=False)
        except ValueError as e:  # not JSON, or no JSON-RPC message (a ValidationError)
            self.problem = _not_a_message(e)
            message = None
        params = message.get("params") if isinstance(message, dict) else None
        params = params if isinstance(params, dict) else {}
        method = message.get("method") if isinstance(message, dict) else None
        self.method = method if isinstance(method, str) else None
        request_id = message.get("id") if isinstance(message, dict) else None
        self.request_id = request_id if isinstance(request_id, str | int) else None
        self.initializing = self.method == "initialize"
        info = params.get("clientInfo") or (params.get("_meta") or {}).get(
            types.CLIENT_INFO_META_KEY
        )
        name = info.get("name") if isinstance(info, dict) else None
        self.client = client_slug(name)
        tool = params.get("name") if self.method == "tools/call" else None
        self.tool = tool if isinstance(tool, str) else None

    def logged(self) -> dict[str, str]:
        """The message's method and, for a tools/call, its tool: as the request log shows
        them (printable, cut short; the client chose them)."""
        shown = {"mcp_method": self.method, "mcp_tool": self.tool}
        return {
            key: "".join(c if c.isprintable() else "?" for c in value[:LOGGED_NAME_CHARS])
            for key, value in shown.items()
            if value is not None
        }

    @property
    def session(self) -> str | None:
        return self.headers.get(MCP_SESSION_ID_HEADER)

    @property
    def token_id(self) -> str:
        return token_digest(self.token)[:12]

    def new_session(self) -> str:
        return f"{self.client}-{secrets.token_hex(8)}"


async def _list_changed(changes: AsyncIterator[None]) -> AsyncIterator[dict[str, str]]:
    notification = types.JSONRPCNotification(
        jsonrpc="2.0",
        **types.ResourceListChangedNotification().model_dump(by_alias=True, mode="json"),
    )
    async for _ in changes:
        yield {"event": "message", "data": notification.model_dump_json(by_alias=True)}


async def _refusal(rest: Rest) -> RestError | None:
    """Why the API refuses the caller's token, or None when it accepts it: what the request's
    own calls to the API heard, else one cheap request that checks it."""
    if rest.verdict.refused is not None:
        return rest.verdict.refused
    if rest.verdict.accepted:
        return None
    try:
        await rest.check_token()
    except RestError as e:
        return e
    return None


async def _refuse(send: Send, error: RestError) -> None:
    """The API's refusal of the caller's token, saying what to send instead (401, 403); a
    lockout (429) or an outage as the API gave it; anything else it answered (a failure) as
    503."""
    status = error.http_status if error.http_status in (401, 403, 429, 503) else 503
    message = error.message
    if status == 401:
        message = f"{error.message} {WHAT_TO_SEND}"
    elif status == 403:  # the token is good, but a node's
        message = f"{NODE_TOKEN} {WHAT_TO_SEND}"
    await _error(send, status, error.code, message)


async def _refuse_method(method: str, send: Send) -> None:
    message = f"/mcp does not take {method}; it takes {', '.join(METHODS)}."
    await _error(send, 405, "method_not_allowed", message, [ALLOW])


def _unfit_post(scope: Message, headers: Headers) -> ApiError | None:
    """Why a POST can't carry an MCP message, as the MCP SDK would refuse it; None if it can."""
    media_type = headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != JSON:
        sent = f"was sent as {media_type}" if media_type else "had no Content-Type"
        message = f"Send the MCP message as JSON ('Content-Type: {JSON}'). This one {sent}."
        return ApiError(415, "unsupported_media_type", message)
    if not all(check_accept_headers(Request(scope))):
        message = (
            "A POST to /mcp is answered as JSON or as an event stream: "
            f"accept both ({JSON}, text/event-stream)."
        )
        return ApiError(406, "not_acceptable", message)
    return None


def _not_a_message(error: ValueError) -> ApiError:
    if isinstance(error, pydantic.ValidationError):
        message = (
            "The body is not a JSON-RPC 2.0 message: a request, a notification or a response "
            'with "jsonrpc": "2.0".'
        )
        return ApiError(400, "invalid_message", message)
    return ApiError(400, "invalid_json", f"The request body is not valid JSON: {error}.")


def _bearer(headers: Headers) -> str | None:
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


async def _body(receive: Receive, limit: int = DEFAULT_MAX_REQUEST_BODY_SIZE) -> bytes | None:
    """The request's whole body; None past `limit` bytes."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(parts)


async def _too_many_listens(send: Send, request_id: str | int | None, limit: int) -> None:
    """A listen past its token's limit: the JSON-RPC error for its request, at HTTP 429 (the
    SDKs' clients surface the error a non-2xx JSON body holds)."""
    message = (
        f"This token already holds {limit} open subscriptions/listen streams, the most one "
        "token may (SKILLFLEET_MCP_LISTEN_LIMIT); close one first."
    )
    error = {"code": TOO_MANY_LISTENS, "message": message,
             "data": {"code": "too_many_streams", "status": 429, "limit": limit}}  # fmt: skip
    body = orjson.dumps({"jsonrpc": "2.0", "id": request_id, "error": error})
    headers = [
        (b"content-type", JSON.encode()),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", b"5"),
    ]
    await send({"type": "http.response.start", "status": 429, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _error(
    send: Send, status: int, code: str, message: str, extra: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    body = orjson.dumps(error_body(status, code, message))
    headers = [(b"content-type", JSON.encode()), (b"content-length", str(len(body)).encode())]
    headers.extend(extra)
    if status == 401 and not any(name == b"www-authenticate" for name, _ in extra):
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})

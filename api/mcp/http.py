"""`/mcp`: the gateway over streamable HTTP, on the API's own port.

Stateless: whichever API process receives a request serves it alone, so any number of
processes serve the same clients. What a client's session needs across requests travels with
its requests: its token, and the `Mcp-Session-Id` given with the answer to its `initialize`,
which names the session's chat. Each request, before the MCP SDK's session manager serves it:

1. **Origin.** A browser's request from an origin other than this host's loopback names or
   `SKILLFLEET_CORS_ORIGINS` is refused (403 `origin_not_allowed`): a page can't reach a local
   API through DNS rebinding.
2. **Token.** `Authorization: Bearer <owner or agent token>`, checked by the API itself, with
   the caller's address; without one, or with a bad one, 401 with `WWW-Authenticate: Bearer`.
   A `tools/call` or `tools/list` is checked by the API calls it makes anyway: its answer's
   headers wait until one of them succeeded, or else for a check of its own (GET /api/tools
   for one definition), and a refused token gets the 401 instead of the SDK's answer. Any
   other request is checked that way before the SDK sees it.
3. **The caller.** The gateway's handlers reach the API in this process with the same token
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
import json
import secrets
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from sse_starlette import EventSourceResponse
from starlette.datastructures import Headers

from api.mcp.gateway import APPROVAL_WAIT, Caller, Gateway, client_slug
from api.mcp.inprocess import CLIENT_EXTENSION, App, InProcessClient
from api.mcp.rest import CLIENT_TIMEOUT, Rest, RestError
from api.mcp.skills import Wakeup
from store.tokens import token_digest

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

PATH = "/mcp"
# Never reaches a network: the in-process transport serves it.
IN_PROCESS_URL = "http://skillfleet.internal"
LOOPBACK_ORIGINS = ("http://127.0.0.1", "http://localhost", "http://[::1]")
FORWARDED = ("x-forwarded-for", "user-agent")

# Methods whose handlers call the API with the caller's token before anything else, so that
# call checks the token: the request needs no check of its own unless its calls fail, and its
# answer waits for the verdict either way (see McpEndpoint._serve).
CHECKED_BY_THEIR_CALLS = frozenset({"tools/call", "tools/list"})
LISTEN_POLL = 30.0  # seconds between a GET stream's looks at its skills when nothing woke it
LISTENERS_PER_TOKEN = 8  # GET streams one token may hold open in one process
KEEPALIVE_SECONDS = 15

# The caller of the request being served; the gateway's handlers run in a copy of its context.
CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("mcp_caller", default=None)


class McpEndpoint:
    """The ASGI app of `/mcp`, reaching the API's app `app` in this process."""

    def __init__(
        self,
        app: App,
        origins: tuple[str, ...] = (),
        approval_wait: float = APPROVAL_WAIT,
    ) -> None:
        self.http = InProcessClient(app, IN_PROCESS_URL, CLIENT_TIMEOUT)
        self.wakeup = Wakeup(LISTEN_POLL)
        self.gateway = Gateway(_caller, approval_wait, self.wakeup)
        self.listening: Counter[str] = Counter()  # open GET streams by token id
        self.manager = StreamableHTTPSessionManager(self.gateway.server, stateless=True)
        self.origins = origins
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
        headers = Headers(scope=scope)
        if not self._origin_allowed(headers.get("origin")):
            message = (
                "Requests from this page's origin may not use /mcp (set SKILLFLEET_CORS_ORIGINS)."
            )
            await _error(send, 403, "origin_not_allowed", message)
            return
        token = _bearer(headers)
        if token is None:
            message = "Send 'Authorization: Bearer <token>' with an owner or agent token."
            await _error(send, 401, "unauthorized", message)
            return
        if scope["method"] == "GET":
            await self._listen(scope, headers, token, receive, send)
            return
        body = await _body(receive)
        if body is None:
            await _error(send, 413, "body_too_large", "The MCP message is too large.")
            return
        opened = _Opened(headers, body, token)
        rest = self._rest(scope, headers, token)
        if opened.method not in CHECKED_BY_THEIR_CALLS:
            refused = await _refusal(rest)
            if refused is not None:
                await _refuse(send, refused)
                return
        await self._serve(scope, opened, rest, receive, send)

    async def _serve(
        self, scope: Message, opened: _Opened, rest: Rest, receive: Receive, send: Send
    ) -> None:
        session = opened.session or (opened.new_session() if opened.initializing else None)
        chat = f"mcp-{session}" if session else f"mcp-{opened.client}-{opened.token_id}"
        reset = CALLER.set(Caller(rest, chat, opened.token_id))

        unread = [{"type": "http.request", "body": opened.body, "more_body": False}]
        refused = False

        async def replay() -> Message:
            return unread.pop() if unread else await receive()

        async def checked(message: Message) -> None:
            """The SDK's answer, once the token is known good; the API's refusal instead."""
            nonlocal refused
            if refused:
                return  # the client has its 401; the rest of the SDK's answer is dropped
            if message["type"] == "http.response.start":
                error = await _refusal(rest)
                if error is not None:
                    refused = True
                    await _refuse(send, error)
                    return
                if session and not opened.session:
                    name = MCP_SESSION_ID_HEADER.encode()
                    message["headers"] = [*message.get("headers", []), (name, session.encode())]
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
            await _error(send, 405, "method_not_allowed", message)
            return
        if "text/event-stream" not in headers.get("accept", ""):
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
        return Rest(
            self.http,
            {**passed, "Authorization": f"Bearer {token}"},
            {CLIENT_EXTENSION: tuple(client)},
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
    """What the endpoint reads of one request: its session, client and token."""

    headers: Headers
    body: bytes
    token: str

    def __post_init__(self) -> None:
        try:
            message = json.loads(self.body) if self.body else None
        except ValueError:
            message = None  # the SDK answers it as a parse error
        params = message.get("params") if isinstance(message, dict) else None
        params = params if isinstance(params, dict) else {}
        method = message.get("method") if isinstance(message, dict) else None
        self.method = method if isinstance(method, str) else None
        self.initializing = self.method == "initialize"
        info = params.get("clientInfo") or (params.get("_meta") or {}).get(
            types.CLIENT_INFO_META_KEY
        )
        name = info.get("name") if isinstance(info, dict) else None
        self.client = client_slug(name)

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
    status = error.http_status if error.http_status in (401, 429) else 503
    await _error(send, status, error.code, error.message)


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


async def _error(send: Send, status: int, code: str, message: str) -> None:
    body = json.dumps({"code": code, "status": status, "message": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})

"""The gateway: one MCP server whose tools are the API's tools, each call one REST call.

`tools/list` is GET /api/tools (same names, descriptions and input schemas), with annotations
from each tool's tier, plus `get_call_outcome` for a call that outlived its wait. `tools/call`
is POST /api/tools/<tool> with the caller's token; what follows depends on the envelope:

- `running`: the run's events are followed (GET /api/runs/<id>/events), each output line sent
  as a progress notification, until its exit; the call's recorded answer is the result. A
  client that cancels (or leaves) cancels the run (POST /api/runs/<id>/cancel).
- `pending_approval`: the call waits for the owner's answer (GET /api/calls/<id>?wait=) up to
  `approval_wait` seconds, saying so in a progress notification at each round; nothing an MCP
  client sends can answer it. A client that takes URL elicitations is first given the
  console's approvals page to open, and waits once it comes back (api/mcp/elicitation.py).
  Approved: the run is followed as above; denied: an error result with the denial's message;
  unanswered: a result naming the approval and the tool that collects the outcome later. A
  client that cancels (or leaves) while it waits withdraws the approval (POST
  /api/calls/<id>/withdraw): answering it later runs nothing.
- anything else: the envelope's result or error, as it is.

The skills are resources too, and the Skills extension's manifests (api/mcp/skills.py).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any

import anyio
import mcp_types as types
import structlog
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.models import InitializationOptions

from api.mcp import files as runfiles
from api.mcp.elicitation import (
    QUESTIONS_ROUTE,
    StateError,
    ask_to_open,
    can_be_asked_to_open,
    can_open_urls,
    console_url,
    open_console,
    resumed,
)
from api.mcp.rest import Rest, RestError, RunEvent
from api.mcp.skills import EXTENSION as SKILLS_EXTENSION
from api.mcp.skills import GetSkillParams, SkillResources, Wakeup
from broker.tiers import Tier
from broker.toolset import build_registry
from store.settings import DEFAULT_MCP_APPROVAL_WAIT

log = structlog.get_logger(__name__)

# Seconds a call waits for the owner's answer (SKILLFLEET_MCP_APPROVAL_WAIT, mcp.approval_wait).
APPROVAL_WAIT = DEFAULT_MCP_APPROVAL_WAIT
APPROVAL_ROUND = 15.0  # seconds between the progress notifications of a waiting call
CANCEL_SECONDS = 10.0  # how long cancelling a run may take once the client left
PROGRESS_LINE_CHARS = 1000  # a longer output line is cut in its progress notification
CHAT_META = "skillfleet/chat_id"
TURN_META = "skillfleet/turn_id"
OUTCOME_TOOL = "get_call_outcome"
OUTCOME_DESCRIPTION = (
    "Collect the outcome of an earlier call that was still waiting for the owner's approval "
    "when its wait ran out: waits again for the answer, then for the run it started."
)
OUTCOME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"call_id": {"type": "string", "description": "The call_id a result named"}},
    "required": ["call_id"],
    "additionalProperties": False,
}
INSTRUCTIONS = (
    "skillfleet's governed Agent Skills. Call list_skills, then load_skill for a skill's "
    "instructions, then run_skill_script to run one of its scripts. Some calls wait for the "
    "owner's approval; the owner answers them, never you."
)


class _Server(Server[Any]):
    """The SDK's server, telling handshake-era clients that the resources list changes: they
    hear it on the session's GET stream (`/mcp`) or the connection (stdio)."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(resources_changed=True),
            experimental_capabilities,
            extensions,
        )


def _hints(tier: Tier) -> types.ToolAnnotations:
    """What a host may assume of a tool of `tier`: read tools change nothing; a tool whose calls
    may change or delete things (scripts, skill edits) is destructive."""
    if tier == Tier.READ:
        return types.ToolAnnotations(read_only_hint=True, destructive_hint=False)
    destructive = tier in (Tier.CHANGE, Tier.DESTRUCTIVE, Tier.SKILL_EDIT, Tier.SECRET)
    return types.ToolAnnotations(read_only_hint=False, destructive_hint=destructive)


TIERS: dict[str, Tier] = {
    name: tool.tier for tool in build_registry() for name in (tool.name, *tool.aliases)
}


_SLUG = re.compile(r"[^a-z0-9]+")


def client_slug(name: object) -> str:
    """An MCP client's name as it goes into chat names: `Claude Code` is `claude-code`."""
    slug = _SLUG.sub("-", str(name or "").lower()).strip("-")[:40].strip("-")
    return slug or "client"


def client_name(ctx: ServerRequestContext[Any, Any]) -> str:
    """The name the client gave in its `initialize` or its request's `_meta`, as a slug."""
    params = ctx.session.client_params
    return client_slug(params.client_info.name if params is not None else None)


@dataclass(frozen=True)
class Caller:
    """Who an MCP request acts for: the API as its token sees it, and its default chat."""

    rest: Rest
    chat: str  # its calls' chat_id, unless a call's _meta names one
    token_id: str = ""  # tells callers apart, so a client cancels only its own calls
    # `chat` is skillfleet's guess (a client without a session, one chat for all its
    # conversations), not a conversation the host named.
    guessed: bool = False


CallerOf = Callable[[ServerRequestContext[Any, Any]], Caller]
# A call being served: its caller's token id, its chat and its request id.
CallKey = tuple[str, str, Any]


class Gateway:
    """The MCP server; `caller_of` gives each request's caller. `wakeup` says when a watching
    client's skills may have changed. With `connected` (stdio: one connection, kept), a
    handshake-era client hears its skills' changes on the connection once initialized."""

    def __init__(
        self,
        caller_of: CallerOf,
        approval_wait: float = APPROVAL_WAIT,
        wakeup: Wakeup | None = None,
        *,
        connected: bool = False,
    ) -> None:
        self.caller_of = caller_of
        self.approval_wait = approval_wait
        self.schemas: dict[str, dict[str, Any]] = {OUTCOME_TOOL: OUTCOME_SCHEMA}
        self.skills = SkillResources(lambda ctx: caller_of(ctx).rest, wakeup)
        self.server: Server[Any] = _Server(
            "skillfleet",
            version=_version(),
            instructions=INSTRUCTIONS,
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
            on_list_resources=self.skills.list_resources,
            on_list_resource_templates=self.list_templates,
            on_read_resource=self.read_resource,
            on_subscriptions_listen=self.skills.listen,
            get_tool_input_schema=self.schemas.get,
        )
        self.server.extensions[SKILLS_EXTENSION] = {}
        self.server.add_request_handler(
            "skills/list", types.PaginatedRequestParams, self.skills.list_skills
        )
        self.server.add_request_handler("skills/get", GetSkillParams, self.skills.get_skill)
        # Calls being served, by caller, chat and request id: a stateless HTTP client's
        # `notifications/cancelled` arrives in a request of its own, which finds its call here.
        self.serving: dict[CallKey, anyio.CancelScope] = {}
        # Where a cancellation of a call served elsewhere goes: with several API processes,
        # every process hears it (api/asgi.py relays it through Redis). None: nowhere.
        self.relay_cancel: Callable[[CallKey], Awaitable[None]] | None = None
        self.server.add_notification_handler(
            "notifications/cancelled", types.CancelledNotificationParams, self.cancelled
        )
        if connected:
            self.server.add_notification_handler(
                "notifications/initialized", types.NotificationParams, self.announce_changes
            )

    async def list_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        """The skills' files and the runs' files."""
        found = await self.skills.list_templates(ctx, params)
        return types.ListResourceTemplatesResult(
            resource_templates=[*found.resource_templates, runfiles.TEMPLATE]
        )

    async def read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        if runfiles.is_file_uri(params.uri):
            return await runfiles.read(self.caller_of(ctx).rest, params.uri)
        return await self.skills.read_resource(ctx, params)

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        definitions = await self.caller_of(ctx).rest.tools()
        tools = [_tool(d["function"]) for d in definitions]
        self.schemas.update({tool.name: tool.input_schema for tool in tools})
        outcome = types.Tool(
            name=OUTCOME_TOOL,
            description=OUTCOME_DESCRIPTION,
            input_schema=OUTCOME_SCHEMA,
            annotations=types.ToolAnnotations(read_only_hint=True, destructive_hint=False),
        )
        return types.ListToolsResult(tools=[*tools, outcome])

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        caller = self.caller_of(ctx)
        key = (caller.token_id, caller.chat, ctx.request_id)
        with anyio.CancelScope() as scope:
            self.serving[key] = scope
            try:
                return await self._call(ctx, caller, params)
            finally:
                self.serving.pop(key, None)
        return error_result("cancelled", "The client cancelled the call.")

    async def cancelled(
        self, ctx: ServerRequestContext[Any, Any], params: types.CancelledNotificationParams
    ) -> None:
        """A client cancels one of its calls (its run is cancelled as the call unwinds)."""
        caller = self.caller_of(ctx)
        key = (caller.token_id, caller.chat, params.request_id)
        if not self.cancel_served(key) and self.relay_cancel is not None:
            # Shielded: a stateless request's handlers end with its answer, which may come first.
            with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_SECONDS):
                await self.relay_cancel(key)

    async def announce_changes(
        self, ctx: ServerRequestContext[Any, Any], params: types.NotificationParams | None
    ) -> None:
        """For as long as the connection lasts, tell the client when its skills change."""
        async for _ in self.skills.changes(self.caller_of(ctx).rest):
            await ctx.session.send_notification(types.ResourceListChangedNotification())

    def cancel_served(self, key: CallKey) -> bool:
        """Cancel the call `key` if this process serves it; False when it doesn't."""
        scope = self.serving.get(key)
        if scope is None:
            return False
        scope.cancel()
        return True

    async def _call(
        self,
        ctx: ServerRequestContext[Any, Any],
        caller: Caller,
        params: types.CallToolRequestParams,
    ) -> types.CallToolResult | types.InputRequiredResult:
        try:
            again = resumed(params)
            if again is not None:  # back from the console's link: the same call, no new one
                envelope = envelope_of(await caller.rest.get_call(again.call_id))
                if again.declined and envelope.get("status") == "pending_approval":
                    return result_of(envelope)
            else:
                envelope = await self._first(ctx, caller, params)
                if envelope.get("status") == "pending_approval" and can_open_urls(ctx):
                    return await self._open_console(ctx, caller.rest, envelope)
                if envelope.get("status") == "pending_approval" and can_be_asked_to_open(ctx):
                    envelope = await self._await_owner_linked(ctx, caller.rest, envelope)
                    if envelope.get("status") == "pending_approval":
                        return result_of(envelope)  # declined, or the wait ran out
            envelope = await self._follow(ctx, caller.rest, envelope)
        except StateError as e:
            return error_result(e.code, str(e))
        except RestError as e:
            return error_result(e.code, e.message)
        return result_of(envelope)

    async def _first(
        self,
        ctx: ServerRequestContext[Any, Any],
        caller: Caller,
        params: types.CallToolRequestParams,
    ) -> dict[str, Any]:
        """The envelope of a call's first round: the REST call it makes, or the one it
        collects."""
        arguments = dict(params.arguments or {})
        if params.name == OUTCOME_TOOL:
            return await self._outcome(caller, arguments)
        return await caller.rest.call(params.name, self._body(ctx, caller, arguments))

    async def _open_console(
        self, ctx: ServerRequestContext[Any, Any], rest: Rest, envelope: dict[str, Any]
    ) -> types.InputRequiredResult:
        """Ask the client to show the console's approvals page, naming what waits there."""
        url, message = await _console_link(ctx, rest, envelope)
        return open_console(url, message, envelope["call_id"])

    async def _await_owner_linked(
        self, ctx: ServerRequestContext[Any, Any], rest: Rest, envelope: dict[str, Any]
    ) -> dict[str, Any]:
        """Wait for the owner while the client shows the console's link (a request of the
        server's own); the owner's answer withdraws the link, a declined link ends the wait."""
        url, message = await _console_link(ctx, rest, envelope)
        answered = envelope

        async def shown(group: anyio.abc.TaskGroup) -> None:
            if await ask_to_open(ctx, url, message, envelope["call_id"]):
                group.cancel_scope.cancel()

        async def waited(group: anyio.abc.TaskGroup) -> None:
            nonlocal answered
            # A declined link ends this wait, and the approval stays: the wait keeps it.
            answered = await self._await_owner(ctx, rest, envelope, withdraw=False)
            group.cancel_scope.cancel()

        try:
            async with anyio.create_task_group() as group:
                group.start_soon(shown, group)
                group.start_soon(waited, group)
        except anyio.get_cancelled_exc_class():  # the client cancelled or left: withdrawn
            await _withdraw(rest, envelope)
            raise
        return answered

    def _body(
        self, ctx: ServerRequestContext[Any, Any], caller: Caller, arguments: dict[str, Any]
    ) -> dict[str, Any]:
        meta = dict(ctx.meta or {})
        chat, turn = meta.get(CHAT_META), meta.get(TURN_META)
        named = isinstance(chat, str) and bool(chat)
        turned = isinstance(turn, str) and bool(turn)
        return {
            "arguments": arguments,
            "chat_id": chat if named else caller.chat,
            "turn_id": turn if turned else None,
            # The gateway's chat is its name for the client, whose host may hold many
            # conversations in it (every conversation of a client without sessions, every
            # one a stdio host starts): no load in it tells what a conversation holds.
            "full_loads": not (named or turned),
            # Without a session either, the chat is a guess: its grants were given in other
            # conversations, and no grant is offered for it.
            "chat_guessed": caller.guessed and not named,
        }

    async def _outcome(self, caller: Caller, arguments: dict[str, Any]) -> dict[str, Any]:
        call_id = arguments.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            raise RestError(422, "arguments_invalid", "Give the call_id of the call to collect.")
        return envelope_of(await caller.rest.get_call(call_id))

    async def _follow(
        self, ctx: ServerRequestContext[Any, Any], rest: Rest, envelope: dict[str, Any]
    ) -> dict[str, Any]:
        """The call's envelope once it ended, or once its approval's (question's) wait ran out."""
        if envelope.get("status") == "pending_approval":
            envelope = await self._await_owner(ctx, rest, envelope)
        if envelope.get("status") == "pending_question":
            envelope = await self._await_answer(ctx, rest, envelope)
        if envelope.get("status") == "running" and envelope.get("run_id"):
            envelope = await self._follow_run(ctx, rest, envelope)
        return envelope

    async def _await_owner(
        self,
        ctx: ServerRequestContext[Any, Any],
        rest: Rest,
        envelope: dict[str, Any],
        *,
        withdraw: bool = True,
    ) -> dict[str, Any]:
        """Wait for the owner to answer the call's approval, telling the client at each round;
        a client that cancels or leaves meanwhile withdraws the approval (with `withdraw`)."""
        approval_id = envelope.get("approval_id")
        console = console_url(ctx, str(rest.http.base_url))
        try:
            waiting = await _waiting_for(rest, approval_id, console)
            return await self._wait_while(ctx, rest, envelope, waiting, keep=not withdraw)
        except anyio.get_cancelled_exc_class():
            if withdraw:
                await _withdraw(rest, envelope)
            raise

    async def _await_answer(
        self, ctx: ServerRequestContext[Any, Any], rest: Rest, envelope: dict[str, Any]
    ) -> dict[str, Any]:
        """Wait for the owner to answer the call's question (ask_owner, request_secret)."""
        question_id = envelope.get("question_id") or envelope["call_id"]
        console = console_url(ctx, str(rest.http.base_url), QUESTIONS_ROUTE)
        waiting = (
            f"Waiting for the owner to answer question {question_id} in the console "
            f"({console}), with `skillfleet questions answer {question_id} ...` or from a "
            "push notification."
        )
        return await self._wait_while(ctx, rest, envelope, waiting)

    async def _wait_while(
        self,
        ctx: ServerRequestContext[Any, Any],
        rest: Rest,
        envelope: dict[str, Any],
        waiting: str,
        *,
        keep: bool = False,
    ) -> dict[str, Any]:
        """The call's envelope once it left its waiting state, or when `approval_wait` ran out;
        `waiting` is sent as a progress notification at each round. With `keep`, a wait cut
        short leaves the approval pending (else the API withdraws it)."""
        call_id, status = envelope["call_id"], envelope.get("status")
        deadline = time.monotonic() + self.approval_wait
        rounds = 0
        while (left := deadline - time.monotonic()) > 0:
            rounds += 1
            await ctx.session.report_progress(rounds, None, waiting)
            answer = await rest.get_call(call_id, wait=min(left, APPROVAL_ROUND), keep_pending=keep)
            envelope = envelope_of(answer)
            if envelope.get("status") != status:
                return envelope
        return envelope

    async def _follow_run(
        self, ctx: ServerRequestContext[Any, Any], rest: Rest, envelope: dict[str, Any]
    ) -> dict[str, Any]:
        """Follow the call's run to its exit, each output line a progress notification; a
        cancelled request cancels the run."""
        run_id = envelope["run_id"]
        try:
            lines = _Lines()
            async for event in rest.run_events(run_id):
                for line in lines.of(event):
                    await ctx.session.report_progress(lines.count, None, line)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_SECONDS):
                await _cancel(rest, run_id)
            raise
        # The exit event is written once the call has its answer: read it.
        return envelope_of(await rest.get_call(envelope["call_id"], wait=CANCEL_SECONDS))


async def _console_link(
    ctx: ServerRequestContext[Any, Any], rest: Rest, envelope: dict[str, Any]
) -> tuple[str, str]:
    """The console's approvals page, and the words that send the user there."""
    approval_id = envelope.get("approval_id")
    message = (
        f"skillfleet's approval {approval_id} ({await _asked(rest, approval_id)}) waits "
        "for the owner. Open the console to approve or deny it there (or answer it with "
        "skillfleet approvals); nothing sent from here answers it."
    )
    return console_url(ctx, str(rest.http.base_url)), message


async def _withdraw(rest: Rest, envelope: dict[str, Any]) -> None:
    """The client stopped waiting for the owner: the call's approval is withdrawn, so an answer
    that comes later runs nothing (shielded: it runs while the call unwinds)."""
    call_id = envelope.get("call_id")
    if not call_id:
        return
    with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_SECONDS):
        try:
            await rest.withdraw(str(call_id))
            log.info("mcp client left: approval withdrawn", call_id=call_id)
        except RestError as e:  # answered meanwhile, or the API is away
            log.info("mcp client left: approval not withdrawn", call_id=call_id, code=e.code)


async def _cancel(rest: Rest, run_id: str) -> None:
    try:
        await rest.cancel_run(run_id)
        log.info("mcp client left: run cancelled", run_id=run_id)
    except RestError as e:  # it ended meanwhile, or the API is away: nothing left to stop
        log.info("mcp client left: run not cancelled", run_id=run_id, code=e.code)


async def _waiting_for(rest: Rest, approval_id: str | None, console: str) -> str:
    """What a waiting call tells its client, in words."""
    text = "Waiting for the owner to answer"
    if approval_id is None:
        return text + "."
    what = await _asked(rest, approval_id)
    return (
        f"{text} approval {approval_id} ({what}) in the console ({console}), the CLI "
        f"(skillfleet approvals) or a push notification."
    )


async def _asked(rest: Rest, approval_id: str | None) -> str:
    """What an approval asks, in a few words: its warning, else its tool."""
    try:
        approval = await rest.approval(approval_id) if approval_id else {}
    except RestError:
        approval = {}
    return str(approval.get("warning") or approval.get("tool") or "this call")


class _Lines:
    """A run's output cut into whole lines, stdout and stderr each on its own."""

    def __init__(self) -> None:
        self.partial: dict[str, str] = {}
        self.count = 0

    def of(self, event: RunEvent) -> list[str]:
        if event.kind == "exit":
            rest = [text for text in self.partial.values() if text]
            self.partial.clear()
            return self._counted(rest)
        if event.kind not in ("stdout", "stderr"):
            return []
        text = self.partial.get(event.kind, "") + str(event.data.get("text", ""))
        *whole, self.partial[event.kind] = text.split("\n")
        return self._counted(whole)

    def _counted(self, lines: list[str]) -> list[str]:
        self.count += len(lines)
        return [line[:PROGRESS_LINE_CHARS] for line in lines]


def _tool(function: dict[str, Any]) -> types.Tool:
    name = str(function["name"])
    return types.Tool(
        name=name,
        description=function.get("description"),
        input_schema=function.get("parameters") or {"type": "object"},
        annotations=_hints(TIERS.get(name, Tier.CHANGE)),
    )


def envelope_of(call: dict[str, Any]) -> dict[str, Any]:
    """A call as GET /api/calls shows it, in the envelope's shape POST /api/tools answers."""
    if "call_id" in call and "error_code" not in call:
        return call
    envelope = {
        key: call.get(key)
        for key in ("call_id", "status", "result", "approval_id", "run_id", "question_id")
    }
    if call.get("error_code"):
        envelope["error"] = {"code": call["error_code"], "message": call.get("error_message")}
    return envelope


def result_of(envelope: dict[str, Any]) -> types.CallToolResult:
    """An MCP tool result: the result as text and as structured content, or the error."""
    status = envelope.get("status")
    result = envelope.get("result")
    if status == "pending_approval":
        return _unanswered(envelope)
    if status == "pending_question":
        call_id = envelope.get("call_id")
        text = (
            f"The owner has not answered question {envelope.get('question_id')} yet. Call "
            f"{OUTCOME_TOOL} with call_id {call_id} later to collect the answer."
        )
        return _text_result(text, {"call_id": call_id, "status": "pending_question"})
    if status in ("running", "deciding"):
        return _text_result(
            f"The call {envelope.get('call_id')} is still {status}; call {OUTCOME_TOOL} with its "
            "call_id to collect its outcome.",
            {"call_id": envelope.get("call_id"), "status": status},
        )
    error = envelope.get("error") or {}
    if status != "done":
        code = error.get("code") or status or "failed"
        message = error.get("message") or f"The call ended {status}."
        if isinstance(result, dict) and "exit_code" in result:
            text = f"{message}\n\n{_run_text(result)}"
            return _text_result(text, {**result, "error": {"code": code, "message": message}}, True)
        return error_result(str(code), str(message))
    if isinstance(result, dict) and "exit_code" in result:
        made = _text_result(_run_text(result), result)
        made.content.extend(runfiles.links(result))
        return made
    structured = result if isinstance(result, dict) else {"result": result}
    text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
    return _text_result(text, structured)


def _unanswered(envelope: dict[str, Any]) -> types.CallToolResult:
    call_id, approval_id = envelope.get("call_id"), envelope.get("approval_id")
    text = (
        f"The owner has not answered approval {approval_id} yet, so the call did not run. "
        f"Call {OUTCOME_TOOL} with call_id {call_id} later to collect its outcome."
    )
    structured = {"call_id": call_id, "status": "pending_approval", "approval_id": approval_id}
    return _text_result(text, structured)


def _run_text(result: dict[str, Any]) -> str:
    parts = [f"exit code {result.get('exit_code')} ({result.get('status')})"]
    for stream in ("stdout", "stderr"):
        if result.get(stream):
            parts.append(f"{stream}:\n{result[stream]}")
    made = [entry for entry in result.get("files") or [] if isinstance(entry, dict)]
    if made:
        listed = "\n".join(
            f"{entry.get('path')}: {runfiles.file_uri(str(entry.get('id')))} "
            f"({entry.get('size')} bytes)"
            for entry in made
        )
        parts.append(
            f"files (read each resource, or name its id in a later run's files):\n{listed}"
        )
    if result.get("files_note"):
        parts.append(str(result["files_note"]))
    return "\n\n".join(parts)


def error_result(code: str, message: str) -> types.CallToolResult:
    return _text_result(f"{message} ({code})", {"error": {"code": code, "message": message}}, True)


def _text_result(
    text: str, structured: dict[str, Any], is_error: bool = False
) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=structured,
        is_error=is_error,
    )


def _version() -> str:
    try:
        return metadata.version("skillfleet")
    except metadata.PackageNotFoundError:
        return ""

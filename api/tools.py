"""The tool API agents call: function definitions and one route per call."""

from __future__ import annotations

from typing import Any

from flask import Response
from flask import request as http_request
from flask.views import MethodView

from api.auth import owner_or_agent
from api.blueprint import Blueprint
from api.live import hand_off, threads_to_spare
from api.livejobs import WaitCall
from api.paging import Page, keyset, memory_page
from api.schemas import ToolCallSchema, ToolDefinitionSchema, ToolResultSchema, WaitSchema
from api.services import services
from broker.calls import OPEN_STATES, CallRequest
from broker.classify import READ_EXACTLY
from broker.editargs import repeated_fields
from broker.errors import InvalidCall
from relay import held

blp = Blueprint("tools", __name__, url_prefix="/api/tools", description="Tools for agents")


@blp.route("")
class ToolList(MethodView):
    @blp.response(200, ToolDefinitionSchema(many=True))
    @keyset(blp)
    def get(self, page: Page) -> list[dict[str, Any]]:
        """List every tool as an OpenAI-style function definition"""
        caller = owner_or_agent()
        return memory_page(services().broker.registry.definitions(), page, caller)


CALL = "6f1c2d3e-0000-4000-8000-000000000001"
ENVELOPE_EXAMPLES = {
    "done": {
        "summary": "A read tool answered at once",
        "value": {"call_id": CALL, "status": "done", "result": {"skills": []}},
    },
    "running": {
        "summary": "A script was dispatched; follow /api/runs/<run_id>/events",
        "value": {"call_id": CALL, "status": "running", "run_id": "0d9e…"},
    },
    "pending_approval": {
        "summary": "The owner is asked; poll /api/calls/<call_id>?wait=30",
        "value": {"call_id": CALL, "status": "pending_approval", "approval_id": "a41b…"},
    },
    "denied": {
        "summary": "The policy (or the owner) said no",
        "value": {
            "call_id": CALL,
            "status": "denied",
            "error": {"code": "policy_denied", "message": "Plan mode changes nothing."},
        },
    },
    "failed": {
        "summary": "The call could not run or the script failed",
        "value": {
            "call_id": CALL,
            "status": "failed",
            "error": {"code": "skill_not_found", "message": "No enabled skill is named 'x'."},
        },
    },
}


@blp.route("/<tool>", methods=["POST"])
@blp.arguments(WaitSchema(), location="query")
@blp.arguments(ToolCallSchema())
@blp.response(200, ToolResultSchema, examples=ENVELOPE_EXAMPLES)
def call_tool(query: dict[str, Any], body: dict[str, Any], tool: str) -> dict[str, Any] | Response:
    """Call one tool; the envelope says done, failed, denied, running or pending_approval"""
    raw = http_request.get_data()
    return call_and_wait(owner_or_agent(), tool, body, query["wait"], raw, query["keep_pending"])


def call_and_wait(
    caller: int,
    tool: str,
    body: dict[str, Any],
    wait: float,
    raw_body: bytes,
    keep_pending: bool = False,
) -> dict[str, Any] | Response:
    """The envelope of a call of `tool` with `body` (ToolCallSchema's fields), waiting up to
    `wait` seconds for its end; `raw_body` is the JSON text the body was read from. A client
    that leaves while the call waits for approval withdraws it, unless `keep_pending`."""
    arguments = body["arguments"]
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise InvalidCall("'arguments' must be a JSON object of the tool's parameters.")
    broker = services().broker
    exact = tool in broker.registry.names and broker.registry.get(tool).name in READ_EXACTLY
    request = CallRequest(
        tool=tool,
        arguments=arguments,
        chat_id=body["chat_id"],
        turn_id=body["turn_id"],
        job_run_id=body["job_run_id"],
        mode=body["mode"],
        full_loads=body["full_loads"],
        chat_guessed=body["chat_guessed"],
        repeated=repeated_fields(raw_body) if exact else (),
    )
    if wait <= 0:
        return broker.call(caller, request).envelope()
    grace = min(wait, services().settings.wait_grace)
    waited = grace
    # A run that ends within the grace is answered in this thread: one blocking read of its
    # end, which also carries the call's events (relay.held). Only what outlasts it goes
    # to the live tier, so a short run doesn't pay for a hand-off and a long wait holds no
    # thread; while the process has threads to spare, the wait goes on here a grace at a time.
    with held.holding():
        outcome = broker.call(caller, request)
        if outcome.status in OPEN_STATES and outcome.run_id is not None and grace > 0:
            outcome = broker.outcome(caller, outcome.call_id, grace, outcome.run_id)
            while outcome.status in OPEN_STATES and wait > waited and threads_to_spare():
                step = min(grace, wait - waited)
                outcome = broker.outcome(caller, outcome.call_id, step, outcome.run_id)
                waited += step
    if outcome.status not in OPEN_STATES or wait <= waited:
        return outcome.envelope()
    # Without a slot to wait in, the call (already made) is answered as it stands.
    job = WaitCall(
        caller, outcome.call_id, outcome.run_id, wait - waited, "envelope", not keep_pending
    )
    return hand_off(job, instead=outcome.envelope())

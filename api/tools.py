"""The tool API agents call: function definitions and one route per call."""

from __future__ import annotations

from typing import Any

from flask.views import MethodView
from flask_smorest import Blueprint

from api.auth import owner
from api.schemas import ToolCallSchema, ToolDefinitionSchema, ToolResultSchema
from api.services import services
from broker.calls import CallRequest
from broker.errors import InvalidCall

blp = Blueprint("tools", __name__, url_prefix="/api/tools", description="Tools for agents")


@blp.route("")
class ToolList(MethodView):
    @blp.response(200, ToolDefinitionSchema(many=True))
    def get(self) -> list[dict[str, Any]]:
        """List every tool as an OpenAI-style function definition"""
        owner()
        return services().tools.registry.definitions()


@blp.route("/<tool>", methods=["POST"])
@blp.arguments(ToolCallSchema)
@blp.response(200, ToolResultSchema)
def call_tool(body: dict[str, Any], tool: str) -> dict[str, Any]:
    """Call one tool; the envelope says done, failed, denied, running or pending_approval"""
    caller = owner()
    arguments = body["arguments"]
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise InvalidCall("'arguments' must be a JSON object of the tool's parameters.")
    request = CallRequest(
        tool=tool,
        arguments=arguments,
        chat_id=body["chat_id"],
        turn_id=body["turn_id"],
        job_run_id=body["job_run_id"],
        mode=body["mode"],
    )
    assert caller.owner_id is not None
    return services().tools.call(caller.owner_id, request).envelope()

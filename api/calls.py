"""GET /api/calls/<id>: the recorded outcome of one tool call, optionally waited for."""

from __future__ import annotations

from typing import Any

from flask_smorest import Blueprint

from api.auth import owner_or_agent
from api.schemas import CallSchema, WaitSchema
from api.services import services
from store.models import ToolCall

blp = Blueprint("calls", __name__, url_prefix="/api/calls", description="Tool call outcomes")


@blp.route("/<call_id>")
@blp.arguments(WaitSchema, location="query")
@blp.response(200, CallSchema)
def get_call(query: dict[str, Any], call_id: str) -> ToolCall:
    """Show one tool call's outcome; `?wait=S` waits for an end state"""
    caller = owner_or_agent()
    return services().broker.get_call(caller, call_id, wait=query["wait"])

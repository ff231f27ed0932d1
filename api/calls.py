"""GET /api/calls/<id>: the recorded outcome of one tool call."""

from __future__ import annotations

from flask_smorest import Blueprint

from api.auth import owner
from api.schemas import CallSchema
from api.services import services
from store.errors import StoreError
from store.models import ToolCall

blp = Blueprint("calls", __name__, url_prefix="/api/calls", description="Tool call outcomes")


class CallNotFound(StoreError):
    """Raised when the caller has no tool call with that id."""

    code = "call_not_found"
    status = 404


@blp.route("/<call_id>")
@blp.response(200, CallSchema)
def get_call(call_id: str) -> ToolCall:
    """Show one tool call's outcome"""
    caller = owner()
    assert caller.owner_id is not None
    call = services().tools.get_call(caller.owner_id, call_id)
    if call is None:
        raise CallNotFound(f"You have no tool call '{call_id}'.")
    return call

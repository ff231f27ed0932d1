"""Errors raised by the broker; each carries a stable code and the HTTP status it maps to."""

from store.errors import SkillfleetError


class BrokerError(SkillfleetError):
    """Root of every broker error."""

    code = "broker_error"
    status = 400


class PolicyError(BrokerError):
    """Raised when a policy document is invalid; the message names the rule at fault."""

    code = "policy_invalid"
    status = 500


class ArgumentError(BrokerError):
    """Raised when a script call's arguments can't be read; the message is the HOST: text."""

    code = "invalid_arguments"
    status = 400


class SchemaMismatch(BrokerError):
    """Raised when arguments don't match the script's parameters schema."""

    code = "arguments_schema"
    status = 400


class UnknownTool(BrokerError):
    """Raised when a call names a tool the broker doesn't offer."""

    code = "unknown_tool"
    status = 404


class ToolNotImplemented(BrokerError):
    """Raised when a listed tool has no implementation in this release yet."""

    code = "not_implemented"
    status = 501


class InvalidCall(BrokerError):
    """Raised when a tool call's envelope or arguments don't fit the tool's parameters."""

    code = "invalid_call"
    status = 400


class SkillDisabled(BrokerError):
    """Raised when a call names a skill that is installed but switched off."""

    code = "skill_disabled"
    status = 403


class ApprovalNotFound(BrokerError):
    """Raised when the caller has no approval with that id."""

    code = "approval_not_found"
    status = 404


class ApprovalAnswered(BrokerError):
    """Raised when an approval was already answered, expired or voided."""

    code = "approval_answered"
    status = 409


class ApprovalWithdrawn(BrokerError):
    """Raised when the owner answers an approval its agent withdrew by no longer waiting."""

    code = "approval_withdrawn"
    status = 409


class NotWaiting(BrokerError):
    """Raised when a call to withdraw is not waiting for the owner's approval."""

    code = "call_not_waiting"
    status = 409


class ApprovalStale(BrokerError):
    """Raised when the skill changed after the owner was asked, so the approval no longer fits."""

    code = "approval_stale"
    status = 409


class GrantNotOffered(BrokerError):
    """Raised when "approve for this chat" is asked of a call that never offers it."""

    code = "grant_not_offered"
    status = 400


class CallNotFound(BrokerError):
    """Raised when the caller has no tool call with that id."""

    code = "call_not_found"
    status = 404


class ChatNotFound(BrokerError):
    """Raised when the caller has no chat with that id."""

    code = "chat_not_found"
    status = 404


class ScriptNotFound(BrokerError):
    """Raised when a call names a script the skill doesn't have."""

    code = "script_not_found"
    status = 404


class DiffTooLarge(BrokerError):
    """Raised when an edit's diff is over the cap per file or in all; the owner couldn't read it."""

    code = "diff_too_large"
    status = 413


class EditPlanExpired(BrokerError):
    """Raised when the owner answers an edit plan no longer held (2 hours, or 200 newer ones)."""

    code = "edit_plan_expired"
    status = 410


class SkillNotInJob(BrokerError):
    """Raised when a call in a job run names a skill the job's skills don't include."""

    code = "skill_not_in_job"
    status = 403

    def __init__(self, name: str) -> None:
        super().__init__(f"HOST: the skill '{name}' is not one of this job's skills.")


class ScriptNotSupported(BrokerError):
    """Raised when a call names a script its skill's runner can't run (sandbox: not .py/.js)."""

    code = "script_not_supported"
    status = 422


class NodeNotFound(BrokerError):
    """Raised when a call names a node that is neither registered nor heard from."""

    code = "node_not_found"
    status = 404


class NodeShared(BrokerError):
    """Raised when a call names a node shared by several owners whose worker runs scripts as
    its own user: one owner's script could read another's."""

    code = "node_shared"
    status = 409


class NodeOffline(BrokerError):
    """Raised when a call names a registered node no live worker serves: nothing could run."""

    code = "node_offline"
    status = 409

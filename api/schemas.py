"""Marshmallow schemas of the API's requests and responses (they become the OpenAPI doc)."""

from __future__ import annotations

from datetime import UTC
from enum import StrEnum
from typing import Any

import marshmallow as ma

from broker.approvals import ANSWERS
from broker.questions import ASKING
from store.hashing import shown_key
from store.limits import (
    MAX_CONTEXT_TOKENS,
    MAX_DENY_REASON_CHARS,
    MAX_JOB_NAME_CHARS,
    MAX_JOB_STEPS,
    MAX_MODEL_NAME_CHARS,
    MAX_NAME_CHARS,
    MAX_SIGNIN_ID_CHARS,
    MAX_SKILLS,
    MAX_TOKEN_LABEL_CHARS,
    MIN_CONTEXT_TOKENS,
)
from store.modelchoice import EFFORTS, TIERS, check_context
from store.names import EXECUTIONS, NAME
from store.signatures import STATUSES
from store.states import (
    ApprovalStatus,
    CallStatus,
    JobRunStatus,
    QuestionStatus,
    RunStatus,
    TurnStatus,
)
from store.tokens import Role, check_label, check_role
from store.visible import shown_json, visible

# What the store accepts, as OpenAPI patterns: a skill's name (store/names.py), text without
# line breaks or other control characters, text that is not only spaces, and the start of an
# http(s) URL (its scheme read in any case, as urllib reads it).
NAME_PATTERN = f"^{NAME.pattern}$"
NO_CONTROL_CHARACTERS = "^[^\\u0000-\\u001f\\u007f]*$"
NOT_BLANK_PATTERN = "\\S"
HTTP_URL_PATTERN = "^[Hh][Tt][Tt][Pp][Ss]?://"
HTTPS_URL_PATTERN = "^[Hh][Tt][Tt][Pp][Ss]://"
# OpenAPI 3.0 has no null type: a value that may only be null, for one branch of an anyOf.
NULL_ONLY = {"type": "string", "nullable": True, "enum": [None]}


def states(machine: type[StrEnum], *hidden: StrEnum) -> list[str]:
    """The states of a machine a client can see (`hidden` ones live only inside a request)."""
    return [str(state) for state in machine if state not in hidden]


def status_field(shown: list[str], **options: Any) -> ma.fields.String:
    """A `status` in an answer: one of `shown`, listed in the OpenAPI document."""
    description = ", ".join(shown[:-1]) + f" or {shown[-1]}"
    return ma.fields.String(metadata={"description": description, "enum": shown}, **options)


# A call is decided in memory and never stored `deciding`; an approval is `answering` only
# inside the request that answers it.
CALL_STATES = states(CallStatus, CallStatus.DECIDING)
APPROVAL_STATES = states(ApprovalStatus, ApprovalStatus.ANSWERING)
QUESTION_STATES = states(QuestionStatus, QuestionStatus.ANSWERING)
RUN_STATES = states(RunStatus)
JOB_RUN_STATES = states(JobRunStatus)
TURN_STATES = states(TurnStatus)


class ShownText(ma.fields.String):
    """Text an agent wrote that an owner reads: control and format characters go out written as
    escapes (`\\x1b`, `\\u202e`; store/visible.py), so no page or terminal shows it as
    something else."""

    def _serialize(self, value: Any, attr: str | None, obj: Any, **kwargs: Any) -> str | None:
        text = super()._serialize(value, attr, obj, **kwargs)
        return None if text is None else visible(text)


class JsonBoolean(ma.fields.Boolean):
    """A boolean in a JSON body: `true` or `false`, as the document says, never 0, 1 or a string
    (marshmallow's Boolean reads those too, for query strings and forms)."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> bool:
        if not isinstance(value, bool):
            raise self.make_error("invalid", input=value)
        return value


class HealthSchema(ma.Schema):
    status = ma.fields.String()
    database = ma.fields.String()
    redis = ma.fields.String()


class SkillFileSchema(ma.Schema):
    path = ma.fields.String()
    size = ma.fields.Integer()


class DeclaredSecretSchema(ma.Schema):
    name = ma.fields.String(metadata={"description": "The environment variable's name"})
    set = ma.fields.Boolean(
        metadata={"description": "Whether the owner stored a value (the skill's own or general)"}
    )


def _shown_origin(skill: Any) -> str | None:
    """An owned skill's origin. A shared skill's is its folder on the server (built in, or on
    a configured path), which is the operator's business and no caller's."""
    read: Any = skill.get if isinstance(skill, dict) else lambda key: getattr(skill, key)
    origin: str | None = read("origin")
    return None if read("read_only") else origin


class SkillSchema(ma.Schema):
    name = ma.fields.String()
    description = ma.fields.String()
    enabled = ma.fields.Boolean()
    hash = ma.fields.String()
    revision = ma.fields.Integer()
    source = ma.fields.String(
        metadata={"description": "builtin, path, upload, github, copy or draft"}
    )
    origin = ma.fields.Function(
        _shown_origin,
        allow_none=True,
        metadata={
            "type": "string",
            "description": "Where an owned skill came from (a GitHub URL, 'copy of x'); null "
            "for shared skills, whose folder on the server is not shown",
        },
    )
    author = ma.fields.String()
    execution = ma.fields.String(
        metadata={
            "description": "Where its scripts run: node, spark, sandbox, or auto (the Spark "
            "while a Spark worker serves, else the node a call names)"
        }
    )
    execution_choice = ma.fields.String(
        allow_none=True,
        metadata={"description": "The owner's choice of where it runs; null: as SKILL.md says"},
    )
    tier = ma.fields.String()
    file_count = ma.fields.Integer()
    size_bytes = ma.fields.Integer()
    read_only = ma.fields.Boolean()
    locked = ma.fields.Boolean()
    lint_warnings = ma.fields.List(
        ma.fields.String(),
        allow_none=True,
        metadata={"description": "Review warnings: where to look before enabling"},
    )
    source_chats = ma.fields.List(ma.fields.String(), allow_none=True)
    rationale = ma.fields.String(allow_none=True)
    signed_by = ma.fields.String(
        allow_none=True,
        metadata={
            "description": "The name of your trusted key its skillfleet.sig verified with; "
            "null when unsigned or signed by a key you don't trust"
        },
    )
    signature_status = ma.fields.String(
        metadata={"enum": list(STATUSES), "description": "trusted, untrusted or unsigned"}
    )
    signer_fingerprint = ma.fields.String(
        allow_none=True,
        metadata={"description": "SHA256 fingerprint of the key that signed it, trusted or not"},
    )
    signature_hold = ma.fields.Boolean(
        metadata={
            "description": "Held: you require signatures and no key you trust signed it; "
            "enabling it needs override_signature (or trusting its signer's key)"
        }
    )
    created_at = ma.fields.DateTime()
    updated_at = ma.fields.DateTime()
    warnings = ma.fields.List(
        ma.fields.String(),
        metadata={"description": "What the import bent to accept the skill, for review"},
    )


class DeclaredDependenciesSchema(ma.Schema):
    file = ma.fields.String(
        metadata={"description": "requirements.txt, or a script with a PEP 723 block"}
    )
    requirements = ma.fields.List(ma.fields.String())


class SkillDetailSchema(SkillSchema):
    files = ma.fields.List(ma.fields.Nested(SkillFileSchema))
    dependencies = ma.fields.List(
        ma.fields.Nested(DeclaredDependenciesSchema),
        metadata={
            "description": "Python packages its scripts declare beyond the standard "
            "environment, installed for this version by the runner"
        },
    )
    declared_name = ma.fields.String(
        allow_none=True,
        metadata={"description": "The name SKILL.md gives, when installed under another"},
    )
    allowed_tools = ma.fields.String(
        allow_none=True,
        metadata={"description": "allowed-tools, space-delimited; shown for review, never a grant"},
    )
    unknown_keys = ma.fields.Dict(
        keys=ma.fields.String(),
        metadata={"description": "Header keys outside the spec, as written; never read"},
    )
    secrets = ma.fields.List(
        ma.fields.Nested(DeclaredSecretSchema),
        metadata={"description": "The secrets its scripts get (skillfleet.secrets); never values"},
    )
    secrets_allowed = ma.fields.Boolean(
        allow_none=True,
        metadata={
            "description": "Whether this version may have its secrets; null when it declares none"
        },
    )


class FileEditSchema(ma.Schema):
    content = ma.fields.String(required=True, metadata={"description": "The file's new text"})
    hash = ma.fields.String(
        load_default=None, metadata={"description": "The hash you edited; 409 if it moved"}
    )


class FileDeleteQuerySchema(ma.Schema):
    hash = ma.fields.String(
        load_default=None, metadata={"description": "The hash you edited; 409 if it moved"}
    )


class ReviewDraftSchema(ma.Schema):
    name = ma.fields.String()
    hash = ma.fields.String()
    description = ma.fields.String()
    source_chats = ma.fields.List(ma.fields.String(), allow_none=True)
    rationale = ma.fields.String(allow_none=True)
    lint_warnings = ma.fields.List(ma.fields.String(), allow_none=True)
    updated_at = ma.fields.DateTime()


class ReviewEditSchema(ma.Schema):
    plan_id = ma.fields.String(attribute="id")
    approval_id = ma.fields.String()
    skill_name = ma.fields.String()
    base_hash = ma.fields.String()
    rationale = ma.fields.String()
    lint_warnings = ma.fields.List(ma.fields.String())
    diff = ShownText()
    created_at = ma.fields.DateTime()
    expires_at = ma.fields.DateTime()


class ReviewSchema(ma.Schema):
    drafts = ma.fields.List(ma.fields.Nested(ReviewDraftSchema))
    edits = ma.fields.List(ma.fields.Nested(ReviewEditSchema))
    needs_review = ma.fields.Integer(
        metadata={"description": "Drafts waiting to be enabled plus pending edit plans"}
    )
    chats_with_issues = ma.fields.Integer(
        metadata={"description": "Unreviewed chats with declined, expired, failed, timed-out calls"}
    )


class ExecutionSchema(ma.Schema):
    execution = ma.fields.String(
        required=True,
        allow_none=True,
        validate=ma.validate.OneOf(EXECUTIONS),
        metadata={"description": "node, spark or sandbox; null goes back to what SKILL.md says"},
    )


class ImportedSkillSchema(ma.Schema):
    name = ma.fields.String()
    hash = ma.fields.String()
    enabled = ma.fields.Boolean()
    files = ma.fields.List(ma.fields.String())
    warnings = ma.fields.List(ma.fields.String())
    lint_warnings = ma.fields.List(
        ma.fields.String(), metadata={"description": "Review warnings: where to look first"}
    )
    signed_by = ma.fields.String(allow_none=True)
    signature_status = ma.fields.String(metadata={"enum": list(STATUSES)})
    signer_fingerprint = ma.fields.String(allow_none=True)
    signature_hold = ma.fields.Boolean()


class BundleImportedSchema(ImportedSkillSchema):
    folder = ma.fields.String(metadata={"description": "The skill's folder inside the import"})


class BundleRefusedSchema(ma.Schema):
    folder = ma.fields.String(metadata={"description": "The skill's folder inside the import"})
    code = ma.fields.String(metadata={"description": "The code a single import would answer"})
    message = ma.fields.String()
    errors = ma.fields.List(ma.fields.String())


class BundleImportSchema(ma.Schema):
    imported = ma.fields.List(ma.fields.Nested(BundleImportedSchema))
    refused = ma.fields.List(ma.fields.Nested(BundleRefusedSchema))


class SkillListQuerySchema(ma.Schema):
    enabled = ma.fields.Boolean(metadata={"description": "Only enabled (true) or disabled"})


class ImportQuerySchema(ma.Schema):
    replace = ma.fields.Boolean(
        load_default=False, metadata={"description": "Replace an owned skill of that name"}
    )
    execution = ma.fields.String(
        load_default=None,
        validate=ma.validate.OneOf(EXECUTIONS),
        metadata={"description": "Where its scripts run, whatever SKILL.md says (each skill's)"},
    )
    name = ma.fields.String(
        load_default=None,
        metadata={"description": "Install a single skill under this name, not its header's"},
    )


class GitHubImportSchema(ma.Schema):
    github = ma.fields.String(
        required=True,
        metadata={"description": "https://github.com/<owner>/<repo>/tree/<ref>/<path>"},
    )
    enable = JsonBoolean(load_default=True)


class ZipUploadSchema(ma.Schema):
    file = ma.fields.Raw(
        required=True, metadata={"type": "string", "format": "binary", "description": "A zip"}
    )
    enable = ma.fields.Boolean(load_default=True)


class FileUploadSchema(ma.Schema):
    file = ma.fields.Raw(
        required=True,
        metadata={
            "type": "string",
            "format": "binary",
            "description": "The file; its name is kept",
        },
    )


class StoredFileSchema(ma.Schema):
    id = ma.fields.String(metadata={"description": "Name it in a run's `files` by this id"})
    name = ma.fields.String()
    size = ma.fields.Integer(metadata={"description": "Bytes"})
    sha256 = ma.fields.String(metadata={"description": "The SHA-256 of the bytes, in hex"})
    created_at = ma.fields.DateTime()
    expires_at = ma.fields.DateTime(metadata={"description": "When it is deleted"})
    run_id = ma.fields.String(
        allow_none=True, metadata={"description": "The run that made it (null: uploaded)"}
    )
    path = ma.fields.String(
        allow_none=True, metadata={"description": "Its path in that run's working directory"}
    )


class DuplicateSchema(ma.Schema):
    name = ma.fields.String(
        required=True,
        metadata={
            "description": "Name of the copy",
            "pattern": NAME_PATTERN,
            "maxLength": MAX_NAME_CHARS,
        },
    )


class EnabledSchema(ma.Schema):
    enabled = JsonBoolean(required=True)
    hash = ma.fields.String(
        load_default=None, metadata={"description": "The hash you reviewed; 409 if it moved"}
    )
    override_signature = JsonBoolean(
        load_default=False,
        metadata={
            "description": "Enable a skill held for want of a trusted signature anyway; "
            "the override is recorded. Without it such a skill answers 409 signature_required"
        },
    )


class ToolCallSchema(ma.Schema):
    arguments = ma.fields.Raw(load_default=None, metadata={"type": "object"})
    chat_id = ma.fields.String(
        load_default=None,
        metadata={"description": "The chat the call belongs to; not with job_run_id (400)"},
    )
    turn_id = ma.fields.String(load_default=None)
    job_run_id = ma.fields.String(
        load_default=None,
        metadata={"description": "The job run the call is a step of; not with chat_id (400)"},
    )
    mode = ma.fields.String(load_default="execute", validate=ma.validate.OneOf(["execute", "plan"]))
    full_loads = ma.fields.Boolean(
        load_default=False,
        metadata={
            "description": "load_skill always answers with the skill's content, never "
            "already_loaded: for a chat_id that names no one context the model keeps"
        },
    )
    chat_guessed = ma.fields.Boolean(
        load_default=False,
        metadata={
            "description": "The chat_id is the caller's guess, not one conversation (an MCP "
            "client that named none): the chat's grants don't apply and \"approve for this chat\" "
            "is not offered for the call (send full_loads too, unless turn_id names the turn)"
        },
    )


class ToolErrorSchema(ma.Schema):
    code = ma.fields.String()
    message = ma.fields.String()


class ToolResultSchema(ma.Schema):
    call_id = ma.fields.String()
    status = status_field(CALL_STATES)
    result = ma.fields.Raw()
    error = ma.fields.Nested(ToolErrorSchema)
    approval_id = ma.fields.String()
    run_id = ma.fields.String()
    question_id = ma.fields.String(
        metadata={"description": "While pending_question: the question the owner answers"}
    )


class FunctionSchema(ma.Schema):
    name = ma.fields.String()
    description = ma.fields.String()
    parameters = ma.fields.Dict()


class ToolDefinitionSchema(ma.Schema):
    type = ma.fields.String()
    function = ma.fields.Nested(FunctionSchema)


class CallSchema(ma.Schema):
    call_id = ma.fields.String(attribute="id")
    approval_id = ma.fields.String(allow_none=True)
    question_id = ma.fields.Function(
        lambda call: call.id if call.tool in ASKING else None,
        allow_none=True,
        metadata={"description": "ask_owner and request_secret: the question (the call's id)"},
    )
    run_id = ma.fields.String(allow_none=True)
    skill_name = ma.fields.String(allow_none=True)
    skill_hash = ma.fields.String(allow_none=True)
    node = ma.fields.String(allow_none=True)
    result = ma.fields.Raw(allow_none=True)
    tool = ma.fields.String()
    tier = ma.fields.String()
    mode = ma.fields.String()
    status = status_field(CALL_STATES)
    rule = ma.fields.String(allow_none=True)
    chat_id = ma.fields.String(
        attribute="chat_name",
        allow_none=True,
        metadata={"description": "The chat's id as the agent sent it (over MCP: mcp-<client>-…)"},
    )
    turn_id = ma.fields.String(allow_none=True)
    job_run_id = ma.fields.String(allow_none=True)
    error_code = ma.fields.String(allow_none=True)
    error_message = ma.fields.String(allow_none=True)
    created_at = ma.fields.DateTime()
    finished_at = ma.fields.DateTime(allow_none=True)


class WaitSchema(ma.Schema):
    wait = ma.fields.Float(
        load_default=0,
        validate=ma.validate.Range(min=0, max=60),
        metadata={"description": "Seconds to wait for an end state (long poll, at most 60)"},
    )
    keep_pending = ma.fields.Boolean(
        load_default=False,
        metadata={
            "description": "A client that leaves while the call waits for the owner's "
            "approval withdraws the approval (nothing runs), unless this is true"
        },
    )


class ApprovalSchema(ma.Schema):
    id = ma.fields.String()
    call_id = ma.fields.String()
    run_id = ma.fields.String(
        allow_none=True, metadata={"description": "The script run the call started once approved"}
    )
    asked_by = ShownText(
        metadata={"description": "Who asked, in words: chat 'c1', turn t7 or job 'nightly', run …"}
    )
    chat_id = ma.fields.String(
        allow_none=True, metadata={"description": "The chat that asks (its chat_id), if one does"}
    )
    turn_id = ma.fields.String(allow_none=True, metadata={"description": "The turn that asks"})
    job_id = ma.fields.String(
        allow_none=True, metadata={"description": "The job that asks, if a job asks"}
    )
    job_name = ma.fields.String(allow_none=True)
    job_run_id = ma.fields.String(
        allow_none=True, metadata={"description": "The job run that asks, if a job asks"}
    )
    status = status_field(APPROVAL_STATES)
    tool = ma.fields.String()
    tier = ma.fields.String()
    arguments = ma.fields.Raw(metadata={"description": "Exactly what the approved call runs"})
    arguments_shown = ma.fields.Function(
        lambda card: shown_json(card.arguments),
        metadata={"type": "string", "description": "The arguments as indented JSON text to "
                  "show, control and format characters written as escapes (\\x1b, \\u202e)"},
    )  # fmt: skip
    skill_name = ma.fields.String(allow_none=True)
    skill_hash = ma.fields.String(
        allow_none=True, metadata={"description": "The skill's full hash when it was asked"}
    )
    skill_hash_now = ma.fields.String(
        allow_none=True,
        metadata={"description": "A pending approval's skill hash now; null when it is gone"},
    )
    skill_changed = ma.fields.Boolean(
        allow_none=True,
        metadata={"description": "A pending approval: its skill is no longer the version asked "
                  "about, so approving runs nothing (null: answered, or no skill)"},
    )  # fmt: skip
    skill_change = ma.fields.String(
        allow_none=True, metadata={"description": "What changed, and what answering does then"}
    )
    node = ma.fields.String(allow_none=True)
    grant_key = ma.fields.Function(
        lambda approval: shown_key(approval.grant_key) if approval.grant_key else None,
        allow_none=True,
        metadata={"description": "The grant key as shown, skill:<name>@<hash8>"},
    )
    rule = ma.fields.String(allow_none=True)
    warning = ShownText(metadata={"description": "What the call does, in words"})
    offers_chat_grant = ma.fields.Boolean(
        metadata={"description": "Whether approving always is offered (see grant_scope)"}
    )
    grant_scope = ma.fields.String(
        allow_none=True,
        metadata={
            "description": "What approving always grants: chat (approve_for_chat), job "
            "(approve_for_job) or null (approve once only)"
        },
    )
    chat_guessed = ma.fields.Boolean(
        metadata={
            "description": "The call's chat was guessed (its MCP client named no "
            "conversation): approving for it is not offered (see grant_note)"
        }
    )
    grant_note = ma.fields.String(
        allow_none=True,
        metadata={"description": "Why approving for the chat is not offered, when a guessed "
                  "chat is the reason"},
    )  # fmt: skip
    withdrawn_note = ma.fields.String(
        allow_none=True,
        metadata={"description": "A withdrawn approval: the agent stopped waiting for it"},
    )
    reason = ShownText(
        allow_none=True,
        metadata={"description": "A denied approval: why, as the owner said it (null: not said)"},
    )
    diff = ShownText(
        allow_none=True, metadata={"description": "edit_skill: the unified diff to approve"}
    )
    lint_warnings = ma.fields.List(
        ma.fields.String(),
        allow_none=True,
        metadata={"description": "edit_skill: review warnings of the edited skill"},
    )
    dependencies = ma.fields.List(
        ma.fields.String(),
        allow_none=True,
        metadata={
            "description": "run_skill_script: the Python packages the skill's version declares, "
            "which the run installs (null: another tool, or a version no longer stored)"
        },
    )
    created_at = ma.fields.DateTime()
    expires_at = ma.fields.DateTime()
    answered_at = ma.fields.DateTime(allow_none=True)


class ApprovalQuerySchema(ma.Schema):
    status = ma.fields.String(validate=ma.validate.OneOf(APPROVAL_STATES))


class DecisionSchema(ma.Schema):
    decision = ma.fields.String(
        required=True,
        validate=ma.validate.OneOf(ANSWERS),
        metadata={"description": "approve_for_chat in a chat, approve_for_job in a job"},
    )
    reason = ma.fields.String(
        load_default=None,
        allow_none=True,
        validate=[
            ma.validate.Length(max=MAX_DENY_REASON_CHARS),
            ma.validate.Regexp(r"^[^\x00]*$", error="The reason must not hold a NUL character."),
        ],
        metadata={
            "description": "deny only: why, in words the call's agent is told (its error "
            "message) and the approval keeps; blank is none"
        },
    )

    @ma.validates_schema
    def _reason_with_deny(self, data: dict[str, Any], **kwargs: Any) -> None:
        if (data.get("reason") or "").strip() and data.get("decision") != "deny":
            raise ma.ValidationError("A reason goes with deny only.", "reason")

    @ma.post_load
    def _blank_is_none(self, data: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        reason = (data.get("reason") or "").strip()
        return {**data, "reason": reason or None}


class QuestionSchema(ma.Schema):
    id = ma.fields.String(metadata={"description": "The id of the call that asks"})
    call_id = ma.fields.String()
    kind = ma.fields.String(metadata={"description": "question, or secret (request_secret)"})
    text = ShownText(metadata={"description": "The question, or why the secret is needed"})
    choices = ma.fields.List(ma.fields.String(), allow_none=True)
    secret_name = ma.fields.String(allow_none=True)
    skill_name = ma.fields.String(allow_none=True)
    skill_hash = ma.fields.String(
        allow_none=True,
        metadata={"description": "The skill's full content hash when it was asked: the version "
                  "storing the secret allows"},
    )  # fmt: skip
    skill_hash_now = ma.fields.String(
        allow_none=True, metadata={"description": "The skill's hash now; null when it is gone"}
    )
    skill_changed = ma.fields.Boolean(
        allow_none=True,
        metadata={"description": "Whether the skill is no longer the version asked about "
                  "(null: the question names no skill)"},
    )  # fmt: skip
    skill_change = ma.fields.String(
        allow_none=True,
        metadata={"description": "What changed, and how to answer knowingly (skill_hash)"},
    )
    answer = ma.fields.String(allow_none=True, metadata={"description": "Never a secret's value"})
    status = status_field(QUESTION_STATES)
    turn_id = ma.fields.String(allow_none=True)
    job_run_id = ma.fields.String(allow_none=True)
    created_at = ma.fields.DateTime()
    expires_at = ma.fields.DateTime()
    answered_at = ma.fields.DateTime(allow_none=True)


class QuestionQuerySchema(ma.Schema):
    status = ma.fields.String(validate=ma.validate.OneOf(QUESTION_STATES))


class QuestionAnswerSchema(ma.Schema):
    answer = ma.fields.String(
        load_default=None, metadata={"description": "The answer (one of the choices, if any)"}
    )
    secret = ma.fields.String(
        load_default=None,
        metadata={"description": "A secret question's value; stored sealed, never shown"},
    )
    skill_hash = ma.fields.String(
        load_default=None,
        validate=ma.validate.Regexp(
            r"^[0-9a-f]{8,64}$", error="A hash, or its first 8 characters."
        ),
        metadata={
            "description": "A secret for a skill: the version you allow (its hash or first 8 "
            "characters); left out, the version asked about. 409 skill_changed when the skill "
            "is not that version now"
        },
    )


class ChatSchema(ma.Schema):
    chat_id = ma.fields.String(attribute="external_id")
    declined_calls = ma.fields.Integer()
    expired_calls = ma.fields.Integer()
    failed_calls = ma.fields.Integer()
    timed_out_calls = ma.fields.Integer()
    created_at = ma.fields.DateTime()


class ChatHistorySchema(ChatSchema):
    messages = ma.fields.List(
        ma.fields.Dict(),
        metadata={
            "description": "The chat's latest turns as the AI SDK's UI messages, oldest first: "
            "each prompt, then its answer (id: the turn's; metadata: turnId, status, usage, "
            "error). An answer a regenerate replaced is not among them."
        },
    )


class GrantSchema(ma.Schema):
    scope = ma.fields.String()
    subject = ma.fields.String()
    key = ma.fields.Function(lambda grant: shown_key(grant.key))
    created_at = ma.fields.DateTime()


class SettingsSchema(ma.Schema):
    auto_tools = ma.fields.List(
        ma.fields.String(),
        required=True,
        metadata={"description": "Change tools (or skill grant keys) that run without asking"},
    )
    run_command_shell = JsonBoolean(
        load_default=None,
        metadata={
            "description": "run_command runs its command through /bin/sh -c (pipes, $VARS) "
            "instead of as a plain argv; left out of a PUT, it stays as it is"
        },
    )
    require_signature = JsonBoolean(
        load_default=None,
        metadata={
            "description": "Hold skills no key you trust signed: they import disabled and "
            "are enabled only with override_signature; left out of a PUT, it stays as it is"
        },
    )


class RunFileSchema(ma.Schema):
    id = ma.fields.String(metadata={"description": "The file's id: GET /api/files/<id>"})
    size = ma.fields.Integer()
    sha256 = ma.fields.String()


RUN_FILE_ITEM = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "id": {"type": "string"},
        "size": {"type": "integer"},
        "sha256": {"type": "string"},
    },
}


class RunSchema(ma.Schema):
    run_id = ma.fields.String(attribute="id")
    call_id = ma.fields.String(allow_none=True)
    status = status_field(RUN_STATES)
    skill_name = ma.fields.String()
    skill_hash = ma.fields.String()
    script = ma.fields.String()
    command = ma.fields.List(
        ma.fields.String(),
        allow_none=True,
        metadata={"description": "run_command's argv, run without a shell (null: a script)"},
    )
    args = ma.fields.List(
        ma.fields.String(),
        allow_none=True,
        metadata={"description": "The script's command line as the call gave it (`args`)"},
    )
    input_files = ma.fields.Dict(
        keys=ma.fields.String(),
        values=ma.fields.Nested(RunFileSchema),
        allow_none=True,
        metadata={"description": "The call's files, by path in the working directory"},
    )
    files = ma.fields.Method(
        "made_files",
        metadata={"type": "array", "items": RUN_FILE_ITEM,
                  "description": "The files the run created or changed, each by id"},
    )  # fmt: skip
    files_note = ma.fields.Method(
        "made_note",
        metadata={"type": "string", "nullable": True,
                  "description": "What of those did not come back, and why"},
    )  # fmt: skip
    execution = ma.fields.String()
    queue = ma.fields.String()
    node = ma.fields.String(allow_none=True)
    isolation = ma.fields.String(allow_none=True)
    exit_code = ma.fields.Integer(allow_none=True)
    stdout = ma.fields.String()
    stderr = ma.fields.String()
    error = ma.fields.String(allow_none=True)
    worker = ma.fields.String(allow_none=True)
    timeout_seconds = ma.fields.Integer()
    created_at = ma.fields.DateTime()
    started_at = ma.fields.DateTime(allow_none=True)
    finished_at = ma.fields.DateTime(allow_none=True)

    def made_files(self, run: Any) -> list[dict[str, Any]]:
        return [entry for entry in (run.output_files or []) if "note" not in entry]

    def made_note(self, run: Any) -> str | None:
        notes = [entry["note"] for entry in (run.output_files or []) if "note" in entry]
        return notes[0] if notes else None


class RunSummarySchema(RunSchema):
    """A run in a list: everything but its output."""

    class Meta:
        exclude = ("stdout", "stderr")


class NodeWorkerSchema(ma.Schema):
    id = ma.fields.String()
    role = ma.fields.String()
    queue = ma.fields.String()
    host = ma.fields.String()
    serving = ma.fields.Boolean()
    alive = ma.fields.Boolean()
    last_heartbeat = ma.fields.String(metadata={"description": "ISO 8601 time"})
    features = ma.fields.List(ma.fields.String())
    reason = ma.fields.String(allow_none=True)


class NodeSchema(ma.Schema):
    name = ma.fields.String()
    registered = ma.fields.Boolean(metadata={"description": "Added with `skillfleet nodes add`"})
    alive = ma.fields.Boolean(
        metadata={"description": "A worker of it beat recently and serves its queue"}
    )
    health = ma.fields.String(
        metadata={
            "description": "alive, not_serving (its workers beat but serve nothing; each "
            "worker's reason says why), stale (its beats ran past their window) or down"
        }
    )
    queues = ma.fields.List(ma.fields.String(), metadata={"description": "Queues it serves"})
    workers = ma.fields.List(ma.fields.Nested(NodeWorkerSchema))
    features = ma.fields.List(ma.fields.String(), metadata={"description": "skills, docker, kvm"})
    hashes = ma.fields.Dict(
        keys=ma.fields.String(),
        values=ma.fields.List(ma.fields.String()),
        metadata={"description": "Skill name to the package hashes the node holds"},
    )
    last_heartbeat = ma.fields.String(allow_none=True)
    shared = ma.fields.Boolean(
        metadata={"description": "Offered to more owners than you (`skillfleet nodes share`)"}
    )
    runs_as = ma.fields.String(
        allow_none=True,
        metadata={
            "description": "How its workers run scripts: uid (a user of each run's own) or "
            "worker (the worker's user); null when no worker was heard from"
        },
    )


class SignedManifestSchema(ma.Schema):
    manifest = ma.fields.Dict(metadata={"description": "node, issued_at and packages"})
    signature = ma.fields.String(metadata={"description": "Ed25519 over the canonical JSON"})


class SyncRequestSchema(ma.Schema):
    node = ma.fields.String()
    receivers = ma.fields.Integer(metadata={"description": "Agents listening right now"})


class TokenCreateSchema(ma.Schema):
    """Read by the store's own checks, so that their codes answer (invalid_role,
    invalid_label); the fields say what those checks accept."""

    role = ma.fields.Raw(required=True, metadata={"type": "string", "enum": [str(r) for r in Role]})
    label = ma.fields.Raw(
        load_default=None,
        metadata={
            "type": "string",
            "maxLength": MAX_TOKEN_LABEL_CHARS,
            "pattern": NO_CONTROL_CHARACTERS,
            "description": "What the token is for",
        },
    )

    @ma.pre_load
    def _checked(self, data: Any, **kwargs: Any) -> Any:
        if isinstance(data, dict):
            check_role(data.get("role"))
            check_label(data.get("label"))
        return data


class TokenSchema(ma.Schema):
    id = ma.fields.Integer()
    role = ma.fields.String(metadata={"description": "owner or agent"})
    label = ma.fields.String(allow_none=True)
    created_at = ma.fields.DateTime()
    last_used_at = ma.fields.DateTime(allow_none=True)
    resource = ma.fields.String(
        allow_none=True,
        metadata={"description": "An MCP host's OAuth token: the /mcp URL it is bound to"},
    )
    expires_at = ma.fields.DateTime(
        allow_none=True,
        metadata={
            "description": "Refused from then on (an MCP host's token until refreshed, a GitHub "
            "sign-in's until GitHub's expires); null: until deleted"
        },
    )
    in_use = ma.fields.Boolean(
        metadata={
            "description": "The token this request was made with: deleting it signs its "
            "holder (such as the console) out"
        }
    )


class NewTokenSchema(ma.Schema):
    id = ma.fields.Integer()
    token = ma.fields.String(metadata={"description": "Shown this once; only its hash is kept"})
    role = ma.fields.String()
    label = ma.fields.String(allow_none=True)


def _job_skills(value: object) -> None:
    if value is None or value == "*":
        return
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ma.ValidationError(
            "'skills' is null, \"*\" (every enabled skill) or a list of names."
        )


class JobGrantsSchema(ma.Schema):
    tools = ma.fields.List(
        ma.fields.String(),
        load_default=list,
        metadata={"description": "Change or destructive tools the job may run without asking"},
    )
    skills = ma.fields.List(
        ma.fields.String(),
        load_default=list,
        metadata={"description": "Skills whose scripts run without asking: name or name@hash"},
    )
    hosts = ma.fields.List(
        ma.fields.String(),
        load_default=list,
        metadata={"description": "Hosts read_web_page reads without asking (shown when any)"},
    )


def _context(value: object) -> None:
    check_context(value)


def context_field() -> ma.fields.Raw:
    """A context tier: small, medium, large, a number of tokens, or null."""
    return ma.fields.Raw(
        load_default=None,
        allow_none=True,
        validate=_context,
        metadata={
            "description": f"The context tier bounding the history sent: small "
            f"({TIERS['small']:,} tokens), medium ({TIERS['medium']:,}), large "
            f"({TIERS['large']:,}), a number of tokens, or null for no bound; a quarter of "
            "the window is kept free for the answer",
            "anyOf": [
                {"type": "string", "enum": list(TIERS)},
                {"type": "integer", "minimum": MIN_CONTEXT_TOKENS, "maximum": MAX_CONTEXT_TOKENS},
                NULL_ONLY,
            ],
        },
    )


def effort_field() -> ma.fields.String:
    return ma.fields.String(
        load_default=None,
        allow_none=True,
        validate=ma.validate.OneOf(EFFORTS),
        metadata={
            "description": "OpenAI's reasoning_effort, sent only where the source takes it; "
            "null sends none"
        },
    )


class JobBodySchema(ma.Schema):
    """Checked by the broker (broker/jobs.py: 422 `job_invalid`, `cron_invalid`…); the fields
    say what it accepts but for what it reads in the store: tools, skills, time zones."""

    name = ma.fields.String(
        required=True,
        metadata={"pattern": NOT_BLANK_PATTERN, "maxLength": MAX_JOB_NAME_CHARS},
    )
    cron = ma.fields.String(
        required=True, metadata={"description": "Five-field cron, in the job's time zone"}
    )
    time_zone = ma.fields.String(
        load_default="UTC", metadata={"description": "IANA time zone, e.g. Europe/Berlin"}
    )
    steps = ma.fields.List(
        ma.fields.Dict(),
        required=True,
        metadata={
            "description": '1-10 of {"tool": name, "arguments": {…}} or {"prompt": text}',
            "minItems": 1,
            "maxItems": MAX_JOB_STEPS,
        },
    )
    grants = ma.fields.Nested(JobGrantsSchema, load_default=lambda: {"tools": [], "skills": []})
    skills = ma.fields.Raw(
        load_default=None,
        validate=_job_skills,
        metadata={
            "description": 'null or [] for none, "*" for every enabled skill, or names',
            "anyOf": [
                {"type": "string", "enum": ["*"]},
                {"type": "array", "items": {"type": "string"}, "maxItems": MAX_SKILLS},
                NULL_ONLY,
            ],
        },
    )
    enabled = JsonBoolean(load_default=True)
    source = ma.fields.String(
        load_default=None,
        allow_none=True,
        metadata={
            "description": "The model source its prompt steps run on, with `model`; null: "
            "your default model (422 unknown_source for a source you don't have)",
            "maxLength": MAX_NAME_CHARS,
        },
    )
    model = ma.fields.String(
        load_default=None,
        allow_none=True,
        metadata={"description": "A model of `source`", "maxLength": MAX_MODEL_NAME_CHARS},
    )
    reasoning_effort = effort_field()
    context = context_field()
    updated_at = ma.fields.DateTime(
        load_default=None,
        metadata={
            "description": "The job's updated_at as you read it (PUT): the change is refused "
            "(409 job_changed) if the job changed since, so no change in between is undone"
        },
    )


class JobPinSchema(ma.Schema):
    step = ma.fields.Integer(metadata={"description": "The step's number, from 1"})
    skill = ma.fields.String()
    hash = ma.fields.String(metadata={"description": "The version the step pins"})
    current_hash = ma.fields.String(
        allow_none=True, metadata={"description": "The skill's version now; null: it is gone"}
    )
    lagging = ma.fields.Boolean(
        metadata={"description": "Whether the skill moved on from the pinned version"}
    )


class JobSchema(ma.Schema):
    id = ma.fields.String()
    name = ma.fields.String()
    cron = ma.fields.String()
    time_zone = ma.fields.String()
    steps = ma.fields.List(ma.fields.Dict())
    grants = ma.fields.Nested(JobGrantsSchema)
    skills = ma.fields.Raw(allow_none=True)
    enabled = ma.fields.Boolean()
    pins = ma.fields.List(
        ma.fields.Nested(JobPinSchema),
        metadata={"description": "The skill versions its steps pin (`name@<hash>`), and which lag"},
    )
    source = ma.fields.String(allow_none=True, metadata={"description": "null: your default"})
    model = ma.fields.String(allow_none=True)
    reasoning_effort = ma.fields.String(allow_none=True)
    context = ma.fields.Raw(allow_none=True, metadata={"description": "A tier or tokens"})
    next_run_at = ma.fields.DateTime(
        allow_none=True, metadata={"description": "The next cron time, UTC (null if disabled)"}
    )
    created_at = ma.fields.DateTime()
    updated_at = ma.fields.DateTime()


class JobRunSchema(ma.Schema):
    id = ma.fields.String()
    job_id = ma.fields.String()
    trigger = ma.fields.String(metadata={"description": "schedule or manual"})
    due_at = ma.fields.DateTime(allow_none=True)
    status = status_field(JOB_RUN_STATES)
    step = ma.fields.Integer(metadata={"description": "Index of the step running or waiting"})
    steps = ma.fields.List(ma.fields.Dict(), metadata={"description": "Each ended step"})
    call_id = ma.fields.String(allow_none=True)
    approval_id = ma.fields.String(allow_none=True)
    error_code = ma.fields.String(allow_none=True)
    error_message = ma.fields.String(allow_none=True)
    created_at = ma.fields.DateTime()
    started_at = ma.fields.DateTime(allow_none=True)
    finished_at = ma.fields.DateTime(allow_none=True)


class JobRunStartedSchema(ma.Schema):
    job_run_id = ma.fields.String()


class ListFilterSchema(ma.Schema):
    """Filters shared by the run and call lists (all optional, combined with AND)."""

    skill = ma.fields.String(metadata={"description": "Only this skill's"})
    node = ma.fields.String(metadata={"description": "Only those on this node"})
    chat = ma.fields.String(metadata={"description": "Only those of this chat id"})
    since = ma.fields.AwareDateTime(
        default_timezone=UTC,
        metadata={"description": "Only those created at or after this ISO 8601 time"},
    )


class RunQuerySchema(ListFilterSchema):
    status = ma.fields.String(validate=ma.validate.OneOf(RUN_STATES))


class CallQuerySchema(ListFilterSchema):
    status = ma.fields.String(validate=ma.validate.OneOf(CALL_STATES))
    tool = ma.fields.String(metadata={"description": "Only calls of this tool"})


# One Server-Sent Event as a client reads it off a stream (its fields, without comment lines).
SSE_EVENT = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "event": {"type": "string"},
        "data": {"type": "string", "description": "JSON text"},
        "retry": {"type": "integer"},
    },
    "required": ["event", "data"],
}


def sse_response(description: str, example: str) -> dict[str, Any]:
    """The OpenAPI description of a Server-Sent Events response: its schema is one event's,
    its example the stream as it is written."""
    content = {"schema": SSE_EVENT, "example": example}
    return {"description": description, "content": {"text/event-stream": content}}


def file_response(description: str, *media_types: str) -> dict[str, Any]:
    """The OpenAPI description of a file download."""
    schema = {"type": "string", "format": "binary"}
    return {"description": description, "content": {t: {"schema": schema} for t in media_types}}


class GitHubSignInInfoSchema(ma.Schema):
    enabled = ma.fields.Boolean(metadata={"description": "Whether owners may sign in with GitHub"})


class SignInCodeSchema(ma.Schema):
    signin = ma.fields.String(metadata={"description": "This sign-in's id, for the polls"})
    user_code = ma.fields.String(metadata={"description": "The code the owner enters on GitHub"})
    verification_uri = ma.fields.String(metadata={"description": "Where to enter it"})
    expires_in = ma.fields.Integer(metadata={"description": "Seconds the code stays good"})
    interval = ma.fields.Integer(metadata={"description": "Seconds to wait between polls"})


class SignInPollSchema(ma.Schema):
    signin = ma.fields.String(
        required=True,
        validate=[
            ma.validate.Length(min=1, max=MAX_SIGNIN_ID_CHARS),
            ma.validate.Regexp(r"^[A-Za-z0-9_-]+$", error="A sign-in id is letters, digits, -, _."),
        ],
        metadata={"description": "The id /api/signin/github/start answered"},
    )


class SignInResultSchema(ma.Schema):
    status = ma.fields.String(metadata={"description": "pending or signed_in"})
    interval = ma.fields.Integer(metadata={"description": "pending: seconds until the next poll"})
    token = ma.fields.String(metadata={"description": "The owner token, shown this once"})
    token_id = ma.fields.Integer()
    owner = ma.fields.String()
    github_login = ma.fields.String()
    expires_at = ma.fields.DateTime(metadata={"description": "Refresh before then"})

"""Marshmallow schemas of the API's requests and responses (they become the OpenAPI doc)."""

from __future__ import annotations

import marshmallow as ma


class HealthSchema(ma.Schema):
    status = ma.fields.String()
    database = ma.fields.String()
    redis = ma.fields.String()


class SkillFileSchema(ma.Schema):
    path = ma.fields.String()
    size = ma.fields.Integer()


class SkillSchema(ma.Schema):
    name = ma.fields.String()
    description = ma.fields.String()
    enabled = ma.fields.Boolean()
    hash = ma.fields.String()
    revision = ma.fields.Integer()
    source = ma.fields.String(metadata={"description": "builtin, path, upload, github or copy"})
    origin = ma.fields.String(allow_none=True)
    author = ma.fields.String()
    execution = ma.fields.String()
    tier = ma.fields.String()
    file_count = ma.fields.Integer()
    size_bytes = ma.fields.Integer()
    read_only = ma.fields.Boolean()
    locked = ma.fields.Boolean()
    created_at = ma.fields.DateTime()
    updated_at = ma.fields.DateTime()


class SkillDetailSchema(SkillSchema):
    files = ma.fields.List(ma.fields.Nested(SkillFileSchema))


class ImportedSkillSchema(ma.Schema):
    name = ma.fields.String()
    hash = ma.fields.String()
    enabled = ma.fields.Boolean()
    files = ma.fields.List(ma.fields.String())


class SkillListQuerySchema(ma.Schema):
    enabled = ma.fields.Boolean(metadata={"description": "Only enabled (true) or disabled"})


class ImportQuerySchema(ma.Schema):
    replace = ma.fields.Boolean(
        load_default=False, metadata={"description": "Replace an owned skill of that name"}
    )


class GitHubImportSchema(ma.Schema):
    github = ma.fields.String(
        required=True,
        metadata={"description": "https://github.com/<owner>/<repo>/tree/<ref>/<path>"},
    )
    enable = ma.fields.Boolean(load_default=True)


class ZipUploadSchema(ma.Schema):
    file = ma.fields.Raw(
        required=True, metadata={"type": "string", "format": "binary", "description": "A zip"}
    )
    enable = ma.fields.Boolean(load_default=True)


class DuplicateSchema(ma.Schema):
    name = ma.fields.String(required=True, metadata={"description": "Name of the copy"})


class EnabledSchema(ma.Schema):
    enabled = ma.fields.Boolean(required=True)
    hash = ma.fields.String(
        load_default=None, metadata={"description": "The hash you reviewed; 409 if it moved"}
    )


class ToolCallSchema(ma.Schema):
    arguments = ma.fields.Raw(load_default=None, metadata={"type": "object"})
    chat_id = ma.fields.String(load_default=None)
    turn_id = ma.fields.String(load_default=None)
    job_run_id = ma.fields.String(load_default=None)
    mode = ma.fields.String(load_default="execute", validate=ma.validate.OneOf(["execute", "plan"]))


class ToolErrorSchema(ma.Schema):
    code = ma.fields.String()
    message = ma.fields.String()


class ToolResultSchema(ma.Schema):
    call_id = ma.fields.String()
    status = ma.fields.String(
        metadata={"description": "done, running, pending_approval, denied or failed"}
    )
    result = ma.fields.Raw()
    error = ma.fields.Nested(ToolErrorSchema)
    approval_id = ma.fields.String()
    run_id = ma.fields.String()


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
    run_id = ma.fields.String(allow_none=True)
    skill_name = ma.fields.String(allow_none=True)
    skill_hash = ma.fields.String(allow_none=True)
    node = ma.fields.String(allow_none=True)
    result = ma.fields.Raw(allow_none=True)
    tool = ma.fields.String()
    tier = ma.fields.String()
    mode = ma.fields.String()
    status = ma.fields.String()
    rule = ma.fields.String(allow_none=True)
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


class ApprovalSchema(ma.Schema):
    id = ma.fields.String()
    call_id = ma.fields.String()
    status = ma.fields.String(
        metadata={"description": "pending, approved, approved_for_chat, denied, expired or void"}
    )
    tool = ma.fields.String()
    tier = ma.fields.String()
    arguments = ma.fields.Raw()
    skill_name = ma.fields.String(allow_none=True)
    skill_hash = ma.fields.String(allow_none=True)
    node = ma.fields.String(allow_none=True)
    grant_key = ma.fields.String(allow_none=True)
    rule = ma.fields.String(allow_none=True)
    warning = ma.fields.String()
    offers_chat_grant = ma.fields.Boolean()
    created_at = ma.fields.DateTime()
    expires_at = ma.fields.DateTime()
    answered_at = ma.fields.DateTime(allow_none=True)


class ApprovalQuerySchema(ma.Schema):
    status = ma.fields.String(
        validate=ma.validate.OneOf(
            ["pending", "approved", "approved_for_chat", "denied", "expired", "void"]
        )
    )


class DecisionSchema(ma.Schema):
    decision = ma.fields.String(
        required=True, validate=ma.validate.OneOf(["approve", "approve_for_chat", "deny"])
    )


class ChatSchema(ma.Schema):
    chat_id = ma.fields.String(attribute="external_id")
    declined_calls = ma.fields.Integer()
    expired_calls = ma.fields.Integer()
    failed_calls = ma.fields.Integer()
    timed_out_calls = ma.fields.Integer()
    created_at = ma.fields.DateTime()


class GrantSchema(ma.Schema):
    scope = ma.fields.String()
    subject = ma.fields.String()
    key = ma.fields.String()
    created_at = ma.fields.DateTime()


class SettingsSchema(ma.Schema):
    auto_tools = ma.fields.List(
        ma.fields.String(),
        required=True,
        metadata={"description": "Change tools (or skill grant keys) that run without asking"},
    )


class RunSchema(ma.Schema):
    run_id = ma.fields.String(attribute="id")
    call_id = ma.fields.String(allow_none=True)
    status = ma.fields.String(
        metadata={
            "description": "queued, running, succeeded, failed, timed_out, cancelled or interrupted"
        }
    )
    skill_name = ma.fields.String()
    skill_hash = ma.fields.String()
    script = ma.fields.String()
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


class RunSummarySchema(RunSchema):
    """A run in a list: everything but its output."""

    class Meta:
        exclude = ("stdout", "stderr")


class RunListQuerySchema(ma.Schema):
    status = ma.fields.String(
        validate=ma.validate.OneOf(
            ["queued", "running", "succeeded", "failed", "timed_out", "cancelled", "interrupted"]
        ),
        metadata={"description": "Only runs in this state"},
    )
    limit = ma.fields.Integer(
        load_default=50,
        validate=ma.validate.Range(min=1, max=500),
        metadata={"description": "At most this many runs, newest first"},
    )


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
    alive = ma.fields.Boolean(metadata={"description": "A worker of it beat recently"})
    workers = ma.fields.List(ma.fields.Nested(NodeWorkerSchema))
    features = ma.fields.List(ma.fields.String(), metadata={"description": "skills, docker, kvm"})
    hashes = ma.fields.Dict(
        keys=ma.fields.String(),
        values=ma.fields.List(ma.fields.String()),
        metadata={"description": "Skill name to the package hashes the node holds"},
    )
    last_heartbeat = ma.fields.String(allow_none=True)


class SignedManifestSchema(ma.Schema):
    manifest = ma.fields.Dict(metadata={"description": "node, issued_at and packages"})
    signature = ma.fields.String(metadata={"description": "Ed25519 over the canonical JSON"})


class SyncRequestSchema(ma.Schema):
    node = ma.fields.String()
    receivers = ma.fields.Integer(metadata={"description": "Agents listening right now"})

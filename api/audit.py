"""The owner's audit trail: pages of records, newest first, or all of them as JSON Lines."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC
from typing import Any

import marshmallow as ma
from flask import Response, stream_with_context
from sqlalchemy import Select, select

from api.auth import owner_only
from api.blueprint import Blueprint
from api.paging import Page, keyset, sql_page
from api.roles import owner_route
from api.schemas import NO_CONTROL_CHARACTERS
from api.services import services
from store import audit
from store.limits import AUDIT_EXPORT_BATCH
from store.models import AuditRecord

blp = Blueprint("audit", __name__, url_prefix="/api/audit", description="Audit trail")

JSONL = "application/jsonl"
JSONL_EXAMPLE = (
    '{"actor":"policy","created_at":"2026-12-06T15:30:00.000000Z","facts":{"outcome":"allow",'
    '"rule":"read-tools","tier":"read","tool":"list_skills"},"hash":"9f…","kind":'
    '"policy.decision","owner_id":1,"prev_hash":"00…","seq":1,"subject":"3b0c…"}\n'
)
FORMATS = ("json", "jsonl")


class AuditQuerySchema(ma.Schema):
    """The filters of the audit trail (all optional, combined with AND)."""

    kind = ma.fields.String(validate=ma.validate.OneOf(audit.KINDS))
    subject = ma.fields.String(
        validate=[
            ma.validate.Length(min=1, max=audit.MAX_SUBJECT_CHARS),
            # No subject holds one, and PostgreSQL refuses a NUL in a text parameter.
            ma.validate.Regexp(NO_CONTROL_CHARACTERS),
        ],
        metadata={"description": "Only records about this: a call, run or approval id, a "
                  "skill's name, a token's id, a setting's name"},
    )  # fmt: skip
    since = ma.fields.AwareDateTime(
        default_timezone=UTC,
        metadata={"description": "Only records written at or after this ISO 8601 time"},
    )
    until = ma.fields.AwareDateTime(
        default_timezone=UTC,
        metadata={"description": "Only records written before this ISO 8601 time"},
    )
    format = ma.fields.String(
        load_default="json",
        validate=ma.validate.OneOf(FORMATS),
        metadata={"description": "jsonl: every matching record, oldest first, one JSON object "
                  "a line (no pages)"},
    )  # fmt: skip


class AuditRecordSchema(ma.Schema):
    """One record as the chain hashes it (store/audit.py), and its hash."""

    owner_id = ma.fields.Integer()
    seq = ma.fields.Integer(metadata={"description": "Its place in your chain, from 1"})
    created_at = ma.fields.String(metadata={"description": "UTC, microseconds: as hashed"})
    kind = ma.fields.String(validate=ma.validate.OneOf(audit.KINDS))
    actor = ma.fields.String(metadata={"description": "Who: a token (owner:<id>, agent:<id>), "
                             "the policy, a worker, the system"})  # fmt: skip
    subject = ma.fields.String()
    facts = ma.fields.Dict(metadata={"description": "Names, hashes, ids and outcomes only"})
    prev_hash = ma.fields.String(metadata={"description": "The hash of the record before"})
    hash = ma.fields.String(metadata={"description": "SHA-256 of the record's canonical JSON"})


ANSWER = "A page of records, newest first; with format=jsonl, every record, oldest first"
# A page as JSON, or (format=jsonl) every record, a line each: the 200 answer's two bodies.
JSON_OR_LINES = {
    "application/json": {"schema": AuditRecordSchema(many=True)},
    JSONL: {"schema": {"type": "string"}, "example": JSONL_EXAMPLE},
}


@blp.route("")
@owner_route
@blp.arguments(AuditQuerySchema(), location="query")
@blp.response(200, AuditRecordSchema(many=True))
@blp.doc(responses={"200": {"description": ANSWER, "content": JSON_OR_LINES}})
@keyset(blp)
def list_audit(query: dict[str, Any], page: Page) -> Any:
    """Your audit trail, newest first; `format=jsonl` exports every record oldest first"""
    caller = owner_only()
    statement = _filtered(select(AuditRecord).where(AuditRecord.owner_id == caller), query)
    if query.get("format") == "jsonl":
        body = stream_with_context(_lines(statement))
        return Response(body, mimetype=JSONL, headers={"Content-Disposition": "inline"})
    with services().sessions() as session:
        rows = sql_page(session, statement, page, caller, (AuditRecord.seq,))
    return [audit.exported(row) for row in rows]


def _filtered(statement: Select[Any], query: dict[str, Any]) -> Select[Any]:
    if "kind" in query:
        statement = statement.where(AuditRecord.kind == query["kind"])
    if "subject" in query:
        statement = statement.where(AuditRecord.subject == query["subject"])
    if "since" in query:
        statement = statement.where(AuditRecord.created_at >= query["since"])
    if "until" in query:
        statement = statement.where(AuditRecord.created_at < query["until"])
    return statement


def _lines(statement: Select[Any]) -> Iterator[bytes]:
    """Every matching record in chain order, read by keyset in batches, each batch in a
    session of its own: an export of years holds neither a transaction nor its rows open."""
    after = 0
    while True:
        batch = statement.where(AuditRecord.seq > after).order_by(AuditRecord.seq)
        with services().sessions() as session:
            rows = list(session.scalars(batch.limit(AUDIT_EXPORT_BATCH)))
        if not rows:
            return
        yield b"".join(
            json.dumps(audit.exported(row), sort_keys=True, separators=(",", ":")).encode() + b"\n"
            for row in rows
        )
        if len(rows) < AUDIT_EXPORT_BATCH:
            return
        after = rows[-1].seq

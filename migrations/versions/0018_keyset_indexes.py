"""keyset indexes: each list's order (newest first within the owner's) as an index

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06 13:00:00

The list routes page by keyset on (created_at, id) within an owner's rows, some filtered by
status (api/paging.py): these indexes let a page read its rows in order and stop, where an
owner index alone had the database sort every row of the owner's for each page. The approval
and question lists first expire the owner's pending ones past their time, and the sweep
everyone's: (status, expires_at) finds those without reading every pending row.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEXES = (
    ("ix_tool_calls_owner_newest", "tool_calls", ["owner_id", "created_at", "id"]),
    ("ix_tool_calls_owner_status_newest", "tool_calls", ["owner_id", "status", "created_at", "id"]),
    ("ix_tool_calls_chat_newest", "tool_calls", ["chat_id", "created_at", "id"]),
    ("ix_runs_owner_newest", "runs", ["owner_id", "created_at", "id"]),
    ("ix_runs_owner_status_newest", "runs", ["owner_id", "status", "created_at", "id"]),
    ("ix_approvals_owner_newest", "approvals", ["owner_id", "created_at", "id"]),
    ("ix_approvals_owner_status_newest", "approvals", ["owner_id", "status", "created_at", "id"]),
    ("ix_approvals_owner_status_expires", "approvals", ["owner_id", "status", "expires_at"]),
    ("ix_approvals_status_expires", "approvals", ["status", "expires_at"]),
    ("ix_questions_owner_newest", "questions", ["owner_id", "created_at", "id"]),
    ("ix_questions_owner_status_expires", "questions", ["owner_id", "status", "expires_at"]),
    ("ix_questions_status_expires", "questions", ["status", "expires_at"]),
    ("ix_questions_owner_status_newest", "questions", ["owner_id", "status", "created_at", "id"]),
    ("ix_chats_owner_newest", "chats", ["owner_id", "created_at", "id"]),
    ("ix_files_owner_newest", "files", ["owner_id", "created_at", "id"]),
)


# Status alone: (status, expires_at) holds it first, and the planner preferred it to that one
# for the expiry query, reading every pending row to find none past its time.
REPLACED = (("ix_approvals_status", "approvals"), ("ix_questions_status", "questions"))


def upgrade() -> None:
    for name, table, columns in INDEXES:
        op.create_index(name, table, columns)
    for name, table in REPLACED:
        op.drop_index(name, table_name=table)


def downgrade() -> None:
    for name, table in REPLACED:
        op.create_index(name, table, ["status"])
    for name, table, _ in reversed(INDEXES):
        op.drop_index(name, table_name=table)

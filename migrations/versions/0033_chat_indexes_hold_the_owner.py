"""chat indexes hold the owner: a chat's calls and runs counted from the index alone

`GET /api/calls?chat=` and `/api/runs?chat=` filter by owner and chat. Their page reads
(chat_id, created_at, id) newest first and stops, but the first page's capped count (up to
1,001 rows) had to visit each row for its owner: at a million calls, a chat of about a thousand
calls cost a thousand heap reads per request. With the owner in the index after the chat,
(chat_id, owner_id, created_at, id), the count reads the index alone (PostgreSQL's index-only
scan, SQLite's covering index) and the page still reads its order.

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-06 23:10:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0033"
down_revision: str | None = "0032"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEXES = (("ix_tool_calls_chat_newest", "tool_calls"), ("ix_runs_chat_newest", "runs"))


def upgrade() -> None:
    for name, table in INDEXES:
        op.drop_index(name, table_name=table)
        op.create_index(name, table, ["chat_id", "owner_id", "created_at", "id"])


def downgrade() -> None:
    for name, table in INDEXES:
        op.drop_index(name, table_name=table)
        op.create_index(name, table, ["chat_id", "created_at", "id"])

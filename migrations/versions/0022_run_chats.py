"""run chats: each run carries its call's chat, indexed in the runs list's order

`GET /api/runs?chat=` found the chat's calls by their index, then their runs by call_id, and
sorted them: its cost followed the chat's size. With the chat on the run, (chat_id,
created_at, id) gives the chat's runs newest first and the page stops, as the calls' own
chat index does. Runs without a call (a job's command) or of a call without a chat keep none;
a deleted chat's runs stay, with none.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06 13:50:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# One statement both databases run (a correlated subquery, not UPDATE ... FROM): each run with
# a call reads that call's chat through the calls' primary key.
BACKFILL = (
    "UPDATE runs SET chat_id = "
    "(SELECT tool_calls.chat_id FROM tool_calls WHERE tool_calls.id = runs.call_id) "
    "WHERE runs.call_id IS NOT NULL"
)


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("chat_id", sa.Integer(), nullable=True))
        batch_op.create_foreign_key(
            batch_op.f("fk_runs_chat_id_chats"), "chats", ["chat_id"], ["id"], ondelete="SET NULL"
        )
    op.execute(BACKFILL)
    op.create_index("ix_runs_chat_newest", "runs", ["chat_id", "created_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_runs_chat_newest", table_name="runs")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("fk_runs_chat_id_chats"), type_="foreignkey")
        batch_op.drop_column("chat_id")

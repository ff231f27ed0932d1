"""chat messages: a turn keeps its prompt's message id, what replaced it, and its usage

`POST /api/chat` (the AI SDK's chat transport) names each user message; the turn answering it
keeps that id, so a regenerate of the message finds its turn. A regenerated turn is kept,
marked with the turn that replaced it, and leaves the chat's history. The tokens the model
reported for a turn's requests are summed in `usage`.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-06 16:05:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0030"
down_revision: str | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("turns", schema=None) as batch_op:
        batch_op.add_column(sa.Column("prompt_id", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("replaced_by", sa.String(length=36), nullable=True))
        batch_op.add_column(sa.Column("usage", sa.JSON(), nullable=True))
    op.create_index("ix_turns_chat_newest", "turns", ["owner_id", "chat_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_turns_chat_newest", table_name="turns")
    with op.batch_alter_table("turns", schema=None) as batch_op:
        batch_op.drop_column("usage")
        batch_op.drop_column("replaced_by")
        batch_op.drop_column("prompt_id")

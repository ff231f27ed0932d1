"""withdrawn approvals: an agent that stops waiting withdraws its call's approval; a guessed
chat is marked on the approvals asked in it

Revision ID: 0019
Revises: 0017
Create Date: 2026-12-06 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BEFORE = ("pending", "answering", "approved", "approved_for_chat", "denied", "expired", "stale")
AFTER = (*BEFORE, "withdrawn")


def _check(states: tuple[str, ...]) -> str:
    return "status IN (" + ", ".join(f"'{state}'" for state in states) + ")"


def upgrade() -> None:
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("chat_guessed", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch_op.drop_constraint(op.f("ck_approvals_status"), type_="check")
        batch_op.create_check_constraint(op.f("ck_approvals_status"), _check(AFTER))


def downgrade() -> None:
    # A withdrawn approval was one nobody may answer any more: an expired one, before.
    op.execute("UPDATE approvals SET status = 'expired' WHERE status = 'withdrawn'")
    with op.batch_alter_table("approvals", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_approvals_status"), type_="check")
        batch_op.create_check_constraint(op.f("ck_approvals_status"), _check(BEFORE))
        batch_op.drop_column("chat_guessed")

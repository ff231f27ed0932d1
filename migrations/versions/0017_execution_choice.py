"""execution choice: where a skill runs is the owner's to set, apart from its content

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHOICE = "execution_choice IS NULL OR execution_choice IN ('node', 'spark', 'sandbox')"


def upgrade() -> None:
    # Skills stored before keep the execution they run on (`node` for those that declare
    # none): an upgrade moves no skill to another runner. A new import of one, or the owner's
    # choice, sets it anew.
    with op.batch_alter_table("skills", schema=None) as batch_op:
        batch_op.add_column(sa.Column("execution_choice", sa.String(length=16), nullable=True))
        batch_op.create_check_constraint(op.f("ck_skills_execution_choice"), CHOICE)


def downgrade() -> None:
    # `auto` meant "no choice" to this release only: before it, a skill declaring none ran on
    # a node.
    op.execute("UPDATE skills SET execution = execution_choice WHERE execution_choice IS NOT NULL")
    op.execute("UPDATE skills SET execution = 'node' WHERE execution = 'auto'")
    with op.batch_alter_table("skills", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_skills_execution_choice"), type_="check")
        batch_op.drop_column("execution_choice")

"""command runs: a run is a skill's script or one command (argv) on a node; the owner's shell

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A run names a skill's script (every skill column set, no command) or a command (the reverse).
SUBJECT = (
    "(command IS NULL AND skill_name IS NOT NULL AND skill_hash IS NOT NULL "
    "AND script IS NOT NULL) OR (command IS NOT NULL AND skill_name IS NULL "
    "AND skill_hash IS NULL AND script IS NULL)"
)


def _skill_columns(nullable: bool) -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.alter_column("skill_name", existing_type=sa.String(length=64), nullable=nullable)
        batch_op.alter_column("skill_hash", existing_type=sa.String(length=64), nullable=nullable)
        batch_op.alter_column("script", existing_type=sa.String(length=1024), nullable=nullable)


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("command", sa.JSON(), nullable=True))
    _skill_columns(nullable=True)
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_check_constraint(op.f("ck_runs_subject"), SUBJECT)
    with op.batch_alter_table("owners", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("run_command_shell", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("owners", schema=None) as batch_op:
        batch_op.drop_column("run_command_shell")
    op.execute("DELETE FROM runs WHERE command IS NOT NULL")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_runs_subject"), type_="check")
    _skill_columns(nullable=False)
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("command")

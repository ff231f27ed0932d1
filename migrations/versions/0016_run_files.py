"""run files: owners' files, a run's command line as given, and its files in and out

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "files",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.String(length=36), nullable=True),
        sa.Column("path", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["owner_id"], ["owners.id"], name=op.f("fk_files_owner_id_owners"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_files")),
    )
    with op.batch_alter_table("files", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_files_owner_id"), ["owner_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_files_expires_at"), ["expires_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_files_run_id"), ["run_id"], unique=False)
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("args", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("input_files", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("output_files", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("output_files")
        batch_op.drop_column("input_files")
        batch_op.drop_column("args")
    with op.batch_alter_table("files", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_files_run_id"))
        batch_op.drop_index(batch_op.f("ix_files_expires_at"))
        batch_op.drop_index(batch_op.f("ix_files_owner_id"))
    op.drop_table("files")

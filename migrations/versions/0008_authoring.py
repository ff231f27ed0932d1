"""the authoring loop: review notes on skills, edit plans and reviewed chats

Skills keep the lint warnings of their current content and, for drafts, the chats they came
from and why. An edit plan is the diff the owner approves before an edit is written. A
reviewed-chat record lets chat review skip chats already looked at.

Revision ID: 0008
Revises: 0006
Create Date: 2026-12-01 00:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("skills") as batch:
        batch.add_column(sa.Column("lint_warnings", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("source_chats", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("rationale", sa.Text(), nullable=True))
    op.create_table(
        "edit_plans",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("call_id", sa.String(length=36), nullable=False),
        sa.Column("approval_id", sa.String(length=36), nullable=True),
        sa.Column("skill_name", sa.String(length=64), nullable=False),
        sa.Column("base_hash", sa.String(length=64), nullable=False),
        sa.Column("changes", sa.JSON(), nullable=False),
        sa.Column("diff", sa.Text(), nullable=False),
        sa.Column("lint_warnings", sa.JSON(), nullable=False),
        sa.Column("rationale", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("applied_hash", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("answered_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["owner_id"],
            ["owners.id"],
            name=op.f("fk_edit_plans_owner_id_owners"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_edit_plans")),
    )
    op.create_index(op.f("ix_edit_plans_owner_id"), "edit_plans", ["owner_id"], unique=False)
    op.create_index(op.f("ix_edit_plans_call_id"), "edit_plans", ["call_id"], unique=True)
    op.create_index(op.f("ix_edit_plans_approval_id"), "edit_plans", ["approval_id"], unique=False)
    op.create_table(
        "chat_reviews",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("chat_id", sa.Integer(), nullable=False),
        sa.Column("skill_name", sa.String(length=64), nullable=True),
        sa.Column("reviewed_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["owner_id"],
            ["owners.id"],
            name=op.f("fk_chat_reviews_owner_id_owners"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["chat_id"],
            ["chats.id"],
            name=op.f("fk_chat_reviews_chat_id_chats"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_chat_reviews")),
        sa.UniqueConstraint("owner_id", "chat_id", name=op.f("uq_chat_reviews_owner_id")),
    )


def downgrade() -> None:
    op.drop_table("chat_reviews")
    op.drop_index(op.f("ix_edit_plans_approval_id"), table_name="edit_plans")
    op.drop_index(op.f("ix_edit_plans_call_id"), table_name="edit_plans")
    op.drop_index(op.f("ix_edit_plans_owner_id"), table_name="edit_plans")
    op.drop_table("edit_plans")
    with op.batch_alter_table("skills") as batch:
        batch.drop_column("rationale")
        batch.drop_column("source_chats")
        batch.drop_column("lint_warnings")

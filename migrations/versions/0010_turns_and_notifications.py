"""agent turns, model settings, push subscriptions and webhooks

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 01:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _owner(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["owner_id"], ["owners.id"], name=op.f(f"fk_{table}_owner_id_owners"), ondelete="CASCADE"
    )


def upgrade() -> None:
    op.create_table(
        "turns",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("chat_id", sa.String(length=200), nullable=True),
        sa.Column("job_run_id", sa.String(length=36), nullable=True),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("calls", sa.Integer(), nullable=False),
        sa.Column("worker", sa.String(length=200), nullable=True),
        sa.Column("error_code", sa.String(length=64), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        _owner("turns"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_turns")),
    )
    op.create_index(op.f("ix_turns_owner_id"), "turns", ["owner_id"], unique=False)
    op.create_index(op.f("ix_turns_chat_id"), "turns", ["chat_id"], unique=False)
    op.create_index(op.f("ix_turns_status"), "turns", ["status"], unique=False)
    op.create_table(
        "model_settings",
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("base_url", sa.String(length=500), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("api_key", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        _owner("model_settings"),
        sa.PrimaryKeyConstraint("owner_id", name=op.f("pk_model_settings")),
    )
    op.create_table(
        "push_subscriptions",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("endpoint", sa.String(length=1000), nullable=False),
        sa.Column("p256dh", sa.String(length=200), nullable=False),
        sa.Column("auth", sa.String(length=100), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        _owner("push_subscriptions"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_push_subscriptions")),
        sa.UniqueConstraint("owner_id", "endpoint", name=op.f("uq_push_subscriptions_owner_id")),
    )
    op.create_index(
        op.f("ix_push_subscriptions_owner_id"), "push_subscriptions", ["owner_id"], unique=False
    )
    op.create_table(
        "webhooks",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("url", sa.String(length=1000), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        _owner("webhooks"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhooks")),
    )
    op.create_index(op.f("ix_webhooks_owner_id"), "webhooks", ["owner_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_webhooks_owner_id"), table_name="webhooks")
    op.drop_table("webhooks")
    op.drop_index(op.f("ix_push_subscriptions_owner_id"), table_name="push_subscriptions")
    op.drop_table("push_subscriptions")
    op.drop_table("model_settings")
    op.drop_index(op.f("ix_turns_status"), table_name="turns")
    op.drop_index(op.f("ix_turns_chat_id"), table_name="turns")
    op.drop_index(op.f("ix_turns_owner_id"), table_name="turns")
    op.drop_table("turns")

"""github sign-in: the GitHub sessions that hold expiring owner tokens

api_tokens.expires_at comes with 0020.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06 09:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "github_sessions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("token_id", sa.Integer(), nullable=False),
        sa.Column("github_user_id", sa.BigInteger(), nullable=False),
        sa.Column("github_login", sa.String(length=64), nullable=False),
        sa.Column("access_token", sa.Text(), nullable=False),
        sa.Column("refresh_token", sa.Text(), nullable=True),
        sa.Column("access_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("refresh_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("refreshed_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["token_id"],
            ["api_tokens.id"],
            name=op.f("fk_github_sessions_token_id_api_tokens"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_github_sessions")),
        sa.UniqueConstraint("token_id", name=op.f("uq_github_sessions_token_id")),
    )
    with op.batch_alter_table("github_sessions", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_github_sessions_github_user_id"), ["github_user_id"], unique=False
        )


def downgrade() -> None:
    # Sign-ins with GitHub end: their tokens would otherwise never expire.
    op.execute("DELETE FROM api_tokens WHERE id IN (SELECT token_id FROM github_sessions)")
    with op.batch_alter_table("github_sessions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_github_sessions_github_user_id"))
    op.drop_table("github_sessions")

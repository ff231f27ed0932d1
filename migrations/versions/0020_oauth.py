"""oauth: MCP hosts sign in through OAuth 2.1; their clients, grants and refresh tokens

Revision ID: 0020
Revises: 0017
Create Date: 2026-12-06 09:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("resource", sa.String(length=300), nullable=True))
        batch_op.add_column(sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "oauth_clients",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("client_id", sa.String(length=300), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("document_url", sa.String(length=300), nullable=True),
        sa.Column("info", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("fetched_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_oauth_clients")),
        sa.UniqueConstraint("client_id", name=op.f("uq_oauth_clients_client_id")),
    )
    op.create_table(
        "oauth_grants",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("client_id", sa.String(length=300), nullable=False),
        sa.Column("redirect_uri", sa.Text(), nullable=False),
        sa.Column("redirect_uri_explicit", sa.Boolean(), nullable=False),
        sa.Column("code_challenge", sa.String(length=128), nullable=False),
        sa.Column("state", sa.Text(), nullable=True),
        sa.Column("scopes", sa.String(length=300), nullable=False),
        sa.Column("resource", sa.String(length=300), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=True),
        sa.Column("session_hash", sa.String(length=64), nullable=True),
        sa.Column("code_hash", sa.String(length=64), nullable=True),
        sa.Column("token_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["client_id"], ["oauth_clients.client_id"],
            name=op.f("fk_oauth_grants_client_id_oauth_clients"), ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["owner_id"], ["owners.id"],
            name=op.f("fk_oauth_grants_owner_id_owners"), ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["token_id"], ["api_tokens.id"],
            name=op.f("fk_oauth_grants_token_id_api_tokens"), ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_oauth_grants")),
        sa.UniqueConstraint("request_hash", name=op.f("uq_oauth_grants_request_hash")),
        sa.UniqueConstraint("code_hash", name=op.f("uq_oauth_grants_code_hash")),
    )  # fmt: skip
    op.create_table(
        "oauth_refresh_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("token_id", sa.Integer(), nullable=False),
        sa.Column("client_id", sa.String(length=300), nullable=False),
        sa.Column("scopes", sa.String(length=300), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["token_id"], ["api_tokens.id"],
            name=op.f("fk_oauth_refresh_tokens_token_id_api_tokens"), ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_oauth_refresh_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_oauth_refresh_tokens_token_hash")),
    )  # fmt: skip


def downgrade() -> None:
    op.drop_table("oauth_refresh_tokens")
    op.drop_table("oauth_grants")
    op.drop_table("oauth_clients")
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.drop_column("expires_at")
        batch_op.drop_column("resource")

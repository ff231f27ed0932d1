"""token roles: an owner's token is the owner's own or an agent's

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 23:58:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ROLE_CHECK = "(kind = 'node' AND role IS NULL) OR (kind = 'owner' AND role IN ('owner', 'agent'))"


def upgrade() -> None:
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("role", sa.String(length=16), nullable=True))
    # Every token an owner held so far could do everything: it stays an owner token.
    op.execute("UPDATE api_tokens SET role = 'owner' WHERE kind = 'owner'")
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.create_check_constraint(op.f("ck_api_tokens_role"), ROLE_CHECK)


def downgrade() -> None:
    # Agent tokens can't be expressed without roles; they are removed rather than promoted.
    op.execute("DELETE FROM api_tokens WHERE role = 'agent'")
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_api_tokens_role"), type_="check")
        batch_op.drop_column("role")

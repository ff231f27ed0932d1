"""version signatures: a kept version keeps the author's skillfleet.sig it was imported with

A rollback to a signed version puts the signature back with its files, so the version is
judged again against the owner's trusted keys as its first import was, rather than coming
back unsigned.

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-06 19:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0032"
down_revision: str | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("skill_versions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("signature", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("skill_versions", schema=None) as batch_op:
        batch_op.drop_column("signature")

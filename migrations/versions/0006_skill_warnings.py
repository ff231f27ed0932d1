"""skill warnings

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 00:10:00.000000
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # What an import bent to accept a skill; skills installed before have none.
    with op.batch_alter_table("skills") as batch:
        batch.add_column(sa.Column("warnings", sa.JSON(), server_default="[]", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("skills") as batch:
        batch.drop_column("warnings")

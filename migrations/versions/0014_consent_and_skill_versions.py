"""consent bound to a version: the skill hash a question asked about; the hashes skills had

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A question asked before this knows no version: its answer must name the one it allows.
    with op.batch_alter_table("questions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("skill_hash", sa.String(length=64), nullable=True))
    op.create_table(
        "skill_versions",
        sa.Column("skill_id", sa.Integer(), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["skill_id"], ["skills.id"], name=op.f("fk_skill_versions_skill_id_skills"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("skill_id", "hash", name=op.f("pk_skill_versions")),
    )  # fmt: skip
    # Every skill has had at least the version it has now.
    op.execute(
        "INSERT INTO skill_versions (skill_id, hash, seen_at) "
        "SELECT id, hash, updated_at FROM skills"
    )


def downgrade() -> None:
    op.drop_table("skill_versions")
    with op.batch_alter_table("questions", schema=None) as batch_op:
        batch_op.drop_column("skill_hash")

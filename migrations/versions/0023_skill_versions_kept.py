"""skill versions kept: who made each version and how, its files by hash, and its signer

Every version a skill has or had already had a row (0014); now a row also says what made it
(`source`: upload, github, copy, draft, edit…), who (`author`), who signed it (`signed_by`,
filled by signature checks), its size, and whether its files are kept for a rollback. The
files themselves are stored once by their SHA-256 beside the skills; `skill_version_files`
lists each kept version's paths and digests. Versions recorded before this keep no files.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06 15:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("skill_versions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("source", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("author", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("signed_by", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("file_count", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("size_bytes", sa.Integer(), nullable=True))
        batch_op.add_column(
            sa.Column("kept", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
    op.create_table(
        "skill_version_files",
        sa.Column("skill_id", sa.Integer(), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.Column("path", sa.String(length=1024), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["skill_id", "hash"], ["skill_versions.skill_id", "skill_versions.hash"],
            name=op.f("fk_skill_version_files_skill_id_skill_versions"), ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("skill_id", "hash", "path", name=op.f("pk_skill_version_files")),
    )  # fmt: skip
    # A file is removed from the store when no kept version lists its digest any more.
    op.create_index(
        op.f("ix_skill_version_files_digest"), "skill_version_files", ["digest"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_skill_version_files_digest"), table_name="skill_version_files")
    op.drop_table("skill_version_files")
    with op.batch_alter_table("skill_versions", schema=None) as batch_op:
        batch_op.drop_column("kept")
        batch_op.drop_column("size_bytes")
        batch_op.drop_column("file_count")
        batch_op.drop_column("signed_by")
        batch_op.drop_column("author")
        batch_op.drop_column("source")

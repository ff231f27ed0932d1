"""audit trail: each owner's hash-chained record of decisions, answers, runs and changes

`audit_records` holds an owner's records in seq order, each with the hash of the one before;
`audit_heads` the last seq of each owner's chain, whose row an append moves (and locks) first
(store/audit.py). Owners of today start their chain with their next record.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-06 15:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "audit_heads",
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["owner_id"],
            ["owners.id"],
            name=op.f("fk_audit_heads_owner_id_owners"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("owner_id", name=op.f("pk_audit_heads")),
    )
    op.create_table(
        "audit_records",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("actor", sa.String(length=100), nullable=False),
        sa.Column("subject", sa.String(length=300), nullable=False),
        sa.Column("facts", sa.JSON(), nullable=False),
        sa.Column("prev_hash", sa.String(length=64), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["owner_id"],
            ["owners.id"],
            name=op.f("fk_audit_records_owner_id_owners"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_records")),
        sa.UniqueConstraint("owner_id", "seq", name=op.f("uq_audit_records_owner_id")),
    )
    op.create_index(
        op.f("ix_audit_records_created_at"), "audit_records", ["created_at"], unique=False
    )
    op.create_index(
        "ix_audit_records_owner_subject_seq", "audit_records", ["owner_id", "subject", "seq"]
    )


def downgrade() -> None:
    op.drop_index("ix_audit_records_owner_subject_seq", table_name="audit_records")
    op.drop_index(op.f("ix_audit_records_created_at"), table_name="audit_records")
    op.drop_table("audit_records")
    op.drop_table("audit_heads")

"""audit records keyed by their chain: (owner_id, seq) is the primary key, no id, no time index

An append wrote the record's row and four indexes besides the head (the id's, the chain's,
the subject's and the time's; on SQLite the id's is the table itself). The chain's own key,
`(owner_id, seq)`, becomes the primary key, the id it replaces goes, and so does the
`created_at` index: retention walks each chain from its start, the lists filter a time along
the chain. An append now writes the record's row, its key and the subject index.

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-06 19:00:00
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0031"
down_revision: str | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = "owner_id, seq, created_at, kind, actor, subject, facts, prev_hash, hash"
SUBJECT_INDEX = "ix_audit_records_owner_subject_seq"


def upgrade() -> None:
    op.drop_index("ix_audit_records_created_at", table_name="audit_records")
    if op.get_bind().dialect.name == "sqlite":
        _rebuild(keyed_by_chain=True)
        return
    op.drop_constraint("pk_audit_records", "audit_records", type_="primary")
    op.drop_column("audit_records", "id")
    op.drop_constraint("uq_audit_records_owner_id", "audit_records", type_="unique")
    op.create_primary_key("pk_audit_records", "audit_records", ["owner_id", "seq"])


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _rebuild(keyed_by_chain=False)
    else:
        op.drop_constraint("pk_audit_records", "audit_records", type_="primary")
        op.create_unique_constraint(
            "uq_audit_records_owner_id", "audit_records", ["owner_id", "seq"]
        )
        op.add_column("audit_records", sa.Column("id", sa.BigInteger(), sa.Identity()))
        op.create_primary_key("pk_audit_records", "audit_records", ["id"])
    op.create_index("ix_audit_records_created_at", "audit_records", ["created_at"])


def _rebuild(keyed_by_chain: bool) -> None:
    """SQLite: the table made anew (its key can't be changed in place), its rows copied in
    chain order."""
    op.create_table("audit_records_new", *_columns(keyed_by_chain))
    op.execute(
        f"INSERT INTO audit_records_new ({COLUMNS}) "
        f"SELECT {COLUMNS} FROM audit_records ORDER BY owner_id, seq"
    )
    op.drop_index(SUBJECT_INDEX, table_name="audit_records")
    op.drop_table("audit_records")
    op.rename_table("audit_records_new", "audit_records")
    op.create_index(SUBJECT_INDEX, "audit_records", ["owner_id", "subject", "seq"])


def _columns(keyed_by_chain: bool) -> list[Any]:
    chain = [
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
            ["owner_id"], ["owners.id"], name="fk_audit_records_owner_id_owners", ondelete="CASCADE"
        ),
    ]
    if keyed_by_chain:
        return [*chain, sa.PrimaryKeyConstraint("owner_id", "seq", name="pk_audit_records")]
    return [
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        *chain,
        sa.PrimaryKeyConstraint("id", name="pk_audit_records"),
        sa.UniqueConstraint("owner_id", "seq", name="uq_audit_records_owner_id"),
    ]

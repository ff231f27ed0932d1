"""signed skills: the SSH keys an owner trusts, a skill's signature, and the owner's switch
that holds what no trusted key signed

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-06 16:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "trusted_keys",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("key_type", sa.String(length=64), nullable=False),
        sa.Column("public_key", sa.Text(), nullable=False),
        sa.Column("fingerprint", sa.String(length=100), nullable=False),
        sa.Column("bits", sa.Integer(), nullable=False),
        sa.Column("comment", sa.String(length=200), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["owner_id"],
            ["owners.id"],
            name=op.f("fk_trusted_keys_owner_id_owners"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_trusted_keys")),
        sa.UniqueConstraint("owner_id", "name", name=op.f("uq_trusted_keys_owner_id")),
        sa.UniqueConstraint("owner_id", "fingerprint", name="uq_trusted_keys_owner_fingerprint"),
    )
    with op.batch_alter_table("owners", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("require_signature", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
    with op.batch_alter_table("skills", schema=None) as batch_op:
        batch_op.add_column(sa.Column("signature", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("signer_fingerprint", sa.String(length=100), nullable=True))
        batch_op.add_column(sa.Column("signed_by", sa.String(length=64), nullable=True))
        batch_op.add_column(
            sa.Column("signature_hold", sa.Boolean(), server_default=sa.false(), nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("skills", schema=None) as batch_op:
        batch_op.drop_column("signature_hold")
        batch_op.drop_column("signed_by")
        batch_op.drop_column("signer_fingerprint")
        batch_op.drop_column("signature")
    with op.batch_alter_table("owners", schema=None) as batch_op:
        batch_op.drop_column("require_signature")
    op.drop_table("trusted_keys")

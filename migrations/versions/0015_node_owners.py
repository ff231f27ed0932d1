"""node owners: a node is offered only to the owners the operator named

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06 08:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "node_owners",
        sa.Column("node_name", sa.String(length=64), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["node_name"], ["nodes.name"], name=op.f("fk_node_owners_node_name_nodes"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["owner_id"], ["owners.id"], name=op.f("fk_node_owners_owner_id_owners"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("node_name", "owner_id", name=op.f("pk_node_owners")),
    )  # fmt: skip
    with op.batch_alter_table("node_owners", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_node_owners_owner_id"), ["owner_id"], unique=False)
    # A deployment with one owner keeps its nodes; with several, the operator names each
    # node's owners (`skillfleet nodes share`): no owner's code starts on another's node.
    op.execute(
        "INSERT INTO node_owners (node_name, owner_id, created_at) "
        "SELECT nodes.name, owners.id, nodes.created_at FROM nodes, owners "
        "WHERE (SELECT COUNT(*) FROM owners) = 1"
    )


def downgrade() -> None:
    with op.batch_alter_table("node_owners", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_node_owners_owner_id"))
    op.drop_table("node_owners")

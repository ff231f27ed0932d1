"""model sources: several OpenAI-compatible sources per owner, the default picks one

The owner's one model setting (base_url, name, sealed api_key) becomes a source named
`default` of kind `openai`, and the setting names it; the setting gains reasoning_effort and
context, and jobs gain the same choice.

Revision ID: 0026
Revises: 0024
Create Date: 2026-12-06 16:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0026"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DEFAULT = "default"

# Each existing setting's endpoint and key become its owner's `default` source.
TO_SOURCES = (
    "INSERT INTO model_sources "
    "(owner_id, name, kind, base_url, api_key, virtual_key, created_at, updated_at) "
    f"SELECT owner_id, '{DEFAULT}', 'openai', base_url, api_key, :no, updated_at, updated_at "
    "FROM model_settings"
)
# Downgrade: the setting takes back the endpoint and key of the source it names.
FROM_SOURCES = (
    "UPDATE model_settings SET "
    "base_url = (SELECT s.base_url FROM model_sources s "
    "WHERE s.owner_id = model_settings.owner_id AND s.name = model_settings.source), "
    "api_key = (SELECT s.api_key FROM model_sources s "
    "WHERE s.owner_id = model_settings.owner_id AND s.name = model_settings.source)"
)


def upgrade() -> None:
    op.create_table(
        "model_sources",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("base_url", sa.String(length=500), nullable=False),
        sa.Column("api_key", sa.Text(), nullable=True),
        sa.Column("virtual_key", sa.Boolean(), nullable=False),
        sa.Column("minted_key", sa.Text(), nullable=True),
        sa.Column("reasoning_effort", sa.Boolean(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["owner_id"],
            ["owners.id"],
            name=op.f("fk_model_sources_owner_id_owners"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_sources")),
        sa.UniqueConstraint("owner_id", "name", name=op.f("uq_model_sources_owner_id")),
    )
    op.get_bind().execute(sa.text(TO_SOURCES), {"no": False})
    with op.batch_alter_table("model_settings", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("source", sa.String(length=64), nullable=False, server_default=DEFAULT)
        )
        batch_op.add_column(sa.Column("reasoning_effort", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("context", sa.String(length=16), nullable=True))
        batch_op.drop_column("base_url")
        batch_op.drop_column("api_key")
    with op.batch_alter_table("model_settings", schema=None) as batch_op:
        batch_op.alter_column("source", server_default=None)
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("model_source", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("model", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("reasoning_effort", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("context", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("context")
        batch_op.drop_column("reasoning_effort")
        batch_op.drop_column("model")
        batch_op.drop_column("model_source")
    with op.batch_alter_table("model_settings", schema=None) as batch_op:
        batch_op.add_column(sa.Column("base_url", sa.String(length=500), nullable=True))
        batch_op.add_column(sa.Column("api_key", sa.Text(), nullable=True))
    op.execute(FROM_SOURCES)
    # A setting whose source is gone has no endpoint to take back: it goes with the sources.
    op.execute("DELETE FROM model_settings WHERE base_url IS NULL")
    with op.batch_alter_table("model_settings", schema=None) as batch_op:
        batch_op.alter_column("base_url", existing_type=sa.String(length=500), nullable=False)
        batch_op.drop_column("context")
        batch_op.drop_column("reasoning_effort")
        batch_op.drop_column("source")
    op.drop_table("model_sources")

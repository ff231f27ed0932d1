"""owned skills, full-hash grant keys and atomic turn counts

Skills belong to one owner (names unique per owner); shared skills (built-ins, configured
paths) have none. Existing owned skills stay with the bootstrap owner. Skill grant keys hold
the full content hash. Turn counts let the call limit per turn be admitted atomically.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 00:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BOOTSTRAP_OWNER = "owner"
SHARED_SOURCES = ("builtin", "path")
COLUMNS = (
    "name, source, origin, location, owner_id, author, enabled, hash, revision, description, "
    "execution, tier, file_count, size_bytes, locked, created_at, updated_at"
)


def _skills_table(name: str) -> None:
    op.create_table(
        name,
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("origin", sa.Text(), nullable=True),
        sa.Column("location", sa.Text(), nullable=True),
        sa.Column("owner_id", sa.Integer(), nullable=True),
        sa.Column("author", sa.String(length=16), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("execution", sa.String(length=16), nullable=False),
        sa.Column("tier", sa.String(length=16), nullable=False),
        sa.Column("file_count", sa.Integer(), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("locked", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["owner_id"], ["owners.id"], name=op.f("fk_skills_owner_id_owners"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_skills")),
        sa.UniqueConstraint("owner_id", "name", name=op.f("uq_skills_owner_id")),
    )
    op.create_index(op.f("ix_skills_name"), name, ["name"], unique=False)


def upgrade() -> None:
    bind = op.get_bind()
    shared = ", ".join(f"'{s}'" for s in SHARED_SOURCES)
    orphans = bind.execute(
        sa.text(f"SELECT count(*) FROM skills WHERE owner_id IS NULL AND source NOT IN ({shared})")
    ).scalar_one()
    if orphans:
        owner = bind.execute(
            sa.text("SELECT id FROM owners WHERE name = :name"), {"name": BOOTSTRAP_OWNER}
        ).scalar_one_or_none()
        if owner is None:
            bind.execute(
                sa.text("INSERT INTO owners (name, created_at) VALUES (:name, CURRENT_TIMESTAMP)"),
                {"name": BOOTSTRAP_OWNER},
            )
            owner = bind.execute(
                sa.text("SELECT id FROM owners WHERE name = :name"), {"name": BOOTSTRAP_OWNER}
            ).scalar_one()
        bind.execute(
            sa.text(
                f"UPDATE skills SET owner_id = :owner "
                f"WHERE owner_id IS NULL AND source NOT IN ({shared})"
            ),
            {"owner": owner},
        )
    bind.execute(sa.text(f"UPDATE skills SET owner_id = NULL WHERE source IN ({shared})"))
    with op.batch_alter_table("skills") as batch:
        batch.drop_constraint("fk_skills_owner_id_owners", type_="foreignkey")
    op.rename_table("skills", "skills_old")
    if bind.dialect.name == "postgresql":
        op.execute("ALTER TABLE skills_old DROP CONSTRAINT pk_skills")
    _skills_table("skills")
    op.execute(f"INSERT INTO skills ({COLUMNS}) SELECT {COLUMNS} FROM skills_old ORDER BY name")
    op.drop_table("skills_old")
    _full_hash_grants(bind)
    op.create_table(
        "turn_counts",
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("turn", sa.String(length=240), nullable=False),
        sa.Column("calls", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["owner_id"],
            ["owners.id"],
            name=op.f("fk_turn_counts_owner_id_owners"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("owner_id", "turn", name=op.f("pk_turn_counts")),
    )
    op.create_index(op.f("ix_turn_counts_created_at"), "turn_counts", ["created_at"], unique=False)


def _full_hash_grants(bind: sa.Connection) -> None:
    """`skill:<name>@<hash8>` grants become `@<full hash>` of the owner's skill, or go."""
    grants = bind.execute(
        sa.text("SELECT id, owner_id, key FROM grants WHERE key LIKE 'skill:%'")
    ).all()
    for grant_id, owner_id, key in grants:
        name, _, prefix = key.removeprefix("skill:").partition("@")
        if len(prefix) == 64:
            continue
        full = bind.execute(
            sa.text(
                "SELECT hash FROM skills WHERE name = :name "
                "AND (owner_id = :owner OR owner_id IS NULL)"
            ),
            {"name": name, "owner": owner_id},
        ).scalar_one_or_none()
        if full is not None and full.startswith(prefix):
            bind.execute(
                sa.text("UPDATE grants SET key = :key WHERE id = :id"),
                {"key": f"skill:{name}@{full}", "id": grant_id},
            )
        else:
            bind.execute(sa.text("DELETE FROM grants WHERE id = :id"), {"id": grant_id})


def downgrade() -> None:
    op.drop_index(op.f("ix_turn_counts_created_at"), table_name="turn_counts")
    op.drop_table("turn_counts")
    bind = op.get_bind()
    op.drop_index(op.f("ix_skills_name"), table_name="skills")
    op.rename_table("skills", "skills_new")
    if bind.dialect.name == "postgresql":
        op.execute("ALTER TABLE skills_new DROP CONSTRAINT pk_skills")
        op.execute("ALTER TABLE skills_new DROP CONSTRAINT uq_skills_owner_id")
        op.execute("ALTER TABLE skills_new DROP CONSTRAINT fk_skills_owner_id_owners")
    op.create_table(
        "skills",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("origin", sa.Text(), nullable=True),
        sa.Column("location", sa.Text(), nullable=True),
        sa.Column("owner_id", sa.Integer(), nullable=True),
        sa.Column("author", sa.String(length=16), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("execution", sa.String(length=16), nullable=False),
        sa.Column("tier", sa.String(length=16), nullable=False),
        sa.Column("file_count", sa.Integer(), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("locked", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["owner_id"], ["owners.id"], name=op.f("fk_skills_owner_id_owners"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_skills")),
    )
    # One skill per name again: the oldest of same-named skills is kept.
    op.execute(
        f"INSERT INTO skills ({COLUMNS}) SELECT {COLUMNS} FROM skills_new s "
        "WHERE s.id = (SELECT min(id) FROM skills_new t WHERE t.name = s.name)"
    )
    op.drop_table("skills_new")

"""questions and owner secrets: ask_owner's and request_secret's waits, secrets at rest

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05 09:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CALL_STATES_BEFORE = (
    "deciding", "pending_approval", "running", "done", "denied", "failed", "expired",
)  # fmt: skip
CALL_STATES = (*CALL_STATES_BEFORE, "pending_question")
QUESTION_STATES = ("pending", "answering", "answered", "unanswered", "cancelled")


def _listed(states: Sequence[str]) -> str:
    return "status IN (" + ", ".join(f"'{state}'" for state in states) + ")"


def _call_states(states: Sequence[str]) -> None:
    with op.batch_alter_table("tool_calls", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_tool_calls_status"), type_="check")
        batch_op.create_check_constraint(op.f("ck_tool_calls_status"), _listed(states))


def upgrade() -> None:
    _call_states(CALL_STATES)
    op.create_table(
        "questions",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("call_id", sa.String(length=36), nullable=False),
        sa.Column("chat_id", sa.Integer(), nullable=True),
        sa.Column("job_run_id", sa.String(length=64), nullable=True),
        sa.Column("turn_id", sa.String(length=200), nullable=True),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("choices", sa.JSON(), nullable=True),
        sa.Column("secret_name", sa.String(length=64), nullable=True),
        sa.Column("skill_name", sa.String(length=64), nullable=True),
        sa.Column("answer", sa.Text(), nullable=True),
        sa.Column("status", sa.String(length=24), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("answered_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(_listed(QUESTION_STATES), name=op.f("ck_questions_status")),
        sa.ForeignKeyConstraint(
            ["owner_id"], ["owners.id"], name=op.f("fk_questions_owner_id_owners"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["call_id"], ["tool_calls.id"], name=op.f("fk_questions_call_id_tool_calls"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["chat_id"], ["chats.id"], name=op.f("fk_questions_chat_id_chats"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_questions")),
    )  # fmt: skip
    op.create_index(op.f("ix_questions_owner_id"), "questions", ["owner_id"], unique=False)
    op.create_index(op.f("ix_questions_status"), "questions", ["status"], unique=False)
    op.create_table(
        "owner_secrets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("skill_name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["owner_id"], ["owners.id"], name=op.f("fk_owner_secrets_owner_id_owners"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_owner_secrets")),
        sa.UniqueConstraint(
            "owner_id", "skill_name", "name", name=op.f("uq_owner_secrets_owner_id")
        ),
    )  # fmt: skip
    op.create_index(op.f("ix_owner_secrets_owner_id"), "owner_secrets", ["owner_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_owner_secrets_owner_id"), table_name="owner_secrets")
    op.drop_table("owner_secrets")
    op.drop_index(op.f("ix_questions_status"), table_name="questions")
    op.drop_index(op.f("ix_questions_owner_id"), table_name="questions")
    op.drop_table("questions")
    op.execute("UPDATE tool_calls SET status = 'expired' WHERE status = 'pending_question'")
    _call_states(CALL_STATES_BEFORE)

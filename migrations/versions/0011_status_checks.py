"""status checks: every status column holds only the states of its machine

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05 04:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The states of each machine as of this revision (store/states.py holds today's); every value
# ever written is among them, so existing rows stay valid.
STATES = {
    "tool_calls": (
        "deciding", "pending_approval", "running", "done", "denied", "failed", "expired",
    ),
    "runs": (
        "queued", "running", "succeeded", "failed", "timed_out", "cancelled", "interrupted",
    ),
    "job_runs": (
        "queued", "running", "waiting", "succeeded", "failed", "unanswered", "skipped",
        "interrupted",
    ),
    "turns": (
        "queued", "running", "succeeded", "failed", "stopped", "timed_out", "interrupted",
    ),
    "approvals": (
        "pending", "answering", "approved", "approved_for_chat", "denied", "expired", "stale",
    ),
    "edit_plans": ("pending", "applied", "denied", "stale", "failed", "expired"),
}  # fmt: skip


def upgrade() -> None:
    for table, states in STATES.items():
        listed = ", ".join(f"'{state}'" for state in states)
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.create_check_constraint(op.f(f"ck_{table}_status"), f"status IN ({listed})")


def downgrade() -> None:
    for table in STATES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_constraint(op.f(f"ck_{table}_status"), type_="check")

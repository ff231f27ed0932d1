"""`skillfleet approvals …`: list and answer the calls waiting for the owner."""

from __future__ import annotations

import click

from skillfleet.cli_skills import call_api, table
from store.states import ApprovalStatus


@click.group()
def approvals() -> None:
    """Calls waiting for the owner's answer."""


@approvals.command("list")
@click.option("--all", "show_all", is_flag=True, help="Include answered and expired ones.")
def list_cmd(show_all: bool) -> None:
    """List pending approvals (or all with --all)."""
    params = {} if show_all else {"status": str(ApprovalStatus.PENDING)}
    rows = call_api("GET", "/api/approvals", params=params)
    for row in rows:
        row["skill"] = f"{row['skill_name']}@{row['skill_hash'][:8]}" if row["skill_name"] else "-"
    columns = [
        ("id", "ID"),
        ("status", "STATUS"),
        ("tool", "TOOL"),
        ("tier", "TIER"),
        ("skill", "SKILL"),
        ("node", "NODE"),
        ("asked_by", "ASKED BY"),
        ("warning", "WARNING"),
    ]
    click.echo(table(rows, columns))


def _answer(approval_id: str, decision: str) -> None:
    result = call_api("POST", f"/api/approvals/{approval_id}", json={"decision": decision})
    said = f"{result['id']}: {result['status']}"
    if result["status"] == ApprovalStatus.APPROVED_FOR_CHAT and result.get("grant_scope") == "job":
        said += " (the grant went to the job)"  # a job's "always" is stored as the chat's is
    click.echo(said)


@approvals.command("approve")
@click.argument("approval_id")
@click.option("--for-chat", is_flag=True, help="Also allow this exact grant for the whole chat.")
@click.option(
    "--for-job",
    is_flag=True,
    help="A job's approval: also grant it to the job, so its later runs don't ask.",
)
def approve(approval_id: str, for_chat: bool, for_job: bool) -> None:
    """Approve one call (and, with --for-chat or --for-job, its grant for the chat or job)."""
    if for_chat and for_job:
        raise click.UsageError("Give --for-chat or --for-job, not both.")
    decision = "approve_for_job" if for_job else "approve_for_chat" if for_chat else "approve"
    _answer(approval_id, decision)


@approvals.command("deny")
@click.argument("approval_id")
def deny(approval_id: str) -> None:
    """Decline one call."""
    _answer(approval_id, "deny")

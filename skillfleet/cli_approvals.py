"""`skillfleet approvals …`: list and answer the calls waiting for the owner."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import click

from skillfleet.cli_skills import call_api, call_list, full_id, shown, table
from skillfleet.shortids import APPROVAL
from store.states import ApprovalStatus


@click.group()
def approvals() -> None:
    """Calls waiting for the owner's answer."""


@approvals.command("list")
@click.option("--all", "show_all", is_flag=True, help="Include answered and expired ones.")
@click.option(
    "--limit", default=100, show_default=True, type=click.IntRange(min=1),
    help="At most this many, newest first",
)  # fmt: skip
def list_cmd(show_all: bool, limit: int) -> None:
    """List pending approvals (or all with --all), newest first."""
    params = {} if show_all else {"status": str(ApprovalStatus.PENDING)}
    rows = call_list("/api/approvals", params, limit)
    for row in rows:
        row["skill"] = _skill(row)
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


def _skill(row: dict[str, Any]) -> str:
    """The skill asked about at its version, and whether it changed since it was asked:
    `wiper@1a2b3c4d`, `wiper@1a2b3c4d (CHANGED: now 5e6f7a8b)`."""
    if not row["skill_name"]:
        return "-"
    asked = f"{row['skill_name']}@{row['skill_hash'][:8]}"
    if not row.get("skill_changed"):
        return asked
    now = row.get("skill_hash_now")
    return f"{asked} (CHANGED: {'now ' + now[:8] if now else 'removed'})"


@approvals.command("show")
@click.argument("approval_id")
def show(approval_id: str) -> None:
    """Show one approval in full: its warning, the exact arguments and any diff."""
    approval_id = full_id(APPROVAL, approval_id)
    row = call_api("GET", f"/api/approvals/{quote(approval_id, safe='')}")
    for key, value in (
        ("id", row["id"]),
        ("status", row["status"]),
        ("tool", f"{row['tool']} ({row['tier']})"),
        ("skill", _skill(row)),
        ("node", row["node"]),
        ("asked by", row["asked_by"]),
        ("expires", row["expires_at"]),
    ):
        click.echo(f"{key + ':':<10}{shown(value)}")
    if row.get("skill_change"):
        click.echo(shown(row["skill_change"]))
    click.echo(f"warning:\n{shown(row['warning'])}")
    click.echo(f"arguments:\n{shown(row['arguments_shown'])}")
    if row.get("diff"):
        click.echo(f"changes:\n{shown(row['diff'])}")


def _answer(approval_id: str, decision: str, reason: str | None = None) -> None:
    approval_id = full_id(APPROVAL, approval_id)
    body = {"decision": decision, **({"reason": reason} if reason else {})}
    result = call_api("POST", f"/api/approvals/{approval_id}", json=body)
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
@click.option("--reason", help="Why, in words the agent that asked is told.")
def deny(approval_id: str, reason: str | None) -> None:
    """Decline one call."""
    _answer(approval_id, "deny", reason)

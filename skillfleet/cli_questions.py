"""`skillfleet questions …`: list and answer what agents asked the owner (ask_owner), and give
the secrets they asked for (request_secret) without echoing them."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import click

from skillfleet.cli_skills import call_api, call_list, full_id, shown, table
from skillfleet.shortids import QUESTION

PENDING = "pending"


@click.group()
def questions() -> None:
    """Questions agents wait on, and secrets they asked for."""


@questions.command("list")
@click.option("--all", "show_all", is_flag=True, help="Include answered and ended ones.")
@click.option(
    "--limit", default=100, show_default=True, type=click.IntRange(min=1),
    help="At most this many, newest first",
)  # fmt: skip
def list_cmd(show_all: bool, limit: int) -> None:
    """List pending questions (or all with --all), newest first."""
    params = {} if show_all else {"status": PENDING}
    rows = call_list("/api/questions", params, limit)
    for row in rows:
        row["asks"] = _asks(row)
        row["choices"] = " | ".join(row["choices"] or []) or "-"
        row["skill"] = _version(row) if row.get("skill_name") else "-"
    columns = [
        ("id", "ID"),
        ("status", "STATUS"),
        ("kind", "KIND"),
        ("skill", "SKILL"),
        ("asks", "ASKS"),
        ("choices", "CHOICES"),
    ]
    click.echo(table(rows, columns))


def _asks(row: dict[str, Any]) -> str:
    if row["kind"] != "secret":
        return str(row["text"])
    return f"secret {row['secret_name']}: {row['text']}"


def _version(row: dict[str, Any]) -> str:
    """The skill a secret question asked about, at the version asked about, and whether it
    changed since: `helper@1a2b3c4d`, `helper@1a2b3c4d (CHANGED: now 5e6f7a8b)`."""
    asked = f"{row['skill_name']}@{(row.get('skill_hash') or '?')[:8]}"
    if not row.get("skill_changed"):
        return asked
    now = row.get("skill_hash_now")
    return f"{asked} (CHANGED: {'now ' + now[:8] if now else 'removed'})"


@questions.command("show")
@click.argument("question_id")
def show(question_id: str) -> None:
    """Show one question in full, and for a secret the skill version it allows."""
    question_id = full_id(QUESTION, question_id)
    row = call_api("GET", f"/api/questions/{quote(question_id, safe='')}")
    lines = [("id", row["id"]), ("status", row["status"]), ("kind", row["kind"])]
    if row["kind"] == "secret":
        lines.append(("secret", row["secret_name"]))
        if row.get("skill_name"):
            lines.append(("skill", _version(row)))
    lines.append(("asks" if row["kind"] != "secret" else "reason", row["text"]))
    if row.get("choices"):
        lines.append(("choices", " | ".join(row["choices"])))
    lines += [("expires", row["expires_at"]), ("answer", row.get("answer"))]
    for key, value in lines:
        click.echo(f"{key + ':':<9}{shown(value)}")
    if row.get("skill_change"):
        click.echo(shown(row["skill_change"]))


@questions.command("answer")
@click.argument("question_id")
@click.argument("answer", required=False)
@click.option(
    "--secret",
    is_flag=True,
    help="A secret question: type the secret at the prompt (it is not echoed).",
)
@click.option(
    "--skill-hash",
    help="A secret for a skill: the version you allow (its hash or first 8 characters); "
    "left out, the version the question asked about.",
)
def answer(question_id: str, answer: str | None, secret: bool, skill_hash: str | None) -> None:
    """Answer a question; with --secret, type the secret it asks for instead."""
    if skill_hash is not None and not secret:
        raise click.UsageError("--skill-hash goes with --secret: it names the version allowed.")
    if secret:
        if answer is not None:
            raise click.UsageError(
                "With --secret, type the secret at the prompt: given as an argument it would "
                "stay in your shell's history."
            )
        value = click.prompt("Secret", hide_input=True, confirmation_prompt=False)
        body = {"secret": value}
        if skill_hash is not None:
            body["skill_hash"] = skill_hash
    else:
        if answer is None:
            raise click.UsageError("Give the answer, or --secret to type a secret.")
        body = {"answer": answer}
    question_id = full_id(QUESTION, question_id)
    result = call_api("POST", f"/api/questions/{quote(question_id, safe='')}", json=body)
    click.echo(f"{result['id']}: {result['status']}")

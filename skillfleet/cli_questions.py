"""`skillfleet questions …`: list and answer what agents asked the owner (ask_owner), and give
the secrets they asked for (request_secret) without echoing them."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import click

from skillfleet.cli_skills import call_api, table

PENDING = "pending"


@click.group()
def questions() -> None:
    """Questions agents wait on, and secrets they asked for."""


@questions.command("list")
@click.option("--all", "show_all", is_flag=True, help="Include answered and ended ones.")
def list_cmd(show_all: bool) -> None:
    """List pending questions (or all with --all)."""
    params = {} if show_all else {"status": PENDING}
    rows = call_api("GET", "/api/questions", params=params)
    for row in rows:
        row["asks"] = _asks(row)
        row["choices"] = " | ".join(row["choices"] or []) or "-"
    columns = [
        ("id", "ID"),
        ("status", "STATUS"),
        ("kind", "KIND"),
        ("asks", "ASKS"),
        ("choices", "CHOICES"),
    ]
    click.echo(table(rows, columns))


def _asks(row: dict[str, Any]) -> str:
    if row["kind"] != "secret":
        return str(row["text"])
    owner = f" of skill {row['skill_name']}" if row.get("skill_name") else ""
    return f"secret {row['secret_name']}{owner}: {row['text']}"


@questions.command("answer")
@click.argument("question_id")
@click.argument("answer", required=False)
@click.option(
    "--secret",
    is_flag=True,
    help="A secret question: type the secret at the prompt (it is not echoed).",
)
def answer(question_id: str, answer: str | None, secret: bool) -> None:
    """Answer a question; with --secret, type the secret it asks for instead."""
    if secret:
        if answer is not None:
            raise click.UsageError(
                "With --secret, type the secret at the prompt: given as an argument it would "
                "stay in your shell's history."
            )
        value = click.prompt("Secret", hide_input=True, confirmation_prompt=False)
        body = {"secret": value}
    else:
        if answer is None:
            raise click.UsageError("Give the answer, or --secret to type a secret.")
        body = {"answer": answer}
    result = call_api("POST", f"/api/questions/{quote(question_id, safe='')}", json=body)
    click.echo(f"{result['id']}: {result['status']}")

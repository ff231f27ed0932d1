"""`skillfleet models …`: the owner's model sources, the models each lists, and the default
model turns run on (docs/turns.md)."""

from __future__ import annotations

import getpass
import sys
from typing import Any
from urllib.parse import quote

import click

from skillfleet.cli_skills import call_api, table

EFFORTS = ("none", "minimal", "low", "medium", "high")
TIERS = ("small", "medium", "large")


@click.group()
def models() -> None:
    """Model sources (OpenAI-compatible endpoints, LiteLLM) and the default model."""


@models.group()
def sources() -> None:
    """The OpenAI-compatible endpoints your turns may run on."""


@sources.command("list")
def sources_list() -> None:
    """List your sources (never a key)."""
    rows = call_api("GET", "/api/model-sources")
    columns = [("name", "NAME"), ("kind", "KIND"), ("base_url", "BASE URL"),
               ("api_key_set", "KEY"), ("virtual_key", "VIRTUAL KEY")]  # fmt: skip
    click.echo(table(rows, columns))


@sources.command("add")
@click.argument("name")
@click.argument("base_url", required=False)
@click.option("--kind", type=click.Choice(["openai", "litellm"]), default="openai",
              show_default=True, help="litellm: a LiteLLM proxy")  # fmt: skip
@click.option("--key", "ask_key", is_flag=True,
              help="Read an API key (at a prompt that does not echo, or from stdin)")  # fmt: skip
@click.option("--virtual-key", is_flag=True,
              help="litellm: mint a key for you with the operator's master key")  # fmt: skip
@click.option("--reasoning-effort/--no-reasoning-effort", "takes_effort", default=None,
              help="Requests carry reasoning_effort  [default: by the model's name]")  # fmt: skip
def sources_add(
    name: str,
    base_url: str | None,
    kind: str,
    ask_key: bool,
    virtual_key: bool,
    takes_effort: bool | None,
) -> None:
    """Add source NAME at BASE_URL (e.g. https://api.openai.com/v1), or replace yours of that
    name; a key already kept stays unless --key gives another."""
    body: dict[str, Any] = {
        "name": name, "kind": kind, "base_url": base_url, "virtual_key": virtual_key,
        "takes_reasoning_effort": takes_effort,
    }  # fmt: skip
    if ask_key:
        body["api_key"] = _read_key(name)
    shown = call_api("POST", "/api/model-sources", json=body)
    key = "a key kept" if shown["api_key_set"] else "no key"
    if shown["virtual_key"]:
        key = "a virtual key minted when first used"
    click.echo(f"{shown['name']} ({shown['kind']}) at {shown['base_url']}, {key}.")


@sources.command("remove")
@click.argument("name")
def sources_remove(name: str) -> None:
    """Delete source NAME and its keys (refused while your default or a job uses it)."""
    call_api("DELETE", f"/api/model-sources/{quote(name, safe='')}")
    click.echo(f"{name} is removed.")


@models.command("list")
@click.argument("source")
def list_cmd(source: str) -> None:
    """List the models SOURCE serves, or say why it can't (exit 1)."""
    found = call_api("GET", f"/api/model-sources/{quote(source, safe='')}/models")
    if found["error"]:
        error = found["error"]
        click.echo(f"Error ({error['code']}): {error['message']}", err=True)
        sys.exit(1)
    for model in found["models"]:
        click.echo(model)


@models.command("use")
@click.argument("source")
@click.argument("model")
@click.option("--reasoning-effort", type=click.Choice(EFFORTS), default=None,
              help="Sent where the source takes it  [default: none sent]")  # fmt: skip
@click.option("--context", default=None,
              help="small (8k), medium (32k), large (128k) or a number of tokens")  # fmt: skip
def use_cmd(source: str, model: str, reasoning_effort: str | None, context: str | None) -> None:
    """Make MODEL on SOURCE the default model turns run on."""
    tier: str | int | None = context
    if context is not None and context.isdigit():
        tier = int(context)
    elif context is not None and context not in TIERS:
        raise click.BadParameter(
            "small, medium, large or a number of tokens", param_hint="--context"
        )
    body = {"source": source, "model": model, "reasoning_effort": reasoning_effort,
            "context": tier}  # fmt: skip
    call_api("PUT", "/api/settings/model", json=body)
    click.echo(show_default())


@models.command("show")
def show_cmd() -> None:
    """Show the default model."""
    click.echo(show_default())


def show_default() -> str:
    shown = call_api("GET", "/api/settings/model")
    if shown["source"] is None:
        return "No default model: `skillfleet models use SOURCE MODEL`."
    effort = shown["reasoning_effort"] or "not sent"
    context = shown["context"] or "no bound"
    return (
        f"Default model: {shown['model']} on {shown['source']} ({shown['base_url']}); "
        f"reasoning effort {effort}; context {context}."
    )


def _read_key(name: str) -> str:
    if sys.stdin.isatty():
        key = getpass.getpass(f"API key of {name} (not shown): ")
    else:
        key = sys.stdin.read().strip()
    if not key:
        raise click.ClickException("No key was given; nothing was stored.")
    return key

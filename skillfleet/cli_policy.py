"""`skillfleet policy …`: check a policy file, and explain which rule decides a call."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from broker.errors import PolicyError, UnknownTool
from broker.policy import CallFacts, Policy, load_builtin_policy
from skillfleet.cli_settings import load_settings


@click.group()
def policy() -> None:
    """The broker policy."""


@policy.command("check")
@click.argument("file", type=click.Path(path_type=Path))
def check(file: Path) -> None:
    """Validate a policy file: YAML, fields, actions, CEL conditions, unique names."""
    try:
        loaded = Policy.from_file(file)
    except (PolicyError, OSError) as e:
        click.echo(f"Invalid policy: {getattr(e, 'message', e)}", err=True)
        sys.exit(1)
    click.echo(f"Valid policy: {len(loaded.rules)} rules, default {loaded.default_action}.")


@policy.command("explain")
@click.option(
    "--file", "file", type=click.Path(path_type=Path), help="Policy file (default: the one in use)"
)
@click.option("--tool", required=True, help="Tool name, e.g. run_skill_script")
@click.option("--tier", help="Tier (default: the tool's own; needed for run_skill_script)")
@click.option("--mode", type=click.Choice(["execute", "plan"]), default="execute")
@click.option("--in-job", is_flag=True)
@click.option("--granted", is_flag=True, help="A chat or job grant matches the call")
@click.option("--job-granted", is_flag=True)
@click.option("--owner-allowed", is_flag=True)
@click.option("--skill-disabled", is_flag=True)
@click.option("--skill-locked", is_flag=True)
@click.option("--target-is-draft", is_flag=True)
@click.option("--calls-this-turn", type=int, default=1, show_default=True)
def explain(file: Path | None, tool: str, tier: str | None, mode: str, **flags: bool | int) -> None:
    """Show each rule in priority order, whether it matches, and the decision."""
    loaded = _load(file)
    facts = CallFacts(
        tool=tool,
        tier=tier or _tier_of(tool),
        mode=mode,
        in_job=bool(flags["in_job"]),
        granted=bool(flags["granted"]),
        job_granted=bool(flags["job_granted"]),
        owner_allowed=bool(flags["owner_allowed"]),
        skill_enabled=not flags["skill_disabled"],
        skill_locked=bool(flags["skill_locked"]),
        target_is_draft=bool(flags["target_is_draft"]),
        calls_this_turn=int(flags["calls_this_turn"]),
    )
    priorities = {rule.name: rule.priority for rule in loaded.rules}
    decision = loaded.decide(facts)
    for name, matched in loaded.explain(facts):
        marker = "->" if name == decision.rule else ("  match" if matched else "")
        click.echo(f"{priorities[name]:>5}  {name:<40} {marker}")
    rule = decision.rule or f"no rule matched: default_action {loaded.default_action}"
    click.echo(f"\nDecision: {decision.action} ({rule})")


def _load(file: Path | None) -> Policy:
    path = file or load_settings().policy_file
    try:
        return Policy.from_file(path) if path else load_builtin_policy()
    except (PolicyError, OSError) as e:
        raise click.ClickException(f"Invalid policy: {getattr(e, 'message', e)}") from e


def _tier_of(tool: str) -> str:
    # Only `explain` without --tier needs the tools, and they import the whole broker (some
    # 2 s of a command's start): `policy check` never loads them.
    from broker.toolset import build_registry

    try:
        return str(build_registry().get(tool).tier)
    except UnknownTool:
        raise click.ClickException(f"Unknown tool '{tool}'; pass --tier to describe it.") from None

"""`skillfleet env build`: a node's standard environment, built ahead of its worker."""

from __future__ import annotations

import click

from skillfleet.cli_settings import load_settings


@click.group("env")
def env() -> None:
    """The standard environment skills' scripts get on this node."""


@env.command("build")
def build() -> None:
    """Build the standard environment where `skillfleet worker node` looks for it (its start
    then finds it ready); nothing to do when it is built already."""
    from workers.runners.environments import StandardEnvironment, default_env_dir

    settings = load_settings()
    if not settings.standard_env:
        raise click.ClickException("SKILLFLEET_STANDARD_ENV is off: nodes build none.")
    standard = StandardEnvironment(settings.env_dir or default_env_dir(), settings.package_index)
    standard.build()
    if standard.folder is None:
        raise click.ClickException(standard.note() or "The standard environment was not built.")
    click.echo(f"The standard environment is ready in {standard.folder}.")

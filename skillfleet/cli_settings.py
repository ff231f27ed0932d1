"""The settings a command runs with: read from the environment, a bad value a click error."""

from __future__ import annotations

import click

from store.settings import Settings, SettingsError


def load_settings() -> Settings:
    try:
        return Settings.from_env()
    except SettingsError as e:
        raise click.ClickException(str(e)) from e

"""Apply and inspect Alembic migrations from code (`skillfleet db upgrade`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

import migrations
from store.db import make_engine
from store.models import Base

SCRIPT_LOCATION = Path(migrations.__file__).parent


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(SCRIPT_LOCATION))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at `url` to `revision`."""
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    """Undo migrations until the database at `url` is at `revision`."""
    command.downgrade(alembic_config(url), revision)


def current(url: str) -> str | None:
    """The revision the database at `url` is at; None before the first migration."""
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


def history() -> list[tuple[str, str]]:
    """Every migration (revision, message), newest first."""
    scripts = ScriptDirectory.from_config(alembic_config("sqlite://"))
    return [(s.revision, s.doc or "") for s in scripts.walk_revisions()]


def drift(engine: Engine) -> list[Any]:
    """Differences between the models and the migrated database (empty when in step)."""
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        return list(compare_metadata(context, Base.metadata))

"""Alembic migrations: the only source of skillfleet's schema."""

"""The skill store: skill folders, validation, hashes, packages and the database."""

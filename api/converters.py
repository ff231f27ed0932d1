"""Path segments whose rules the OpenAPI document states: a secret's name, a skill file's path.

Each converter matches what werkzeug's `path` converter matches, so every such URL still reaches
its view, which refuses a name or path that breaks the rules with its own code (422
`invalid_secret_name`, 400 `invalid_resource_path`); the document gives the rules as a
pattern, so a client knows them before it asks.
"""

from __future__ import annotations

from typing import Any

from flask import Flask
from flask_smorest import Api
from werkzeug.routing import PathConverter

from store.resources import RELATIVE_PATH_PATTERN
from store.validation import SECRET_NAME


class SecretName(PathConverter):
    """A secret's name: an environment variable's (store/validation.py)."""

    pattern = f"^{SECRET_NAME.pattern}$"


class SkillFilePath(PathConverter):
    """A file's path inside a skill, confined as store/resources.py confines it."""

    pattern = RELATIVE_PATH_PATTERN


CONVERTERS: dict[str, type[SecretName | SkillFilePath]] = {
    "secret_name": SecretName,
    "skill_file": SkillFilePath,
}


def install_converters(app: Flask, api: Api) -> None:
    """Make the converters usable in routes and documented; before any blueprint is registered."""
    for name, converter in CONVERTERS.items():
        app.url_map.converters[name] = converter
        api.register_converter(converter, _parameter_schema)


def _parameter_schema(converter: SecretName | SkillFilePath) -> dict[str, Any]:
    return {"type": "string", "pattern": converter.pattern}

"""The REST API's app factory: a Flask app with flask-smorest blueprints, one per resource."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import swagger_ui_bundle
from flask import Flask, send_from_directory
from werkzeug.wrappers import Response

from api.auth import install_auth
from api.blueprint import register_components
from api.bodies import install_body_checks
from api.console import install_console
from api.converters import install_converters
from api.cors import install_cors
from api.errors import SkillfleetApi, register_error_handlers
from api.headers import install_headers
from api.jsonprovider import JSONProvider
from api.mcp.document import document_mcp
from api.methods import install_method_check
from api.oauth.consent import install_consent
from api.services import Services
from store import tracing
from store.logs import configure_logging
from store.settings import Settings

if TYPE_CHECKING:
    from apispec import APISpec

SWAGGER_DIR = Path(swagger_ui_bundle.swagger_ui_path)
# The API's document (OpenAPI) is the same for every app a process makes, whatever its
# settings: the first app documents every view, the next ones take its document. Documenting
# the views cost more than the rest of making an app (a test makes an app of its own).
_document: APISpec | None = None


def create_app(settings: Settings | None = None, services: Services | None = None) -> Flask:
    """Build the API for `settings` (read from the environment when not given)."""
    settings = settings or (services.settings if services else Settings.from_env())
    configure_logging(settings.log_level, settings.log_format)
    tracing.start(settings, "skillfleet-api")
    services = services or Services.build(settings)
    app = Flask("skillfleet")
    tracing.instrument_app(app)  # first: its request span is open for every hook after it
    app.config.update(_flask_config())
    # Bodies keep the order the code builds them in (sorting a 200-skill list costs each call),
    # written by orjson.
    app.json = JSONProvider(app)
    app.extensions["skillfleet"] = services
    api = SkillfleetApi(app, spec_kwargs=_spec_kwargs())
    api.kept_document = _document
    register_components(api)
    install_converters(app, api)
    register_error_handlers(app)
    install_method_check(app)
    install_body_checks(app)
    install_auth(app)
    install_cors(app, settings.cors_origins)
    install_headers(app)
    _register_blueprints(api)
    _take_or_keep_document(api)
    _serve_swagger_assets(app)
    install_console(app)
    install_consent(app)
    return app


def _flask_config() -> dict[str, Any]:
    return {
        "API_TITLE": "skillfleet",
        "API_VERSION": version("skillfleet"),
        "OPENAPI_VERSION": "3.0.3",
        "OPENAPI_URL_PREFIX": "/api",
        "OPENAPI_JSON_PATH": "openapi.json",
        "OPENAPI_SWAGGER_UI_PATH": "docs",
        "OPENAPI_SWAGGER_UI_URL": "/api/docs/assets/",
        "JSON_SORT_KEYS": False,
    }


def _spec_kwargs() -> dict[str, Any]:
    return {
        "info": {"description": "Agent Skills for LLM agents, run safely across a fleet."},
        "components": {
            "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearerAuth": []}],
    }


def _register_blueprints(api: SkillfleetApi) -> None:
    from api import (
        approvals,
        audit,
        calls,
        chat,
        chats,
        events,
        files,
        health,
        jobs,
        metrics,
        modelsettings,
        modelsources,
        nodes,
        push,
        questions,
        review,
        runs,
        secrets,
        settings,
        signin,
        skills,
        tokens,
        tools,
        toolsettings,
        trustedkeys,
        turns,
        versions,
        webhooks,
    )

    modules = (
        health,
        skills,
        versions,
        tools,
        calls,
        approvals,
        questions,
        chats,
        settings,
        runs,
        files,
        nodes,
        tokens,
        signin,
        review,
        jobs,
        events,
        modelsettings,
        modelsources,
        toolsettings,
        turns,
        chat,
        push,
        webhooks,
        secrets,
        trustedkeys,
        audit,
        metrics,
    )
    for module in modules:
        api.register_blueprint(module.blp)


def _take_or_keep_document(api: SkillfleetApi) -> None:
    """Give `api` the process's document, or finish its own (with /mcp's operations, served
    outside Flask) and keep it as the process's."""
    global _document
    if api.kept_document is not None:
        api.spec = api.kept_document
        return
    document_mcp(api)
    _document = api.spec


def _serve_swagger_assets(app: Flask) -> None:
    """Swagger UI from the installed package, so the docs work without a CDN."""

    @app.get("/api/docs/assets/<path:filename>")
    def swagger_asset(filename: str) -> Response:
        return send_from_directory(SWAGGER_DIR, filename)

"""The owner console: static HTML, CSS and ES modules served at /, using the public REST API.

No build step: the files in static/ are what the browser runs. The console signs in with an
owner token kept in the tab's sessionStorage (pasted, or given by a GitHub sign-in, api/signin.py)
and talks to /api like any other frontend.
"""

from __future__ import annotations

from pathlib import Path

from flask import Blueprint, Flask, send_from_directory
from werkzeug.wrappers import Response

STATIC = Path(__file__).parent / "static"
# Scripts, styles and connections from this origin only; nothing may frame the console.
POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
CACHE = "no-cache"  # revalidated each load, so an upgrade is picked up at once

blp = Blueprint("console", __name__)


@blp.get("/")
def index() -> Response:
    return _file("index.html")


@blp.get("/console/<path:filename>")
def asset(filename: str) -> Response:
    return _file(filename)


def _file(filename: str) -> Response:
    response = send_from_directory(STATIC, filename, max_age=0)
    response.headers["Cache-Control"] = CACHE
    response.headers["Content-Security-Policy"] = POLICY
    response.headers["Referrer-Policy"] = "no-referrer"
    return response


def install_console(app: Flask) -> None:
    app.register_blueprint(blp)

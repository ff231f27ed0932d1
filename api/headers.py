"""Headers on every answer: no type sniffing anywhere, and the API docs page's script policy.

Skill files are served as `text/plain` and JSON as `application/json`; `nosniff` keeps a
browser from reading either as HTML or script whatever their bytes look like. The docs page
(Swagger UI, /api/docs) gets a Content-Security-Policy like the console's: everything from this
origin (its scripts and styles are under /api/docs/assets/), nothing may frame it, and the one
inline script flask-smorest writes to start Swagger UI is allowed by its SHA-256 alone.
"""

from __future__ import annotations

import base64
import hashlib
import re

from flask import Flask, request
from werkzeug.wrappers import Response

DOCS_ENDPOINT = "api-docs.openapi_swagger_ui"
# Swagger UI styles with its stylesheet and with style properties set from script, which no
# policy governs; its icons are data: URLs.
DOCS_POLICY = (
    "default-src 'self'; script-src {scripts}; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


def install_headers(app: Flask) -> None:
    """Add the headers to every response the app gives, errors included."""
    app.after_request(add_headers)


def add_headers(response: Response) -> Response:
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    if request.endpoint == DOCS_ENDPOINT and response.mimetype == "text/html":
        response.headers["Content-Security-Policy"] = docs_policy(response.get_data(as_text=True))
        response.headers.setdefault("Referrer-Policy", "no-referrer")
    return response


def docs_policy(page: str) -> str:
    """The docs page's policy, allowing exactly the inline scripts `page` holds."""
    hashes = [script_hash(script) for script in _INLINE_SCRIPT.findall(page)]
    return DOCS_POLICY.format(scripts=" ".join(["'self'", *hashes]))


def script_hash(script: str) -> str:
    """The CSP source that allows an inline script of exactly this text."""
    digest = hashlib.sha256(script.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"

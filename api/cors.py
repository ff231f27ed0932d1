"""CORS for browser frontends on other origins: only those in SKILLFLEET_CORS_ORIGINS.

Tokens travel in the Authorization header, never in cookies, so credentials stay off.
"""

from __future__ import annotations

from flask import Flask
from flask_cors import CORS

ALLOWED_HEADERS = ["Authorization", "Content-Type", "Last-Event-ID"]
# The chat's headers too (api/chat.py): the answer's turn, and whether the server's history won.
EXPOSED_HEADERS = [
    "Link", "X-Total-Count", "Content-Disposition", "X-Skillfleet-Turn", "X-Skillfleet-History",
    "x-vercel-ai-ui-message-stream",
]  # fmt: skip
PREFLIGHT_MAX_AGE = 600


def install_cors(app: Flask, origins: tuple[str, ...]) -> None:
    """Answer preflights and add CORS headers for `origins`; nothing at all when it is empty."""
    if not origins:
        return
    CORS(
        app,
        resources={r"/api/*": {"origins": list(origins)}},
        allow_headers=ALLOWED_HEADERS,
        expose_headers=EXPOSED_HEADERS,
        methods=["GET", "POST", "PUT", "DELETE", "OPTIONS"],
        supports_credentials=False,
        max_age=PREFLIGHT_MAX_AGE,
        vary_header=True,
    )

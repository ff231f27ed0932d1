"""The REST API: a Flask app factory (`api/app.py`) with flask-smorest blueprints, one per
resource.

`create_app` is imported from here on first use, not with the package: `skillfleet mcp` (the
stdio gateway an MCP host starts) imports the gateway's REST client from this package and
never builds an app, and the factory's imports (Flask, flask-smorest, Celery, the broker's
policy) cost its start about 0.6 s of CPU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from api.app import create_app as create_app


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from api.app import create_app

        return create_app
    raise AttributeError(f"module 'api' has no attribute {name!r}")

"""GET /api/health: is the API up and can it reach its database."""

from __future__ import annotations

from typing import Any

from flask.views import MethodView
from flask_smorest import Blueprint
from sqlalchemy import text

from api.schemas import HealthSchema
from api.services import services

blp = Blueprint("health", __name__, url_prefix="/api/health", description="Liveness")


@blp.route("")
class Health(MethodView):
    @blp.doc(security=[])
    @blp.response(200, HealthSchema)
    def get(self) -> dict[str, Any]:
        """Report that the API answers and reaches its database"""
        with services().engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        return {"status": "ok", "database": services().engine.dialect.name}

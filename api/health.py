"""GET /api/health: is the API up and can it reach its database and Redis."""

from __future__ import annotations

from typing import Any

import redis
import sqlalchemy.exc
from flask.views import MethodView
from sqlalchemy import text

from api.blueprint import Blueprint
from api.errors import ApiError, ErrorSchema
from api.schemas import HealthSchema
from api.services import services

blp = Blueprint("health", __name__, url_prefix="/api/health", description="Liveness")


@blp.route("")
class Health(MethodView):
    @blp.doc(security=[])
    @blp.response(200, HealthSchema)
    @blp.alt_response(503, schema=ErrorSchema, description="The database or Redis is unreachable")
    def get(self) -> dict[str, Any]:
        """Report that the API answers and reaches its database and Redis"""
        problems = []
        try:
            with services().engine.connect() as connection:
                connection.execute(text("SELECT 1"))
        except sqlalchemy.exc.SQLAlchemyError as e:
            problems.append(
                ("database_unavailable", f"The database can't be reached ({_kind(e)}).")
            )
        try:
            services().redis.ping()
        except redis.RedisError as e:
            problems.append(
                (
                    "redis_unavailable",
                    f"Redis (queues and run output) can't be reached ({_kind(e)}).",
                )
            )
        if problems:
            code, message = problems[0]
            raise ApiError(503, code, message, errors=[m for _code, m in problems])
        return {"status": "ok", "database": services().engine.dialect.name, "redis": "ok"}


def _kind(error: Exception) -> str:
    return type(error).__name__

"""Health checks for load balancers: /healthz (process up) and /readyz (dependencies)."""

from flask import current_app
from flask.views import MethodView
from flask_smorest import Blueprint
from marshmallow import fields

from app.db import database
from app.queue import redis_connection
from app.resources.common import Schema

blp = Blueprint("health", __name__, description="Liveness and readiness for load balancers.")


class HealthSchema(Schema):
    status = fields.String(required=True, metadata={"description": "ok, ready or unavailable"})
    checks = fields.Dict(
        keys=fields.String(),
        values=fields.String(),
        metadata={"description": "Each dependency: ok, or what is wrong."},
    )


@blp.route("/healthz")
class Health(MethodView):
    @blp.response(200, HealthSchema)
    @blp.doc(operationId="getHealth", security=[])
    def get(self):
        """The process is up"""
        return {"status": "ok"}


@blp.route("/readyz")
class Ready(MethodView):
    @blp.response(200, HealthSchema)
    @blp.alt_response(503, schema=HealthSchema, description="A dependency is unreachable.")
    @blp.doc(operationId="getReadiness", security=[])
    def get(self):
        """The database and, when configured, Redis answer"""
        checks = {}
        try:
            database.execute_sql("SELECT 1")
            checks["database"] = "ok"
        except Exception as exc:  # any driver error means not ready
            checks["database"] = f"error: {type(exc).__name__}"
        if current_app.config.get("REDIS_URL"):
            try:
                redis_connection().ping()
                checks["redis"] = "ok"
            except Exception as exc:
                checks["redis"] = f"error: {type(exc).__name__}"
        ready = all(value == "ok" for value in checks.values())
        return {"status": "ready" if ready else "unavailable", "checks": checks}, (
            200 if ready else 503
        )

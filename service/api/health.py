"""Liveness and readiness probes."""

from __future__ import annotations

from typing import Any

from flask.views import MethodView
from marshmallow import Schema, fields

from service.api.base import Blueprint
from service.state import state

blp = Blueprint("health", __name__, description="Liveness and readiness probes")


class HealthSchema(Schema):
    status = fields.String(metadata={"description": "always 'ok' while the process serves"})


class KnowledgeStatusSchema(Schema):
    loaded = fields.Boolean()
    version = fields.String(metadata={"description": "content hash of the knowledge files"})
    counts = fields.Dict(keys=fields.String(), values=fields.Integer())
    unresolved_benchmark_rows = fields.List(
        fields.String(), metadata={"description": "stored rows whose GPU or workload is unknown"}
    )


class CacheStatusSchema(Schema):
    backend = fields.String(
        metadata={"description": "redis, or sqlite (the embedded store, without Redis)"}
    )
    ok = fields.Boolean()
    fallback = fields.Boolean(
        metadata={"description": "true while Redis is away (this process keeps what it stores)"}
    )
    detail = fields.String()
    path = fields.String(metadata={"description": "the embedded store's file"})
    stored_bytes = fields.Integer(metadata={"description": "what the embedded store holds"})
    max_bytes = fields.Integer(
        metadata={"description": "its size limit (RIGHTSIZE_STORE_MAX_BYTES)"}
    )


class ModelStatusSchema(Schema):
    state = fields.String(
        metadata={
            "description": "ready; building (estimates wait for it); not-built (built on the "
            "first estimate); failed (the next estimate tries again)"
        }
    )
    model_version = fields.String()
    knowledge_version = fields.String()
    built_s = fields.Float(metadata={"description": "seconds the build took"})
    detail = fields.String(metadata={"description": "why the build failed"})


class ComputeStatusSchema(Schema):
    processes = fields.Integer(
        metadata={"description": "compute processes per worker (RIGHTSIZE_COMPUTE_PROCESSES)"}
    )
    running = fields.Boolean(
        metadata={
            "description": "started (gunicorn workers start them; elsewhere everything "
            "runs in the caller)"
        }
    )
    alive = fields.Integer(metadata={"description": "this worker's compute processes alive"})
    ready = fields.Integer(
        metadata={
            "description": "of them, those that have built their app and take work (new "
            "work waits for one, RIGHTSIZE_COMPUTE_WAIT_S at most)"
        }
    )
    waiting = fields.Integer(
        metadata={"description": "new computations waiting for a compute process in this worker"}
    )
    displaced = fields.Integer(
        metadata={
            "description": "waiting computations refused (503) to make room for a client that "
            "had used less (RIGHTSIZE_COMPUTE_QUEUE)"
        }
    )
    replaced = fields.Integer(
        metadata={
            "description": "compute processes this worker replaced after one died or did "
            "not stop a task called off"
        }
    )
    called_off = fields.Integer(
        metadata={
            "description": "tasks this worker called off since it started: their client went "
            "away or their time was up (dropped while waiting, or stopped in the child)"
        }
    )
    per_client = fields.Integer(
        metadata={
            "description": "new computations one client may have running or waiting in this "
            "worker (RIGHTSIZE_COMPUTE_PER_CLIENT; 0: no limit)"
        }
    )
    detail = fields.String()


class ReadySchema(Schema):
    status = fields.String(
        metadata={
            "description": "ready; or degraded: Redis is configured but unreachable, and "
            "every read and computation still answers (caches in this process, queued "
            "work refused with 503)"
        }
    )
    knowledge = fields.Nested(KnowledgeStatusSchema)
    cache = fields.Nested(CacheStatusSchema)
    performance_model = fields.Nested(
        ModelStatusSchema,
        metadata={"description": "the learned estimate model; readiness does not wait for it"},
    )
    compute = fields.Nested(
        ComputeStatusSchema,
        metadata={
            "description": "the answering worker's compute processes (new profiles and "
            "rankings); without them the worker computes, so readiness does not wait for them"
        },
    )


@blp.route("/healthz")
class Health(MethodView):
    @blp.response(200, HealthSchema)
    def get(self) -> dict[str, str]:
        """Liveness: the process is up and serving"""
        return {"status": "ok"}


@blp.route("/readyz")
class Ready(MethodView):
    @blp.response(200, ReadySchema)
    def get(self) -> dict[str, Any]:
        """Readiness: knowledge loaded; Redis reachable, or degraded (still serving)"""
        app_state = state()
        knowledge = app_state.knowledge
        cache = app_state.cache.health()
        if cache["backend"] == "sqlite":
            cache["detail"] = (
                "RIGHTSIZE_REDIS_URL is not set: the embedded store"
                if cache["ok"]
                else f"the embedded store cannot be read: {cache.pop('error', '')}"
            )
        elif cache["ok"]:
            cache["detail"] = "Redis reachable"
        else:
            cache["detail"] = (
                f"Redis unreachable, caching in this process: {cache.pop('error', '')}"
            )
        cache.pop("items", None)
        return {
            "status": "ready" if cache["ok"] else "degraded",
            "knowledge": {
                "loaded": True,
                "version": knowledge.version,
                "counts": knowledge.stats(),
                "unresolved_benchmark_rows": knowledge.unresolved,
            },
            "cache": cache,
            "performance_model": app_state.estimates.status(),
            "compute": app_state.compute.status(),
        }

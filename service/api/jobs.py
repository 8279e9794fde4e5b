"""``/v1/jobs``: the state of background work (large trace uploads, retraining): on the
queue (Redis), or in this process where there is none (:mod:`service.infra.local_jobs`)."""

from __future__ import annotations

from typing import Any

from flask import Response, jsonify
from flask.views import MethodView
from marshmallow import Schema, fields

from service import jobs
from service.api.base import Blueprint
from service.api.described import text
from service.errors import NotFound, Unavailable
from service.infra.keys import allows
from service.security import caller
from service.state import state

blp = Blueprint("jobs", __name__, url_prefix="/v1/jobs", description="Background jobs")


class JobErrorSchema(Schema):
    kind = text("what failed: the trace reader's kind of problem (not-a-trace, ...), "
                "retrain-failed, or failed")  # fmt: skip
    message = text("what went wrong, in words")


class JobSchema(Schema):
    job_id = fields.String()
    status = fields.String(metadata={"description": "queued, started, finished, failed, ..."})
    trace_id = fields.String()
    trace_url = fields.String()
    error = fields.Nested(
        JobErrorSchema, metadata={"description": "why the job failed: kind and message"}
    )
    progress = fields.String(metadata={"description": "the step a running job is at"})
    result = fields.Dict(metadata={"description": "what a finished retrain produced"})


class JobAcceptedSchema(Schema):
    job_id = fields.String()
    job_url = fields.String()
    status = fields.String()


@blp.route("/<string:job_id>")
class JobById(MethodView):
    @blp.response(200, JobSchema)
    @blp.problem(404)
    @blp.problem(503)
    def get(self, job_id: str) -> dict[str, Any]:
        """State of a background job; when finished, where its result is"""
        st = state()
        found = None
        if st.local_jobs is not None:
            kept = st.local_jobs.status(job_id)
            if kept is not None and _visible(kept[1]):
                found = kept[0]
        elif st.redis is not None:
            queued = jobs.status(st.redis, job_id)
            if queued is not None and (queued[1] is None or _visible(queued[1])):
                found = queued[0]
        if found is None:
            raise NotFound("job", job_id, [])
        return found


def _visible(owner: str) -> bool:
    """A job is its key's (and the administrators'): others are told there is none."""
    key = caller()
    return key is not None and (key.key_id == owner or allows(key.role, "admin"))


def accepted(job_id: str) -> Response:
    """The 202 answer for queued work: where to follow it."""
    body = {"job_id": job_id, "job_url": f"/v1/jobs/{job_id}", "status": "queued"}
    response = jsonify(body)
    response.status_code, response.headers["Location"] = 202, body["job_url"]
    return response


def no_queue(work: str, instead: str) -> Unavailable:
    """The 503 for queued work when no queue is configured."""
    return Unavailable(
        f"{work} runs on the job queue (set RIGHTSIZE_REDIS_URL and run 'rightsize worker'); "
        f"without one, run '{instead}'",
        retry_after_s=3600,
    )

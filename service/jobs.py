"""Background work on Redis with rq (JSON-serialised jobs, no pickles).

``submit`` stores a large trace upload in Redis and queues ``parse_trace_job``; an rq
worker (``rightsize worker``) runs it, analysing the trace in a process of its own
within its time and memory limits (:func:`service.engine.estimating.traces.ingest_file`), and
stores the analysis like a synchronous upload would. ``submit_retrain`` queues
``retrain_job``: the model fitted again on the curated and submitted benchmark rows
(and, if asked, validated). A job reports its progress in its metadata, and a failed job
the reason, for ``GET /v1/jobs/{id}``; a trace's job is its owner's (the key that
uploaded it, in the job's metadata), as the trace is.
"""

from __future__ import annotations

import tempfile
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

import redis
from rq import Queue, SimpleWorker, Worker, get_current_job
from rq.exceptions import NoSuchJobError
from rq.job import Job
from rq.serializers import JSONSerializer
from rq.worker import BaseWorker

from profiles.trace.stream import Limits, TraceFormatError
from service.engine.estimating.traces import Bounds, TraceOptions, ingest_file
from service.infra.cache import RedisCache

UPLOAD_TTL_S = 3600
COPY_CHUNK = 8 * 2**20  # an upload goes into Redis and out of it a chunk at a time


def queue(client: redis.Redis, prefix: str) -> Queue:
    """The job queue of the services whose Redis keys start with ``prefix``
    (RIGHTSIZE_KEY_PREFIX): services sharing a Redis under other prefixes, and their
    workers, keep their work apart."""
    return Queue(f"{prefix}jobs", connection=client, serializer=JSONSerializer)


class _InProcessWorker(SimpleWorker):
    """A worker that runs jobs in its own process and takes no commands: rq's workers
    listen for them on a pub/sub thread that reads with a 60 s timeout, and closing it
    at the end of a burst waited for that read (60 s of a 0.2 s test, in the suite)."""

    def subscribe(self) -> None:
        pass

    def unsubscribe(self) -> None:
        pass


def worker(client: redis.Redis, prefix: str, simple: bool = False) -> BaseWorker:
    """An rq worker on the queue of ``prefix`` (``simple``: runs jobs in its own process
    and takes no commands, for tests)."""
    on = [queue(client, prefix)]
    if simple:
        return _InProcessWorker(on, connection=client, serializer=JSONSerializer)
    return Worker(on, connection=client, serializer=JSONSerializer)


class OwnerBusy(Exception):
    """The key already has its share of trace jobs queued or running."""


ACTIVE = frozenset({"queued", "started", "deferred", "scheduled"})


def _within_share(client: redis.Redis, prefix: str, owner: str, per_owner: int) -> str:
    """The key of ``owner``'s set of trace jobs, once its jobs still queued or running
    are fewer than ``per_owner`` (:class:`OwnerBusy` otherwise): one key's jobs do not
    take the whole queue from the others."""
    mine = f"{prefix}trace-jobs:{owner}"
    ids = [i.decode() for i in client.smembers(mine)]  # type: ignore[union-attr]
    for job_id in ids:
        try:
            state = str(Job.fetch(job_id, connection=client, serializer=JSONSerializer)
                        .get_status(refresh=True))  # fmt: skip
        except (NoSuchJobError, ValueError):
            state = "gone"
        if state.rsplit(".", maxsplit=1)[-1].lower() not in ACTIVE:
            client.srem(mine, job_id)
            ids.remove(job_id)
    if len(ids) >= per_owner:
        raise OwnerBusy(
            f"this key has {len(ids)} trace jobs queued or running (its share is "
            f"{per_owner}): wait for one to finish"
        )
    return mine


def submit(
    client: redis.Redis,
    prefix: str,
    upload: IO[bytes],
    options: TraceOptions,
    ttl_s: int,
    limits: Limits,
    bounds: Bounds,
    per_owner: int = 4,
) -> str:
    """Queue the analysis of an upload (copied into Redis a chunk at a time); returns the
    job id. A key may have ``per_owner`` of them queued or running (:class:`OwnerBusy`)."""
    mine = _within_share(client, prefix, options.owner or "-", per_owner)
    upload_key = f"{prefix}upload:{uuid.uuid4().hex}"
    client.set(upload_key, b"", ex=UPLOAD_TTL_S)
    while chunk := upload.read(COPY_CHUNK):
        client.append(upload_key, chunk)
    job = queue(client, prefix).enqueue(
        parse_trace_job,
        upload_key,
        asdict(options),
        prefix,
        ttl_s,
        asdict(limits),
        asdict(bounds),
        job_timeout=int(bounds.time_limit_s) + 60,
        result_ttl=ttl_s,
        failure_ttl=ttl_s,
        meta={"owner": options.owner},
    )
    client.sadd(mine, job.id)
    client.expire(mine, ttl_s)
    return str(job.id)


def parse_trace_job(
    upload_key: str,
    options: dict[str, Any],
    prefix: str,
    ttl_s: int,
    limits: dict[str, Any],
    bounds: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run in an rq worker: analyse the stored upload in a bounded process, store the
    analysis, drop the upload; its progress in the job's metadata."""
    job = get_current_job()
    assert job is not None
    client = job.connection
    path = _download(client, upload_key)
    try:
        record = ingest_file(
            path,
            TraceOptions(**options),
            RedisCache(client, prefix),
            ttl_s,
            Limits(**limits),
            Bounds(**(bounds or {})),
            _progress,
        )
    except TraceFormatError as exc:
        job.meta["error"] = {"kind": exc.kind, "message": str(exc)}
        job.save_meta()
        raise
    finally:
        path.unlink(missing_ok=True)
        client.delete(upload_key)
    return {"trace_id": record["trace_id"]}


def _download(client: redis.Redis, key: str) -> Path:
    """The upload stored under ``key``, copied into a temporary file a chunk at a time."""
    size = client.strlen(key)
    if not client.exists(key):
        raise RuntimeError("the upload expired before a worker took the job")
    with tempfile.NamedTemporaryFile(prefix="rightsize-upload-", delete=False) as out:
        for start in range(0, int(size), COPY_CHUNK):
            out.write(client.getrange(key, start, start + COPY_CHUNK - 1))  # type: ignore[arg-type]
    return Path(out.name)


PATHS = ("KNOWLEDGE_DIR", "MODEL_DIR", "SUBMISSIONS_FILE", "PRICES_FILE")  # what jobs read


def _queue_model_job(client: redis.Redis, settings: dict[str, Any], func: Any, *args: Any) -> str:
    """Queue a job on the knowledge and model files (it gets their paths, then ``args``)."""
    paths = {n.lower(): settings[f"RIGHTSIZE_{n}"] for n in PATHS}
    job = queue(client, settings["RIGHTSIZE_KEY_PREFIX"]).enqueue(
        func, paths, *args, job_timeout=3600, result_ttl=7 * 86400, failure_ttl=86400
    )
    return str(job.id)


def _progress(step: str) -> None:
    """Say where the running job is (``GET /v1/jobs/{id}``'s ``progress``)."""
    job = get_current_job()
    if job is not None:
        job.meta["progress"] = step
        job.save_meta()


def submit_retrain(client: redis.Redis, settings: dict[str, Any], validate: bool) -> str:
    """Queue a retrain (one at a time is enough: a queued one sees every row stored)."""
    return _queue_model_job(client, settings, retrain_job, validate)


def retrain_job(paths: dict[str, Any], validate: bool) -> dict[str, Any]:
    """Run in an rq worker: refit on the curated and submitted rows, optionally validate.
    The result lists the stored rows skipped; a refit that fails marks nothing (the
    services keep their model) and fails the job with the reason in its metadata."""
    from pathlib import Path

    from knowledge import load_knowledge
    from profiles.model_catalog import Catalog
    from service.submissions import RetrainFailed, SubmissionStore, retrain, validate_layer

    _progress("fitting")
    base = load_knowledge(paths["knowledge_dir"])
    store = SubmissionStore(paths["submissions_file"])
    catalog = Catalog.load()
    try:
        result = retrain(base, catalog, store, Path(paths["model_dir"]))
    except RetrainFailed as exc:
        job = get_current_job()
        if job is not None:
            job.meta["error"] = {"kind": "retrain-failed", "message": str(exc)}
            job.save_meta()
        raise
    if validate:
        _progress("validating")
        result["validation"] = validate_layer(base, catalog, store, Path(paths["model_dir"]))
    _progress("done")
    return result


def submit_validate(client: redis.Redis, settings: dict[str, Any]) -> str:
    """Queue a validation of the model the services use now."""
    return _queue_model_job(client, settings, validate_job)


def validate_job(paths: dict[str, Any]) -> dict[str, Any]:
    """Run in an rq worker: validate the model in use and keep its report."""
    from pathlib import Path

    from knowledge import load_knowledge
    from profiles.model_catalog import Catalog
    from service.overlays import knowledge_in_use
    from service.prices import PriceFile
    from service.submissions import SubmissionStore, validate_knowledge

    _progress("validating")
    base = load_knowledge(paths["knowledge_dir"])
    store = SubmissionStore(paths["submissions_file"])
    knowledge = knowledge_in_use(base, store, PriceFile(paths["prices_file"]))
    found = validate_knowledge(knowledge, Catalog.load(), Path(paths["model_dir"]))
    _progress("done")
    return found


def status(client: redis.Redis, job_id: str) -> tuple[dict[str, Any], str | None] | None:
    """State of a job (None if unknown): queued, started, finished (with the trace id) or
    failed (with the reason); and its owner, the key whose trace it analyses (None for
    work no key owns: retraining, validation). A lost connection raises
    ``redis.RedisError`` (a 503)."""
    try:
        job = Job.fetch(job_id, connection=client, serializer=JSONSerializer)
    except redis.RedisError:
        raise
    except (NoSuchJobError, ValueError, TypeError, KeyError, UnicodeDecodeError):
        return None  # unknown, or a key that is not an rq job
    state = str(job.get_status(refresh=True))
    out: dict[str, Any] = {"job_id": job_id, "status": state.rsplit(".", maxsplit=1)[-1].lower()}
    if "progress" in job.meta:
        out["progress"] = job.meta["progress"]
    if out["status"] == "finished":
        result = job.return_value() or {}
        if "trace_id" in result:
            out["trace_id"] = result["trace_id"]
            out["trace_url"] = f"/v1/traces/{out['trace_id']}"
        else:
            out["result"] = result
    elif out["status"] == "failed":
        out["error"] = job.meta.get("error") or {"kind": "failed", "message": "the job failed"}
    owner = job.meta.get("owner")
    return out, str(owner) if owner is not None else None

"""Computed answers kept in the cache as the bytes sent, keyed by the request as sent.

An estimate or a plan is a pure function of its request and of the knowledge and model
it is computed on; the same request again is answered from the cache without parsing
the answer back or dumping it again (a cached answer costs about what a catalog read
does). The key is a digest of the request's JSON (keys sorted) and of what the answer
depends on, so a new knowledge version, retrain or model version never serves an old one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

from flask import Response, current_app, request
from marshmallow import Schema

from profiles.profile import PROFILER_VERSION
from service.api.base import schema_instance
from service.engine.estimating.model import MODEL_VERSION
from service.engine.estimating.on_request import EstimateService
from service.engine.requests import request_digest
from service.infra.cache import MemoryCache
from service.state import state

F = TypeVar("F", bound=Callable[..., Any])


def cached(
    kind: str, depends_on: str, schema: type[Schema], compute: Callable[[], Any]
) -> Response:
    """The answer to this request: from the cache, or ``compute()``d, dumped and kept."""
    st = state()
    key = f"{kind}:{request_digest(request.get_json(), depends_on)}"
    hit = st.cache.get(key)
    if hit is None:
        hit = current_app.json.dumps(schema_instance(schema).dump(compute())).encode()
        st.cache.set(key, hit, int(st.settings["RIGHTSIZE_CACHE_TTL_S"]))
    return Response(hit, mimetype="application/json")


def answer_version(service: EstimateService) -> str:
    """What an estimate or plan depends on besides its request."""
    return f"{service.knowledge.version}:{MODEL_VERSION}:{PROFILER_VERSION}"


MEMO = "rightsize-memo"
MEMO_ITEMS = 256  # the largest answer (every GPU, a page of 500) is under 1 MB


def memoised(view: F) -> F:
    """For reads of what a process never changes (the knowledge, the model catalog): the
    bytes of each 200 answer kept in this process by path and query, and sent again as
    they are. Put it above flask-smorest's decorators, so that a repeat is not parsed."""

    @functools.wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        memo: MemoryCache = current_app.extensions.setdefault(MEMO, MemoryCache(MEMO_ITEMS))
        # the version changes with refreshed prices (and a retrain): never an old answer
        key = f"{state().layers.service().knowledge.version} {request.full_path}"
        hit = memo.get(key)
        if hit is not None:
            return Response(hit, mimetype="application/json")
        response = view(*args, **kwargs)
        if isinstance(response, Response) and response.status_code == 200:
            memo.set(key, response.get_data(), 86400)
        return response

    return cast(F, wrapper)

"""One estimate request answered: the plain model's estimate, or a layout's where the
request asks for what only the layout model reads."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from service.engine.errors import InvalidRequest
from service.engine.estimating.on_request import EstimateService
from service.engine.owners import Reader
from service.engine.planning.plans import body_stack, layout_estimate, serving_estimate
from service.engine.requests import EstimateRequest

# request fields only the layout model reads (a plain estimate gets data parallel over count)
LAYOUT_ONLY = ("interconnect", "weight_precision", "kv_precision", "concurrency")


def check_traced(request: EstimateRequest) -> None:
    """A trace is projected as traced: refuse a layout, a stack, or an option only the
    layout model reads, beside it."""
    planned = [k for k in ("layout", *LAYOUT_ONLY) if getattr(request, k) is not None]
    planned += [k for k in ("stack", "stack_options") if getattr(request, k)]
    if planned:
        raise InvalidRequest(
            planned[0], "a trace is projected as traced: give model or profile for this"
        )


def estimate_request(
    service: EstimateService, request: EstimateRequest, who: Reader
) -> dict[str, Any]:
    """One estimate: the plain model, or a parallel layout's when one is asked for (a
    trace read as ``who``)."""
    planned = [k for k in LAYOUT_ONLY if getattr(request, k) is not None]
    stack, sharded = None, None
    if not request.trace_id:  # with a trace there is nothing planned (check_traced)
        stack, sharded = body_stack(service, request)
        if sharded is not None:
            planned.append("stack")  # a stack the step model does not time: the layout model
    if request.layout is not None:
        planned.insert(0, "layout")
    if planned:
        # the options only the layout model reads: plain data parallel over count
        if request.layout is None:
            layout = sharded or {"data_parallel": request.count or 1}
            request = replace(request, layout=layout)
        return layout_estimate(service, request)
    result = service.request(request, who).to_dict()
    if stack is not None:
        result["stack"] = stack.to_dict()
    served = serving_estimate(service, request)
    if served is not None:
        result["inference"] = served
    result["knowledge_version"] = service.knowledge.version
    return result

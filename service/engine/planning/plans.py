"""Plans and layout estimates on request: the layouts of a profile on a GPU type, ranked.

:func:`plan_request` answers ``POST /v1/plans``; :func:`layout_estimate` answers
``POST /v1/estimates`` with a ``layout``. Both read the profile the way estimates do
(model and workload, or a stored profile) and the performance model of the
:class:`~service.engine.estimating.on_request.EstimateService`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from knowledge.records import Gpu
from service.engine.errors import InvalidRequest
from service.engine.estimating import scaling
from service.engine.estimating import software as stacks
from service.engine.estimating.estimate import USABLE_MEMORY_SHARE
from service.engine.estimating.layout import Layout, LayoutError, ModelShape, check
from service.engine.estimating.layout_memory import as_reported, memory_parts
from service.engine.estimating.on_request import EstimateService
from service.engine.estimating.roofline import MathMode, math_mode
from service.engine.estimating.step_profile import StepProfile
from service.engine.planning.network import Network, network
from service.engine.planning.search import Planned, plan, plan_layout, unsupported
from service.engine.planning.serving import layout_inference, tensor_degrees
from service.engine.planning.work import stacked, work
from service.engine.requests import EstimateRequest, Links, PlanRequest, StepRequest

# the links a plan compares its best layout on: inside a node, then between nodes
INTRA_ALTERNATIVES = ("pcie-4-x16", "pcie-5-x16")
INTER_ALTERNATIVES = ("ethernet-100g", "ethernet-400g", "infiniband-hdr", "infiniband-ndr")


@dataclass(frozen=True, slots=True)
class Setting:
    """A request's profile on a GPU type, ready to plan."""

    raw: Mapping[str, Any]
    profile: StepProfile
    shape: ModelShape | None
    gpu: Gpu
    mode: MathMode
    stack: stacks.Stack
    net: Network
    usable_bytes: float


def _setting(service: EstimateService, request: StepRequest) -> Setting:
    gpu = service.knowledge.gpu(request.gpu)
    found = service.body_profile(request.source())
    profile = StepProfile.from_profile(found)
    shape = ModelShape.from_profile(found)
    # a given layout that splits the model (tensor, pipeline or context parallel)
    given = request.layout or {}
    splits = unsupported(Layout(**given), ("data",)) is not None
    stack = stacks.for_work(
        service.knowledge, request.stack, request.stack_options, profile, shape,
        splits=splits,
    )  # fmt: skip
    stacks.check_formats(stack, profile.precision, request.weight_precision)
    mode = math_mode(gpu, profile.precision)
    links = request.interconnect or Links()
    net = network(
        service.knowledge,
        gpu,
        int(request.gpus_per_node or scaling.domain(gpu)),
        links.intra_node,
        links.inter_node,
        request.nvlink,
    )
    usable = gpu.memory_gb * 2**30 * USABLE_MEMORY_SHARE
    return Setting(found, stacked(profile, shape, stack), shape, gpu, mode, stack, net, usable)


def body_stack(
    service: EstimateService, request: StepRequest
) -> tuple[stacks.Stack, dict[str, Any] | None]:
    """The stack a request's work runs on (named, else the default for the work), and the
    data-parallel layout over the request's ``count`` that times its training step with the
    layout model, sharded as the stack shards (None: the step model times it: a stack it
    was fitted for, or no training)."""
    found = service.body_profile(request.source())
    profile = StepProfile.from_profile(found)
    stack = stacks.for_work(
        service.knowledge,
        request.stack,
        request.stack_options,
        profile,
        ModelShape.from_profile(found),
    )
    if not profile.trains or stack.step_model:
        return stack, None
    count = int(request.count or 1)
    stage = stack.zero_stage if count > 1 else 0
    return stack, {"data_parallel": count, **({"zero_stage": stage} if stage else {})}


def _link(net: Network) -> dict[str, Any]:
    return {
        "intra_node": {
            "id": net.intra.id,
            "name": net.intra.name,
            "gb_per_s": net.intra.bandwidth_gb_per_s,
            "why": net.intra.why,
        },
        "inter_node": {
            "id": net.inter.id,
            "name": net.inter.name,
            "gb_per_s": net.inter.bandwidth_gb_per_s,
            "why": net.inter.why,
        },
        "gpus_per_node": net.gpus_per_node,
    }


def _assumptions(s: Setting) -> list[str]:
    out = [
        s.stack.note(),
        f"math mode: {s.mode.name}; {s.gpu.id} usable memory "
        f"{s.usable_bytes / 2**30:.1f} GiB of {s.gpu.memory_gb:g} GiB",
        f"inside a node: {s.net.intra.why}; between nodes: {s.net.inter.why}",
        f"workload batch_size ({s.profile.batch_size:g}) is the micro-batch per model replica; "
        "the global batch is global_batch_size, else one micro-batch per GPU",
    ]
    if s.shape is None:
        out.append("not a transformer: only data-parallel layouts (with ZeRO) are planned")
    return out


def plan_request(service: EstimateService, request: PlanRequest) -> dict[str, Any]:
    """The ranked layouts, the smallest fitting count and the fastest layout per count."""
    s = _setting(service, request)
    model = service._built_model()
    if not s.profile.trains:
        return _inference_plan(service, s, request)
    done = work(s.profile, s.gpu, s.mode, s.stack, model.step_model)
    found = plan(
        s.profile,
        s.shape,
        done,
        s.net,
        s.mode,
        s.usable_bytes,
        s.stack,
        request.count,
        request.max_count,
        request.global_batch_size,
    )
    limit = request.limit
    best = next((x for x in found.ranked if x.fits), None)
    out: dict[str, Any] = {
        "gpu": s.gpu.id,
        "stack": s.stack.to_dict(),
        "task": s.profile.task,
        "count": found.count,
        "smallest_count": found.smallest_count,
        "layouts": [{"rank": i + 1, **x.to_dict()} for i, x in enumerate(found.ranked[:limit])],
        "layouts_total": len(found.ranked),
        "fastest_by_count": [
            {"count": n, **(x.to_dict() if x is not None else {"fits": False})}
            for n, x in found.fastest_by_count.items()
        ],
        "interconnect": _link(s.net),
        "profile_id": s.raw.get("profile_id"),
        "knowledge_version": service.knowledge.version,
        "assumptions": _assumptions(s),
    }
    if best is not None:
        out["on_other_links"] = _on_other_links(service, s, best, done)
        wanted = request.global_batch_size
        if wanted and best.step.samples_per_step != wanted:
            out["assumptions"].append(
                f"global_batch_size {wanted} is not micro-batch x accumulation x data parallel "
                f"for the best layout: it runs {best.step.samples_per_step:g} samples a step "
                "(the accumulation rounded up)"
            )
    else:
        out["assumptions"].append(
            f"no layout fits {s.gpu.id} at {found.count or 'any count up to the limit'} GPUs"
        )
    return out


def _on_other_links(
    service: EstimateService, s: Setting, best: Planned, done: Any
) -> list[dict[str, Any]]:
    """The best layout's step on slower (and faster) links, with what it loses."""
    out = []
    gpus = best.layout.gpus
    intra = [None, *INTRA_ALTERNATIVES] if gpus > 1 else [None]
    inter = [None, *INTER_ALTERNATIVES] if gpus > s.net.gpus_per_node else [None]
    for a in intra:
        for b in inter:
            if a in (None, s.net.intra.id) and b in (None, s.net.inter.id):
                continue  # the links the plan already has
            net = network(
                service.knowledge,
                s.gpu,
                s.net.gpus_per_node,
                a,
                b if b is not None else s.net.inter.id,
            )
            if a is None:
                net = Network(s.net.intra, net.inter, net.gpus_per_node, net.sms)
            other = plan_layout(best.layout, s.profile, s.shape, done, net, s.mode, s.usable_bytes)
            ratio = other.step.step_s / best.step.step_s
            changed = [x for x in (a, b) if x is not None]
            out.append(
                {
                    "intra_node": net.intra.id,
                    "inter_node": net.inter.id,
                    "step_time_s": other.step.step_s,
                    "slowdown": ratio,
                    "bound": other.step.bound,
                    "reason": f"on {' and '.join(changed)}: "
                    f"{_loss(ratio)} than on {s.net.intra.id}"
                    + (f" with {s.net.inter.id}" if gpus > s.net.gpus_per_node else "")
                    + f"; the step's largest part is {other.step.bound.replace('_', ' ')}",
                }
            )
    return sorted(out, key=lambda r: r["slowdown"])


def _loss(ratio: float) -> str:
    if ratio >= 1.0005:
        return f"{ratio:.2f}x slower"
    if ratio <= 0.9995:
        return f"{1 / ratio:.2f}x faster"
    return "no slower"


def served_alone(service: EstimateService, profile: StepProfile, gpu: Gpu) -> dict[str, Any]:
    """A model without a decode phase (no KV cache to split) served by one GPU a replica at
    the workload's batch: the estimate's batch latency, requests per second and memory."""
    found = service.from_profile(profile, gpu, 1)
    memory = found.memory
    return {
        "tensor_parallel": 1,
        "batch_size": int(profile.batch_size),
        "fits": bool(found.fits),
        "batch_latency_s": found.step_time_s,
        "requests_per_s": found.samples_per_s,
        "memory_per_gpu_bytes": memory.required_bytes if memory else None,
        "usable_memory_bytes": memory.usable_bytes if memory else None,
        "memory_parts_bytes": memory_parts(memory.need) if memory else {},
        "bound": found.bound,
    }


def _inference_plan(service: EstimateService, s: Setting, request: PlanRequest) -> dict[str, Any]:
    model = service._built_model()
    if not s.profile.output_tokens:  # nothing decoded: one GPU a replica
        alone = served_alone(service, s.profile, s.gpu)
        return {
            "gpu": s.gpu.id,
            "stack": s.stack.to_dict(),
            "task": s.profile.task,
            "smallest_count": 1 if alone["fits"] else None,
            "inference": [alone],
            "interconnect": _link(s.net),
            "profile_id": s.raw.get("profile_id"),
            "knowledge_version": service.knowledge.version,
            "assumptions": [
                *_assumptions(s),
                "no decode phase (not a generative model): one GPU a replica at the "
                "workload's batch, timed by the estimate",
            ],
        }
    found = []
    for t in tensor_degrees(s.shape, s.net.gpus_per_node):
        served = layout_inference(
            s.profile,
            s.shape,
            s.gpu,
            s.mode,
            model.step_model,
            s.net,
            t,
            s.stack,
            s.usable_bytes,
            request.weight_precision,
            request.kv_precision,
            request.concurrency,
        )
        found.append({"fits": served.max_concurrency >= 1, **served.to_dict()})
    fitting = [x for x in found if x["fits"]]
    return {
        "gpu": s.gpu.id,
        "stack": s.stack.to_dict(),
        "task": s.profile.task,
        "smallest_count": fitting[0]["tensor_parallel"] if fitting else None,
        "inference": sorted(found, key=lambda x: (not x["fits"], -x["output_tokens_per_s"])),
        "interconnect": _link(s.net),
        "profile_id": s.raw.get("profile_id"),
        "knowledge_version": service.knowledge.version,
        "assumptions": [
            *_assumptions(s),
            "decode reads every weight and each sequence's KV cache once per token: "
            "max_concurrency is how many sequences' KV caches fit beside the weights: "
            "whole, or on a stack with a paged cache under continuous batching, what each "
            "holds on average (its prompt and half its output)",
        ],
    }


def serving_estimate(service: EstimateService, request: EstimateRequest) -> dict[str, Any] | None:
    """A generative model's serving figures for the plain ``POST /v1/estimates`` on
    ``count`` GPUs (None for training, a trace, or a model that decodes nothing): the fewest
    tensor-parallel GPUs inside a node (a divisor of the count and of the heads) that hold
    the weights and one sequence's KV cache, replicated over the rest; time to first token
    and per output token at the concurrency (by default the most the KV cache holds), and
    the output tokens a second of all the replicas."""
    if request.trace_id:
        return None
    s = _setting(service, request)
    if s.profile.trains or not s.profile.output_tokens:
        return None
    count = int(request.count or 1)
    degrees = tensor_degrees(s.shape, min(count, s.net.gpus_per_node), count)
    model = service._built_model()
    for t in degrees:
        served = layout_inference(
            s.profile, s.shape, s.gpu, s.mode, model.step_model, s.net, t, s.stack,
            s.usable_bytes, request.weight_precision, request.kv_precision,
            request.concurrency,
        )  # fmt: skip
        if served.max_concurrency >= 1 or t == degrees[-1]:
            replicas = count // t
            return {
                "fits": served.max_concurrency >= 1,
                **served.to_dict(),
                "data_parallel": replicas,
                "all_output_tokens_per_s": served.output_tokens_per_s * replicas,
            }
    return None


def layout_estimate(service: EstimateService, request: EstimateRequest) -> dict[str, Any]:
    """``POST /v1/estimates`` with a layout: that layout's memory and step (served: its
    groups' serving)."""
    s = _setting(service, request)
    layout = Layout(**dict(request.layout or {}))
    _check_layout(s, layout, request.count)
    if not s.profile.trains and not s.profile.output_tokens:  # nothing decoded
        return _served_alone(service, s, layout)
    if not s.profile.trains:
        return _served_by_groups(service, s, layout, request)
    return _trained(service, s, layout)


def _check_layout(s: Setting, layout: Layout, count: int | None) -> None:
    """Refuse a layout the count, the model, the stack or the task cannot take."""
    if count is not None and count not in (1, layout.gpus):
        raise InvalidRequest(
            "count",
            f"the layout uses {layout.gpus} GPUs (data x tensor x pipeline x context); "
            "give that count or leave count out",
            count,
        )
    check(layout, s.shape, s.net.gpus_per_node, s.profile.seq_len)
    split = unsupported(layout, s.profile.parallelism) if s.profile.trains else None
    if split is not None:
        runs = ", ".join(s.profile.parallelism or ())
        raise LayoutError(
            "stack-parallelism",
            f"layout.{split}",
            f"the stack {s.stack.id} splits a training step over {runs} parallelism only, "
            f"not {split.replace('_', ' ')}: give a layout it runs, another stack, or "
            "stack_options.parallelism where the run splits it so",
        )
    if not s.profile.trains and (layout.pipeline_parallel > 1 or layout.context_parallel > 1):
        raise LayoutError(
            "inference-tensor-parallel-only",
            "layout",
            "inference is planned as tensor-parallel groups (data_parallel of them, each "
            "serving on its own): give tensor_parallel and data_parallel",
        )
    if not s.profile.trains and not s.profile.output_tokens and layout.tensor_parallel > 1:
        raise LayoutError(
            "inference-tensor-parallel-decoders-only",
            "layout.tensor_parallel",
            "a model without a decode phase is served one GPU a replica: give data_parallel only",
        )


def _served_alone(service: EstimateService, s: Setting, layout: Layout) -> dict[str, Any]:
    """A model without a decode phase, one GPU a replica."""
    alone = served_alone(service, s.profile, s.gpu)
    return {
        "gpu": s.gpu.id,
        "count": layout.gpus,
        "layout": layout.to_dict(),
        "fits": alone["fits"],
        "inference": alone,
        "throughput": {"samples_per_s": (alone["requests_per_s"] or 0) * layout.gpus},
        "latency_s": alone["batch_latency_s"],
        "bound": alone["bound"],
        "assumptions": _assumptions(s),
        "knowledge_version": service.knowledge.version,
    }


def _served_by_groups(
    service: EstimateService, s: Setting, layout: Layout, request: EstimateRequest
) -> dict[str, Any]:
    """A decoding model on data_parallel tensor-parallel groups."""
    served = layout_inference(
        s.profile, s.shape, s.gpu, s.mode, service._built_model().step_model, s.net,
        layout.tensor_parallel, s.stack, s.usable_bytes,
        request.weight_precision, request.kv_precision, request.concurrency,
    )  # fmt: skip
    return {
        "gpu": s.gpu.id,
        "count": layout.gpus,
        "layout": layout.to_dict(),
        "fits": served.max_concurrency >= 1,
        "inference": served.to_dict(),
        "throughput": {"tokens_per_s": served.output_tokens_per_s * layout.data_parallel},
        "latency_s": served.time_to_first_token_s
        + served.time_per_output_token_s * float(s.profile.output_tokens or 0),
        "bound": served.bound,
        "assumptions": _assumptions(s),
        "knowledge_version": service.knowledge.version,
    }


def _trained(service: EstimateService, s: Setting, layout: Layout) -> dict[str, Any]:
    """A training step under the layout: its memory per GPU and its time."""
    done = work(s.profile, s.gpu, s.mode, s.stack, service._built_model().step_model)
    found = plan_layout(layout, s.profile, s.shape, done, s.net, s.mode, s.usable_bytes)
    step = found.step
    assumptions = _assumptions(s)
    if not found.fits:
        assumptions.append(
            f"does not fit: needs {found.memory.total_bytes / 2**30:.1f} GiB per GPU of the "
            f"{s.usable_bytes / 2**30:.1f} GiB usable on {s.gpu.id} under this layout; the "
            "time is what it would take if it did (POST /v1/plans finds the layouts that fit)"
        )
    return {
        "gpu": s.gpu.id,
        "count": layout.gpus,
        "precision": s.profile.precision,
        "math_mode": s.mode.name,
        "step_time_s": step.step_s,
        "throughput": {"samples_per_s": step.samples_per_s, "tokens_per_s": step.tokens_per_s},
        "bound": step.bound,
        "fits": found.fits,
        "memory_per_gpu_bytes": found.memory.total_bytes,
        "usable_memory_bytes": s.usable_bytes,
        "memory_headroom": round(found.headroom, 4),
        "memory": found.memory.to_dict(),
        "memory_reported": as_reported(found.memory),
        "layout": layout.to_dict(),
        "layout_estimate": found.to_dict(),
        "stack": s.stack.to_dict(),
        "profile_id": s.raw.get("profile_id"),
        "assumptions": assumptions,
        "knowledge_version": service.knowledge.version,
    }

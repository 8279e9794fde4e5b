"""What switching software stack would save: the top choice's layout timed under every other
stack that runs the work and holds it in the same memory."""

from __future__ import annotations

from dataclasses import dataclass

from knowledge import Knowledge
from knowledge.records import Gpu
from service.engine.errors import InvalidRequest
from service.engine.estimating import software as stacks
from service.engine.estimating.layout import Layout, ModelShape
from service.engine.estimating.roofline import math_mode
from service.engine.estimating.step_model import StepModel
from service.engine.estimating.step_profile import StepProfile
from service.engine.planning.network import Network
from service.engine.planning.search import plan_layout, unsupported
from service.engine.planning.work import stacked, work

# a stack is worth naming when it runs the same job this much faster
WORTH = 1.15


@dataclass(frozen=True, slots=True)
class Switch:
    stack: stacks.Stack
    speedup: float  # the current stack's step over this one's


def _can_run(stack: stacks.Stack, profile: StepProfile, layout: Layout) -> bool:
    """Whether ``stack`` runs ``profile``'s precision and method (QLoRA: 4-bit weights)
    and splits the step as ``layout`` does."""
    if profile.method == "qlora" and not stack.runs("int4"):
        return False
    if unsupported(layout, stack.get("parallelism")) is not None:
        return False
    return profile.precision not in ("fp8",) or stack.runs("fp8")


def faster_stack(
    knowledge: Knowledge,
    step_model: StepModel,
    current: stacks.Stack,
    profile: StepProfile,
    shape: ModelShape | None,
    gpu: Gpu,
    layout: Layout,
    net: Network,
    usable_bytes: float,
) -> Switch | None:
    """The stack that runs ``profile`` (as profiled, before any stack's habits) fastest on
    ``layout``, where it beats ``current`` by :data:`WORTH` and fits ``usable_bytes``."""
    if shape is None or not profile.trains:
        return None
    mode = math_mode(gpu, profile.precision)

    def step_s(stack: stacks.Stack) -> float | None:
        held = stacked(profile, shape, stack)
        done = work(held, gpu, mode, stack, step_model)
        found = plan_layout(layout, held, shape, done, net, mode, usable_bytes)
        return found.step.step_s if found.fits else None

    now = step_s(current)
    if now is None:
        return None
    best: Switch | None = None
    for record in knowledge.stacks.values():
        if record.id == current.id:
            continue
        try:
            other = stacks.for_work(knowledge, record.id, None, profile, shape)
        except InvalidRequest:  # a stack that does not run this task
            continue
        if other.step_model or not _can_run(other, profile, layout):
            continue
        found = step_s(other)
        if found and now / found >= WORTH and (best is None or now / found > best.speedup):
            best = Switch(other, now / found)
    return best

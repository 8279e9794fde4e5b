"""The software stack a run is made with, as the estimate reads it.

A stack (knowledge/data/stacks.yaml) names what its kernels and its memory habits are; a
request names one and may override any property. :func:`resolve` gives the :class:`Stack`
the engine computes with:

- its kernels pick the compute model: ``step-model`` is stock PyTorch as the step model
  fitted on Lambda's benchmarks times it (any model); ``eager``, ``compiled`` and ``fused``
  time a transformer's step from its FLOPs and bytes (:func:`service.engine.planning.work.work`)
  with the stack's constants: the share of the dense peak its GEMMs reach, attention's rate
  over the GEMMs', the share of eager PyTorch's memory traffic left after fusion, and the
  training loop's host time per step;
- its memory habits change what a step holds (:func:`held`): the activations fused kernels
  keep, the loss (chunked or fused, not fp32 logits), pure-bf16 weights (no fp32 master
  copy), bf16 or 8-bit optimizer states, activations offloaded to the host;
- for serving, continuous batching with a paged KV cache reserves each sequence's cache as
  its tokens arrive (on average half its output), a static batch the whole length; the
  decode reaches ``decode_bandwidth_share`` of the memory bandwidth and the prefill
  ``prefill_efficiency`` of the dense peak, and each decode step costs the host
  ``step_overhead_s`` (eager stacks: every kernel's launch).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from knowledge import Knowledge
from knowledge.records import Gpu
from knowledge.stack_schemas import PROPERTIES, property_error
from profiles.profile import Memory
from service.engine.errors import InvalidRequest

# The compute constants a stack's kernels have where the stack has no fit of its own.
# GEMMs run cuBLAS in every stack, so they share the GEMM efficiency and attention's rate
# fitted on llm-foundry's H100 table and MLPerf's FP8 rows (parallel.OPTIMIZED); what
# differs is the memory traffic fusion leaves: eager kernels read and write every
# intermediate the profile counts (1.0); fused kernels leave the share fitted on MLPerf
# (0.2); torch.compile fuses the pointwise chains between GEMMs but not the GEMMs'
# epilogues (between the two, 0.5, until the stack's own fit)
MEMORY_SHARE = {"eager": 1.0, "compiled": 0.5, "fused": 0.2, "step-model": 1.0}
# What a language model's loss holds at its peak, per token and vocabulary entry, as the
# profiler counts eager PyTorch's (bf16 logits, their fp32 copy, the log-softmax kept for
# backward and their gradients: 10 bytes net of what backward frees)
LOSS_BYTES = 10.0
# ... and the share of it each loss keeps. Chunked: 8 chunks of the output projection, each
# upcast and its loss taken on its own (Torchtune's CEWithChunkedOutputLoss): measured on
# the CPU's allocator, 5.0 bytes at the peak against 14.0 for the whole logits at once
# (tests/engine/test_stacks.py runs both); fused: the loss and its gradient in one kernel
# over 16-bit logits (Megatron's fused cross entropy, llm.c's fused classifier): the 2
# bytes of the logits of 14
LOSS_SHARE = {"full-fp32": 1.0, "chunked": 5.0 / 14.0, "fused": 2.0 / 14.0}
# ... and what each keeps for backward, bytes a logit: the fp32 log-probabilities (each
# chunk's, for the chunked loss: chunking lowers the peak, not what is kept), the fused
# kernel's 16-bit gradient written over the logits in the forward
LOSS_KEPT = {"full-fp32": 4.0, "chunked": 4.0, "fused": 2.0}
# ... where the stack compiles its loss (torchtune's recipes compile the chunked loss with
# the model, training.compile_loss; torchtitan compiles its blocks only): the compiled
# cross-entropy keeps its 16-bit input, the logits, and recomputes the softmax in backward,
# one chunk's 16-bit gradient at a time (2 + 2 / 8 bytes at the peak)
COMPILED_LOSS_KEPT = {"chunked": 2.0}
COMPILED_LOSS_SHARE = {"chunked": 2.25 / 14.0}


def _of_loss(stack: Stack, eager: Mapping[str, float], compiled: Mapping[str, float]) -> float:
    """``stack``'s loss's figure in ``eager``, or in ``compiled`` where it compiles it."""
    loss = stack.get("loss")
    return compiled.get(loss, eager[loss]) if stack.kernels == "compiled" else eager[loss]


def loss_kept(stack: Stack) -> float:
    """Bytes a logit ``stack``'s loss keeps for backward."""
    return _of_loss(stack, LOSS_KEPT, COMPILED_LOSS_KEPT)


def loss_share(stack: Stack) -> float:
    """The share of eager PyTorch's whole-logits loss ``stack``'s loss holds at its peak."""
    return _of_loss(stack, LOSS_SHARE, COMPILED_LOSS_SHARE)


# activation offloading keeps this many layers' activations on the GPU (the one computing
# and the one in flight to or from the host)
OFFLOAD_LAYERS_ON_GPU = 2
# the default serving constants of a stack without a fit: decode kernels reach 80% of the
# bandwidth (parallel.DECODE_BANDWIDTH_SHARE), prefill half the dense peak; an eager stack
# pays each decode step's launches (the step model's cost per launch)
SERVING_DEFAULTS = {"decode_bandwidth_share": 0.8, "prefill_efficiency": 0.5,
                    "step_overhead_s": 0.0}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Compute:
    """The constants the FLOPs-and-bytes model times a stack's kernels with (the fused
    stack's fitted by :mod:`service.engine.validating.llm_validation`)."""

    efficiency_16bit: float  # share of the dense 16-bit tensor peak its GEMMs reach
    efficiency_8bit: float  # share of the dense FP8 peak its FP8 GEMMs reach
    memory_share: float  # share of the eager step's bytes left after fusion
    source: str
    # fused attention kernels reach a smaller share of the peak than the GEMMs (Dao 2023,
    # "FlashAttention-2", figs. 5-7: 50-73% of the A100's peak forward, backward and on the
    # H100 lower, against 70-80% for large GEMMs): their rate over the GEMMs'
    attention_share: float = 0.6
    # the framework's time per optimizer step that no GPU work hides (the training loop's
    # logging and loss synchronisation, the data loader, gradient clipping's launches):
    # it does not speed up with the GPU
    host_s: float = 0.0
    # attention kernels written for asynchronous tensor cores (FlashAttention-3, cuDNN's
    # fused attention) over those for synchronous MMA, on the GPUs that have them (1: the
    # stack runs the latter there too, as llm-foundry's runs of 2023-2024 did: Triton's
    # FlashAttention and FlashAttention-2)
    native_attention_speedup: float = 1.0

    def efficiency(self, precision: str) -> float:
        return self.efficiency_8bit if precision in EIGHT_BIT else self.efficiency_16bit

    def attention_rate(self, gpu: Gpu) -> float:
        """Attention's rate over the GEMMs' on ``gpu``."""
        if native_attention(gpu):
            return self.attention_share * self.native_attention_speedup
        return self.attention_share


def factor_key(kernels: str | None, architecture: str) -> str:
    """The key of an architecture's factor for a kind of kernels
    (knowledge/data/architecture_efficiency.yaml)."""
    return f"fused:{architecture}" if kernels == "fused" else architecture


def native_attention(gpu: Gpu) -> bool:
    """Whether ``gpu`` has the asynchronous tensor-core instructions (Hopper's wgmma and TMA,
    data-centre Blackwell's tcgen05) that FlashAttention-3 and cuDNN's fused attention are
    built on: compute capability 9.x and 10.x (Ada, Ampere and the GeForce Blackwell parts,
    12.x, run FlashAttention-2's synchronous MMA)."""
    major = (gpu.compute_capability or "0").split(".")[0]
    return gpu.vendor == "nvidia" and major in ("9", "10")


EIGHT_BIT = frozenset({"fp8", "int8", "int4"})
# Fitted by llm_validation.fit_stack: the 16-bit efficiency and the host time on
# llm-foundry's MPT rows (H100, bf16), the FP8 one on MLPerf Training v3.0-v4.1's GPT-3 175B
# and Llama 2 70B LoRA rows, attention's share on a grid between them;
# tests/engine/test_llm_validation.py checks the fit and the golden tables.
OPTIMIZED = Compute(
    efficiency_16bit=0.61,
    efficiency_8bit=0.51,
    memory_share=0.2,
    source="16-bit: llm-foundry MPT on H100 (2024-01-06); FP8: MLPerf Training v3.0-v4.1 "
    "GPT-3 175B and Llama 2 70B LoRA (2023-06-27 to 2024-11-13)",
    attention_share=0.35,
    host_s=0.2,
    # FlashAttention-3 over FlashAttention-2 on the H100, bf16, head dimension 128 (Shah et
    # al. 2024, figs. 5-6 and section 4.1: 1.5-2.0x forward, 1.5-1.75x backward): a training
    # step's attention is one part forward to two parts backward, 1.65x
    native_attention_speedup=1.65,
)


@dataclass(frozen=True, slots=True)
class Serving:
    decode_bandwidth_share: float
    prefill_efficiency: float
    step_overhead_s: float
    source: str


@dataclass(frozen=True, slots=True)
class Stack:
    """A stack with its properties resolved (and overridden where the request says)."""

    id: str
    name: str
    tasks: tuple[str, ...]
    properties: tuple[tuple[str, Any], ...]
    overridden: tuple[str, ...]
    compute: Compute
    serving: Serving
    sources: tuple[str, ...]
    as_of: str
    version: str
    # GPU architecture -> factor on the GEMMs' efficiency (knowledge/data/
    # architecture_efficiency.yaml; none before the fit)
    architecture_factors: tuple[tuple[str, float], ...] = ()

    def get(self, name: str) -> Any:
        return dict(self.properties)[name]

    @property
    def step_model(self) -> bool:
        """Timed by the step model fitted on stock-PyTorch benchmarks."""
        return self.get("kernels") == "step-model"

    @property
    def kernels(self) -> str:
        return str(self.get("kernels"))

    @property
    def zero_stage(self) -> int:
        """Its sharding as the ZeRO stage a data-parallel layout takes (DDP 0, ZeRO-1, FSDP
        full shard 3)."""
        return {"none": 0, "optimizer": 1, "full": 3}[str(self.get("sharding"))]

    def architecture_factor(self, gpu: Gpu) -> float:
        """The factor on the stack's GEMM efficiency on ``gpu``'s architecture (fitted
        apart for stacks of fused kernels and for PyTorch's own)."""
        return dict(self.architecture_factors).get(factor_key(self.kernels, gpu.architecture), 1.0)

    def runs(self, precision: str) -> bool:
        return precision in self.get("weight_precisions")

    def to_dict(self) -> dict[str, Any]:
        props = {k: list(v) if isinstance(v, tuple) else v for k, v in self.properties}
        return {
            "id": self.id,
            "name": self.name,
            "version": self.version,
            "as_of": self.as_of,
            "properties": props,
            "overridden": list(self.overridden),
            "sources": list(self.sources),
        }

    def note(self) -> str:
        """One line for an answer's assumptions."""
        props = dict(self.properties)
        said = ", ".join(
            f"{k} {'on' if v is True else 'off' if v is False else _words(v)}"
            for k, v in props.items()
            if k
            in (
                "kernels",
                "attention",
                "loss",
                "master_weights",
                "optimizer_states",
                "activation_offload",
                "fused_activations",
                "cuda_graphs",
                "continuous_batching",
                "parallelism",
            )
        )
        changed = f"; overridden: {', '.join(self.overridden)}" if self.overridden else ""
        return f"stack {self.id} ({self.name}): {said}{changed}"


def _words(value: Any) -> str:
    return "/".join(map(str, value)) if isinstance(value, tuple | list) else str(value)


def _compute(record: Any, props: Mapping[str, Any], fitted_too: bool = True) -> Compute:
    kernels = props["kernels"]
    fitted = dict(record.compute) if fitted_too else {}
    native = props["attention"] == "native"
    return Compute(
        efficiency_16bit=float(fitted.get("efficiency_16bit", OPTIMIZED.efficiency_16bit)),
        efficiency_8bit=float(fitted.get("efficiency_8bit", OPTIMIZED.efficiency_8bit)),
        memory_share=float(fitted.get("memory_share", MEMORY_SHARE[kernels])),
        source=str(fitted.get("fit", OPTIMIZED.source)),
        attention_share=float(fitted.get("attention_share", OPTIMIZED.attention_share)),
        host_s=float(fitted.get("host_s", OPTIMIZED.host_s)),
        native_attention_speedup=float(
            fitted.get("native_attention_speedup", OPTIMIZED.native_attention_speedup)
        )
        if native
        else 1.0,
    )


def _serving(record: Any, props: Mapping[str, Any], fitted_too: bool = True) -> Serving:
    fitted = dict(record.serving) if fitted_too else {}
    defaults = dict(SERVING_DEFAULTS)
    if props["kernels"] == "fused":  # the fused stack's GEMMs (parallel's old optimized)
        defaults["prefill_efficiency"] = OPTIMIZED.efficiency_16bit
    values = {k: float(fitted.get(k, v)) for k, v in defaults.items()}
    return Serving(**values, source=str(fitted.get("fit", "defaults (no published fit)")))


def known(knowledge: Knowledge, task: str | None = None) -> list[str]:
    return [s.id for s in knowledge.stacks.values() if task is None or task in s.tasks]


def default_id(
    knowledge: Knowledge, task: str, method: str | None, decoder: bool, precision: str = "",
    splits: bool = False,
) -> str:  # fmt: skip
    """The most common stack for the work: stock PyTorch for vision and encoders, the
    library most people fine-tune with for LoRA and QLoRA, Transformers for full training
    of a language model (Transformer Engine's for FP8 training, or for a layout that
    ``splits`` the model: tensor, pipeline or context parallel), and the most used serving
    engine for generation."""
    wanted = ["vision"]
    if decoder:
        if task == "inference":
            wanted = ["inference"]
        elif method in ("lora", "qlora"):
            wanted = [method, "fine-tuning", "training"]
        else:
            wanted = [task, "training"]
        if precision == "fp8" and task != "inference":
            wanted.insert(0, "fp8")
        if splits and task != "inference":
            wanted.insert(0, "model-parallel")
    for what in wanted:
        for s in knowledge.stacks.values():
            if what in s.default_for and task in s.tasks:
                return s.id
    return "pytorch"


def resolve(
    knowledge: Knowledge,
    name: str | None,
    options: Mapping[str, Any] | None = None,
    task: str | None = None,
    method: str | None = None,
    decoder: bool = False,
    field: str = "stack",
    fitted: bool = True,
    precision: str = "",
    splits: bool = False,
) -> Stack:
    """The stack ``name`` (an id or alias; None: the default for the work) with
    ``options`` overriding its properties; InvalidRequest names the field and the known
    values. Without ``fitted``, its constants before its own fit (the priors a validation
    that leaves its publications out starts from)."""
    if name is None:
        ident = default_id(knowledge, task or "training", method, decoder, precision, splits)
    else:
        found = knowledge.stack_index.resolve(str(name))
        if found is None:
            raise InvalidRequest(field, f"one of {', '.join(known(knowledge))}", name)
        ident = found
    record = knowledge.stacks[ident]
    if task is not None and task not in record.tasks:
        fits = ", ".join(known(knowledge, task))
        raise InvalidRequest(
            field, f"a stack that runs {task} ({fits}); {ident} runs {', '.join(record.tasks)}"
        )
    props = dict(record.properties)
    overridden = []
    for key, value in (options or {}).items():
        if key not in PROPERTIES:
            raise InvalidRequest(f"{field}_options.{key}", f"one of {', '.join(PROPERTIES)}", key)
        problem = property_error(key, value)
        if problem:
            raise InvalidRequest(f"{field}_options.{key}", problem, value)
        if props.get(key) != value:
            overridden.append(key)
        props[key] = value
    frozen = tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in props.items())
    return Stack(
        id=ident,
        name=record.name,
        tasks=record.tasks,
        properties=frozen,
        overridden=tuple(overridden),
        compute=_compute(record, props, fitted),
        serving=_serving(record, props, fitted),
        sources=record.sources,
        as_of=record.as_of.isoformat(),
        version=record.version,
        architecture_factors=tuple(sorted(knowledge.architecture_factors.items()))
        if fitted
        else (),
    )


def named(knowledge: Knowledge, name: str) -> Stack:
    """The stack ``name`` as ``knowledge`` defines it (no options, fitted), resolved once
    and kept with the knowledge: the ranking's and the validation's fits ask for the same
    stack in their loops."""
    key = ("named stack", name)
    found: Stack | None = knowledge.derived.get(key)
    if found is None:
        found = knowledge.derived[key] = resolve(knowledge, name)
    return found


def held(memory: Memory, stack: Stack, trains: bool, tokens: float, vocab: int,
         layers: int, optimizer: str | None, head: float = 0.0) -> Memory:  # fmt: skip
    """``memory`` (eager PyTorch's, as the profiler counts it; the fused stacks' activations
    already replaced by :func:`service.engine.estimating.layout.fused_memory`) as ``stack``
    holds it:
    its loss, its weights' and optimizer states' precision, its offloaded activations (the
    layers': ``head``, what lies beyond them, stays on the GPU)."""
    if not trains or stack.step_model:
        return memory
    out = memory
    loss = stack.get("loss")
    if vocab and loss != "full-fp32":
        saved = (1.0 - loss_share(stack)) * LOSS_BYTES * tokens * vocab
        cut = min(saved, out.temporary_peak_bytes)
        out = replace(
            out,
            temporary_peak_bytes=out.temporary_peak_bytes - cut,
            activations_bytes=max(0.0, out.activations_bytes - (saved - cut)),
        )
    if stack.get("master_weights") == "none":
        out = replace(out, master_weights_bytes=0.0)
    if stack.get("paged_optimizer"):  # paged in a tensor at a time by the step
        out = replace(out, optimizer_states_bytes=0.0)
    if stack.get("optimizer_in_backward") and layers:  # one layer's gradients at a time
        grads = out.gradients_bytes
        kept = grads / layers
        out = replace(out, gradients_bytes=kept,
                      freed_before_peak_bytes=max(0.0, out.freed_before_peak_bytes
                                                  - (grads - kept)))  # fmt: skip
    if optimizer in (None, "adamw", "adam"):  # fp32 states as counted; else as asked
        scale = {"fp32": 1.0, "bf16": 0.5, "8bit": 0.25}[stack.get("optimizer_states")]
        out = replace(out, optimizer_states_bytes=out.optimizer_states_bytes * scale)
    if stack.get("activation_offload") and layers:
        kept = min(1.0, OFFLOAD_LAYERS_ON_GPU / layers)
        beyond = min(head, out.activations_bytes)
        out = replace(out, activations_bytes=(out.activations_bytes - beyond) * kept + beyond)
    return out


def offloaded_activation_bytes(memory: Memory, stack: Stack, layers: int) -> float:
    """What activation offloading moves to host memory (0 without it)."""
    if not stack.get("activation_offload") or not layers:
        return 0.0
    return memory.activations_bytes * (1 - min(1.0, OFFLOAD_LAYERS_ON_GPU / layers))


def for_work(
    knowledge: Knowledge,
    name: str | None,
    options: Mapping[str, Any] | None,
    profile: Any,
    shape: Any,
    field: str = "stack",
    fitted: bool = True,
    splits: bool = False,
) -> Stack:
    """:func:`resolve` for a profiled workload (a :class:`StepProfile` and its
    :class:`ModelShape`, None for a model that is not a transformer): its task, its
    fine-tuning method, whether it is a language model and whether its layout ``splits``
    the model (tensor, pipeline or context parallel)."""
    decoder = shape is not None and shape.lm_head
    task = "fine-tuning" if profile.task == "fine-tuning" else profile.task
    if task not in ("training", "fine-tuning", "inference"):
        task = "training"
    return resolve(
        knowledge, name, options, task, profile.method, decoder, field, fitted,
        profile.precision, splits,
    )  # fmt: skip


def check_formats(stack: Stack, precision: str, weight_precision: str | None) -> None:
    """Refuse a precision the stack does not run (its ``weight_precisions``), naming the
    field and the ones it does; the step-model stack and the 4-bit QLoRA base are let by."""
    formats = ", ".join(stack.get("weight_precisions"))
    if weight_precision is not None and not stack.runs(weight_precision):
        raise InvalidRequest(
            "weight_precision",
            f"{stack.id} serves {formats}; another stack: GET /v1/stacks",
            weight_precision,
        )
    if precision in ("fp8", "int8", "int4") and not stack.step_model and not stack.runs(precision):
        raise InvalidRequest(
            "workload.precision",
            f"{stack.id} runs {formats}; another stack: GET /v1/stacks",
            precision,
        )

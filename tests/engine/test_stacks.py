"""The named software stacks: knowledge records, resolution, memory habits, checked on the
CPU where a habit can run there."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from knowledge import load_knowledge
from knowledge.errors import KnowledgeInvalid
from knowledge.loader import default_root
from knowledge.stack_schemas import PROPERTIES, property_error
from profiles.measure import allocator_peak
from profiles.profile import Memory
from service.engine.errors import InvalidRequest
from service.engine.estimating import software as stacks


@pytest.fixture(scope="module")
def kb():
    return load_knowledge()


def test_every_stack_has_its_properties_sources_and_date(kb):
    named = {"hf-transformers", "hf-trl-peft", "torchtitan", "torchtune", "deepspeed",
             "megatron-te", "hf-generate", "vllm", "tensorrt-llm", "sglang"}  # fmt: skip
    assert named <= set(kb.stacks)
    for stack in kb.stacks.values():
        assert stack.sources, stack.id
        assert all(len(s) > 10 for s in stack.sources), stack.id
        assert stack.as_of.year >= 2023
        assert stack.version
        assert set(stack.properties) == set(PROPERTIES), stack.id
        for name, value in stack.properties.items():
            assert property_error(name, value) is None, (stack.id, name)
        for block in (stack.compute, stack.serving):
            if block:  # fitted constants name their fit
                assert "rightsize validate" in block["fit"] or "fitted" in block["fit"]


def test_each_task_has_a_default_and_aliases_resolve(kb):
    index = kb.stack_index
    assert index.resolve("optimized") == index.resolve("NeMo") == "megatron-te"
    assert index.resolve("FSDP2") == "torchtitan"
    assert index.resolve("trt-llm") == "tensorrt-llm"
    assert stacks.default_id(kb, "training", None, decoder=True) == "hf-transformers"
    assert stacks.default_id(kb, "fine-tuning", "qlora", decoder=True) == "hf-trl-peft"
    assert stacks.default_id(kb, "inference", None, decoder=True) == "vllm"
    assert stacks.default_id(kb, "training", None, decoder=False) == "pytorch"
    # FP8 training without a stack named: one that trains in FP8
    fp8 = stacks.default_id(kb, "training", None, decoder=True, precision="fp8")
    assert kb.stacks[fp8].properties["weight_precisions"].count("fp8") == 1
    assert fp8 == "megatron-te"


def test_an_unknown_stack_or_property_names_the_field_and_the_known_values(kb):
    with pytest.raises(InvalidRequest) as err:
        stacks.resolve(kb, "tensorflow")
    assert err.value.field == "stack"
    assert "torchtitan" in str(err.value)
    with pytest.raises(InvalidRequest) as err:
        stacks.resolve(kb, "torchtune", {"flash": True})
    assert err.value.field == "stack_options.flash"
    assert "activation_offload" in str(err.value)
    with pytest.raises(InvalidRequest) as err:
        stacks.resolve(kb, "torchtune", {"loss": "fast"})
    assert err.value.field == "stack_options.loss"
    assert "chunked" in str(err.value)
    with pytest.raises(InvalidRequest) as err:
        stacks.resolve(kb, "vllm", task="training")
    assert "runs inference" in str(err.value)


def test_overrides_are_reported(kb):
    stack = stacks.resolve(kb, "torchtitan", {"kernels": "compiled", "loss": "full-fp32"})
    assert stack.overridden == ("kernels",)  # the loss was already full-fp32
    assert stack.to_dict()["properties"]["kernels"] == "compiled"
    assert "overridden: kernels" in stack.note()


def _memory() -> Memory:
    gib = 2**30
    return Memory(
        parameters_bytes=16 * gib, gradients_bytes=16 * gib, optimizer_states_bytes=64 * gib,
        master_weights_bytes=32 * gib, activations_bytes=40 * gib, kv_cache_bytes=0,
        temporary_peak_bytes=10 * gib, runtime_overhead_bytes=1 * gib,
        freed_before_peak_bytes=16 * gib,
    )  # fmt: skip


def test_the_memory_habits_change_what_a_step_holds(kb):
    base = _memory()
    tokens, vocab = 8192, 128256

    def held(name, options=None, optimizer=None):
        stack = stacks.resolve(kb, name, options)
        return stacks.held(base, stack, True, tokens, vocab, 32, optimizer)

    eager = held("hf-transformers")
    assert eager == base  # as the profiler counts eager PyTorch
    tune = held("torchtune")  # pure bf16, bf16 states, chunked loss
    assert tune.master_weights_bytes == 0
    assert tune.optimizer_states_bytes == base.optimizer_states_bytes / 2
    saved = (1 - stacks.LOSS_SHARE["chunked"]) * stacks.LOSS_BYTES * tokens * vocab
    assert base.total_bytes - tune.total_bytes == pytest.approx(
        32 * 2**30 + 32 * 2**30 + saved, rel=1e-9
    )
    assert held("torchtune", {"optimizer_states": "8bit"}).optimizer_states_bytes == (
        base.optimizer_states_bytes / 4
    )
    # an optimizer asked for in the workload is counted by the profiler already
    assert held("torchtune", optimizer="8-bit adam").optimizer_states_bytes == (
        base.optimizer_states_bytes
    )
    offloaded = held("torchtune", {"activation_offload": True})
    assert offloaded.activations_bytes == pytest.approx(base.activations_bytes * 2 / 32)
    paged = held("hf-trl-peft", {"paged_optimizer": True})
    assert paged.optimizer_states_bytes == 0
    in_backward = held("torchtune", {"optimizer_in_backward": True})
    assert in_backward.gradients_bytes == pytest.approx(base.gradients_bytes / 32)
    assert in_backward.total_bytes <= tune.total_bytes


@pytest.mark.slow  # a real step on the CPU
def test_a_chunked_loss_holds_what_the_estimate_says_measured_on_the_cpu():
    """The CPU allocator's peak of a language-model loss over its whole logits at once and
    in 8 chunks (torchtune's CEWithChunkedOutputLoss): the share the estimate uses for the
    chunked loss is the measured one."""
    torch.manual_seed(0)
    tokens, hidden, vocab = 1024, 256, 8192
    h = torch.randn(tokens, hidden, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(vocab, hidden, dtype=torch.bfloat16, requires_grad=True)
    y = torch.randint(0, vocab, (tokens,))

    def whole() -> None:
        logits = h @ w.t()  # Transformers returns them with the loss: alive throughout
        F.cross_entropy(logits.float(), y).backward()

    def chunked() -> None:
        loss = sum(
            F.cross_entropy((hc @ w.t()).float(), yc, reduction="sum")
            for hc, yc in zip(h.chunk(8), y.chunk(8), strict=True)
        )
        (loss / tokens).backward()

    peaks = []
    for run in (whole, chunked):
        h.grad = w.grad = None
        found = allocator_peak(run)
        peaks.append((found.peak_bytes - found.start_bytes) / (tokens * vocab))
    assert peaks[0] == pytest.approx(14.0, rel=0.05)  # logits, fp32 copy, log-softmax, grads
    assert peaks[1] / peaks[0] == pytest.approx(stacks.LOSS_SHARE["chunked"], abs=0.03)


def test_checkpointed_layers_leave_the_loss_whole_measured_on_the_cpu():
    """With every layer checkpointed, autograd keeps each layer's 16-bit input and, beyond
    the layers, the loss's fp32 log-probabilities over the whole vocabulary: what
    layout.memory_per_gpu keeps whole under full checkpointing (the loss's bytes a logit,
    stacks.LOSS_KEPT), where it used to scale them with the layers'."""
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    tokens, hidden, vocab, layers = 512, 64, 4096, 4
    blocks = [
        torch.nn.Sequential(torch.nn.Linear(hidden, 4 * hidden), torch.nn.SiLU(),
                            torch.nn.Linear(4 * hidden, hidden)).to(torch.bfloat16)
        for _ in range(layers)
    ]  # fmt: skip
    head = torch.nn.Linear(hidden, vocab, bias=False).to(torch.bfloat16)
    x = torch.randn(tokens, hidden, dtype=torch.bfloat16, requires_grad=True)
    y = torch.randint(0, vocab, (tokens,))
    kept: dict[int, int] = {}
    weights = {p.untyped_storage().data_ptr() for p in head.parameters()}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()  # by storage: a weight's transpose is the weight
        if storage.data_ptr() not in weights:
            kept[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        h = x
        for block in blocks:
            h = checkpoint(block, h, use_reentrant=False)
        loss = F.cross_entropy(head(h).float(), y)
    inputs = layers * tokens * hidden * 2  # each layer's 16-bit input
    beyond = sum(kept.values()) - inputs
    assert beyond == pytest.approx(stacks.LOSS_KEPT["full-fp32"] * tokens * vocab, rel=0.02)
    loss.backward()


def test_adamw_keeps_its_states_in_the_weights_precision_on_the_cpu():
    """Pure-bf16 training (torchtune's) keeps AdamW's two states in bf16: half the bytes of
    mixed precision's fp32 states, as the estimate counts them."""
    for dtype, per_parameter in ((torch.float32, 8), (torch.bfloat16, 4)):
        p = torch.nn.Parameter(torch.zeros(1000, dtype=dtype))
        p.grad = torch.zeros_like(p)
        opt = torch.optim.AdamW([p])
        opt.step()
        state = opt.state[p]
        held = sum(t.numel() * t.element_size() for k, t in state.items() if k != "step")
        assert held == per_parameter * 1000
    scale = {"fp32": 1.0, "bf16": 0.5}
    assert scale["bf16"] == 4 / 8


def test_a_bad_stacks_file_is_refused_naming_the_row_and_field(tmp_path: Path):
    root = tmp_path / "data"
    shutil.copytree(default_root(), root)
    path = root / "stacks.yaml"
    rows = yaml.safe_load(path.read_text())
    rows[1]["properties"]["loss"] = "magic"
    rows[2]["compute"] = {"efficiency_16bit": 0.7}  # a fitted constant without its fit
    path.write_text(yaml.safe_dump(rows))
    with pytest.raises(KnowledgeInvalid) as err:
        load_knowledge(root)
    text = str(err.value)
    assert "stacks.yaml" in text
    assert "loss" in text
    assert "compute.fit" in text

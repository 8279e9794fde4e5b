"""Traced sample runs: ingest (now, or as a background job), store, project, advise.

A trace is stored under its ``trace_id`` in the cache: Redis with a TTL when configured,
in-process otherwise. The id is a hash of the uploaded bytes, the step marker, the owner
(the key that uploaded it) and the other options (:func:`trace_id_of`): a trace is its
owner's, read by its owner and the administrators alone (:mod:`service.engine.owners`);
another key's upload of the same bytes, or the owner's with other options, is another
trace. A trace whose JSON is larger than :attr:`Bounds.inline_bytes` is a background
job (on the rq queue with Redis, in this process without), analysed in a process of its
own within the time and memory of its :class:`Bounds` (:mod:`profiles.trace.bounded`).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from knowledge import Knowledge
from knowledge.records import Gpu
from profiles.trace.bounded import analyse_bounded
from profiles.trace.read import analysed
from profiles.trace.stream import Limits
from service.engine.errors import UnknownReference
from service.engine.estimating.projection import advice, mixed_tensor_rate, project
from service.engine.owners import Reader
from service.engine.ports import KeyValueStore
from service.engine.rules import RuleBook

PREFIX = "trace:"
UPLOAD_PREFIX = "upload:"
QUEUE = "rightsize"


@dataclass(frozen=True)
class TraceOptions:
    reference_gpu: str | None = None
    step_marker: str | None = None
    precision: str | None = None
    batch_size: int | None = None
    profile_id: str | None = None  # a profile of the traced model (POST /v1/profiles)
    owner: str | None = None  # the id of the API key that uploaded it


@dataclass(frozen=True)
class Bounds:
    """What a trace analysed in the background may take: the size answered in the request
    (JSON bytes, decompressed), and the analysis's time and resident memory."""

    inline_bytes: int = 32 * 2**20
    time_limit_s: float = 600.0
    memory_bytes: int = 4 * 2**30


@dataclass
class TraceService:
    knowledge: Knowledge
    cache: KeyValueStore
    ttl_s: int
    limits: Limits
    profiles: Any = None  # the ProfileService, to match an attached profile
    bounds: Bounds = field(default_factory=Bounds)
    rules: RuleBook = field(default_factory=RuleBook.load)  # the trace's advice

    def ingest(self, raw: IO[bytes], options: TraceOptions) -> dict[str, Any]:
        """Parse and analyse an upload now; store and return the record."""
        return ingest(raw, options, self.cache, self.ttl_s, self.limits)

    def ingest_file(
        self, path: Path, options: TraceOptions, report: Callable[[str], None] | None = None
    ) -> dict[str, Any]:
        """Analyse the trace in ``path`` in a bounded process of its own; store and return
        the record (a background job's work)."""
        return ingest_file(path, options, self.cache, self.ttl_s, self.limits, self.bounds, report)

    def get(self, trace_id: str, reader: Reader) -> dict[str, Any] | None:
        """The stored record, if ``reader`` may read it (None otherwise, as for no trace)."""
        hit = self.cache.get(PREFIX + trace_id)
        if hit is None:
            return None
        record: dict[str, Any] = json.loads(hit)
        return record if reader.may_read(owner_of(record)) else None

    def reference(self, record: dict[str, Any], override: str | None = None) -> Gpu | None:
        """The reference GPU: as the client named it, else the trace's device name."""
        name = override or record["options"].get("reference_gpu")
        name = name or record["analysis"].get("device_name")
        ident = self.knowledge.resolve_gpu(name) if name else None
        return self.knowledge.gpus[ident] if ident else None

    def view(self, record: dict[str, Any]) -> dict[str, Any]:
        """The stored record as the API shows it: reference GPU resolved, advice added."""
        ref = self.reference(record)
        analysis = record["analysis"]
        notes = list(analysis.get("notes") or [])
        if ref is None:
            named = record["options"].get("reference_gpu") or analysis.get("device_name")
            what = (
                f"reference GPU '{named}' is not in the catalog"
                if named
                else "the trace names no GPU (no deviceProperties)"
            )
            notes.append(f"{what}: projections need reference_gpu (a GPU id, see /v1/gpus)")
        return {
            **record,
            "reference_gpu_id": ref.id if ref else None,
            "efficiency": self._efficiency(record, ref, notes),
            "advice": advice(analysis, ref, self.knowledge, self.rules),
            "notes": notes,
        }

    def _efficiency(
        self, record: dict[str, Any], ref: Gpu | None, notes: list[str]
    ) -> dict[str, Any]:
        """Achieved rates against the reference GPU's peaks: from the FLOPs the trace
        recorded (``with_flops``), and from the profile of the model when one is attached."""
        analysis = record["analysis"]
        options = record["options"]
        out: dict[str, Any] = {"achieved_tflops": analysis.get("achieved_tflops") or {}}
        if ref is not None:
            shares = analysis.get("tensor_core_precision") or {}
            sixteen = "bf16" if options.get("precision") == "bf16" else "fp16"
            peaks = {
                "tensor_gemm": mixed_tensor_rate(ref, shares, sixteen),
                "simt_gemm": ref.fp32_tflops,
            }
            out["fraction_of_peak"] = {
                k: v / peaks[k] for k, v in out["achieved_tflops"].items() if k in peaks
            }
        profile_id = options.get("profile_id")
        step_us = analysis.get("step_time_us")
        if profile_id and self.profiles is not None:
            profile = self.profiles.get(profile_id)
            if profile is None:
                notes.append(f"profile '{profile_id}' not found (expired?): FLOPs not matched")
            elif step_us:
                flops = float(profile["flops"]["total"])
                out["profile_flops_per_step"] = flops
                out["profile_achieved_tflops"] = flops / (step_us * 1e-6) / 1e12
                peak = ref.peak_tflops(options.get("precision") or "bf16") if ref else None
                if peak:
                    out["profile_fraction_of_peak"] = out["profile_achieved_tflops"] / peak
        return out

    def projections(
        self, record: dict[str, Any], gpu_ids: list[str], count: int, reference_gpu: str | None
    ) -> dict[str, Any]:
        analysis = record["analysis"]
        if not analysis.get("breakdown"):  # first: without GPU activity no reference helps
            raise UnknownReference("no GPU activity in the trace to project")
        ref = self.reference(record, reference_gpu)
        if ref is None:
            name = analysis.get("device_name")
            raise UnknownReference(
                f"the reference GPU '{name}' is not in the catalog"
                if name
                else "the trace names no GPU"
            )
        sixteen = "bf16" if record["options"].get("precision") == "bf16" else "fp16"
        targets = [self.knowledge.gpu(g) for g in gpu_ids]
        return {
            "trace_id": record["trace_id"],
            "reference_gpu_id": ref.id,
            "reference_step_time_us": analysis["breakdown"]["wall_us"],
            "projections": [
                project(analysis, ref, t, self.knowledge, count, sixteen) for t in targets
            ],
            "assumptions": [
                "each part of the step is scaled by the ratio of the resource that bounds it; "
                "idle time (input, synchronisation, launches, host work) is not scaled",
                "the same kernels run on the target (same framework, precision and batch)",
            ],
            "knowledge_version": self.knowledge.version,
        }


def trace_id_of(content_id: str, options: TraceOptions) -> str:
    """A stored trace's id: the hash of its bytes and step marker (``content_id``, from
    :func:`profiles.trace.read.analysed`) with its owner and every other option."""
    digest = hashlib.sha256(content_id.encode())
    digest.update(json.dumps(asdict(options), sort_keys=True).encode())
    return digest.hexdigest()[:24]


def owner_of(record: dict[str, Any]) -> str | None:
    """The key that uploaded a stored trace (None for one stored before owners were kept)."""
    owner = record["options"].get("owner")
    return str(owner) if owner is not None else None


def record_of(
    analysis: dict[str, Any], content_id: str, options: TraceOptions, seconds: float
) -> dict[str, Any]:
    """What is stored of a trace: its analysis, id and options (its owner among them),
    and the parse's time."""
    return {
        "trace_id": trace_id_of(content_id, options),
        "analysis": analysis,
        "options": asdict(options),
        "parse_seconds": round(seconds, 4),
    }


def store(record: dict[str, Any], cache: KeyValueStore, ttl_s: int) -> dict[str, Any]:
    cache.set(PREFIX + record["trace_id"], json.dumps(record).encode(), ttl_s, durable=True)
    return record


def ingest(
    raw: IO[bytes], options: TraceOptions, cache: KeyValueStore, ttl_s: int, limits: Limits
) -> dict[str, Any]:
    """Read, analyse and store one trace (a small one, in the request)."""
    started = time.monotonic()
    analysis, content_id = analysed(raw, limits, options.step_marker)
    return store(record_of(analysis, content_id, options, time.monotonic() - started), cache, ttl_s)


def ingest_file(
    path: Path,
    options: TraceOptions,
    cache: KeyValueStore,
    ttl_s: int,
    limits: Limits,
    bounds: Bounds,
    report: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Analyse the trace in ``path`` in a process of its own, within ``bounds``; store it."""
    started = time.monotonic()
    analysis, content_id = analyse_bounded(
        path, limits, options.step_marker, bounds.time_limit_s, bounds.memory_bytes, report
    )
    return store(record_of(analysis, content_id, options, time.monotonic() - started), cache, ttl_s)

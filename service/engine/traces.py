"""Traced sample runs: ingest (now, or as a background job), store, project, advise.

A trace is stored under its ``trace_id`` (a hash of the uploaded bytes and the step
marker) in the cache: Redis with a TTL when configured, in-process otherwise. Uploads
above ``async_bytes`` go to an rq queue on Redis; their state is read back by job id.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from dataclasses import asdict, dataclass
from typing import IO, Any

from knowledge import Knowledge
from knowledge.records import Gpu
from profiles.trace.read import analysis_dict, read_trace
from profiles.trace.stream import Limits
from service.engine.errors import UnknownReference
from service.engine.ports import KeyValueStore
from service.engine.projection import advice, mixed_tensor_rate, project

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


class _Hashing(io.RawIOBase):
    def __init__(self, raw: IO[bytes]) -> None:
        self.raw, self.digest = raw, hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.raw.read(len(buffer))
        self.digest.update(data)
        buffer[: len(data)] = data
        return len(data)


@dataclass
class TraceService:
    knowledge: Knowledge
    cache: KeyValueStore
    ttl_s: int
    limits: Limits
    profiles: Any = None  # the ProfileService, to match an attached profile

    def ingest(self, raw: IO[bytes], options: TraceOptions) -> dict[str, Any]:
        """Parse and analyse an upload now; store and return the record."""
        return ingest(raw, options, self.cache, self.ttl_s, self.limits)

    def get(self, trace_id: str) -> dict[str, Any] | None:
        hit = self.cache.get(PREFIX + trace_id)
        return json.loads(hit) if hit is not None else None

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
            "advice": advice(analysis, ref, self.knowledge),
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


def ingest(
    raw: IO[bytes], options: TraceOptions, cache: KeyValueStore, ttl_s: int, limits: Limits
) -> dict[str, Any]:
    """Read, analyse and store one trace (in a request or in a background job)."""
    started = time.monotonic()
    hashing = _Hashing(raw)
    analysis, stats = read_trace(io.BufferedReader(hashing, 1 << 20), limits, options.step_marker)
    hashing.digest.update((options.step_marker or "").encode())
    trace_id = hashing.digest.hexdigest()[:24]
    record: dict[str, Any] = {
        "trace_id": trace_id,
        "analysis": analysis_dict(analysis, stats),
        "options": asdict(options),
        "parse_seconds": round(time.monotonic() - started, 4),
    }
    cache.set(PREFIX + trace_id, json.dumps(record).encode(), ttl_s)
    return record

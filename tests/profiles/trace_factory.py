"""Build small Kineto-style traces with known answers, for the trace-reader tests."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from typing import Any

DEVICE = {
    "id": 0,
    "name": "NVIDIA H100 80GB HBM3",
    "totalGlobalMem": 85_000_000_000,
    "computeMajor": 9,
    "computeMinor": 0,
    "numSms": 132,
}


@dataclass
class TraceBuilder:
    """Events on one CPU thread (pid 1, tid 1) launching onto GPU 0 streams."""

    device: dict[str, Any] = field(default_factory=lambda: dict(DEVICE))
    events: list[dict[str, Any]] = field(default_factory=list)
    correlation: int = 0

    def cpu(self, name: str, ts: float, dur: float, cat: str = "cpu_op", **args: Any) -> None:
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": dur,
                "args": args,
            }
        )

    def step(self, n: int, ts: float, dur: float) -> None:
        self.cpu(f"ProfilerStep#{n}", ts, dur, cat="user_annotation")

    def kernel(
        self,
        name: str,
        launch: float,
        ts: float,
        dur: float,
        stream: int = 7,
        cat: str = "kernel",
        **args: Any,
    ) -> None:
        """A launch call at ``launch`` and the GPU activity it starts at ``ts``."""
        self.correlation += 1
        self.events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": launch,
                "dur": 3,
                "args": {"correlation": self.correlation},
            }
        )
        self.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": 0,
                "tid": stream,
                "ts": ts,
                "dur": dur,
                "args": {
                    "device": self.device["id"],
                    "stream": stream,
                    "correlation": self.correlation,
                    **args,
                },
            }
        )
        self.events.append(
            {
                "ph": "f",
                "id": self.correlation,
                "pid": 0,
                "tid": stream,
                "ts": ts,
                "cat": "ac2g",
                "name": "ac2g",
                "bp": "e",
            }
        )

    def document(self) -> dict[str, Any]:
        return {
            "schemaVersion": 1,
            "deviceProperties": [self.device],
            "distributedInfo": {"rank": 0},
            "traceEvents": self.events,
        }

    def kineto_bytes(self) -> bytes:
        """Serialised the way Kineto writes it: one event per block, ``"ph"`` first."""
        doc = self.document()
        head = {k: v for k, v in doc.items() if k != "traceEvents"}
        parts = [json.dumps(head)[:-1] + ', "traceEvents": [\n']
        rendered = []
        for event in doc["traceEvents"]:
            body = json.dumps(event)[1:]  # keeps "ph" first
            rendered.append("  {\n    " + body[:-1] + "\n  }")
        parts.append(",\n".join(rendered))
        parts.append("\n]}")
        return "".join(parts).encode()

    def gzipped(self) -> bytes:
        return gzip.compress(self.kineto_bytes())


GEMM = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(Params)"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"
NCCL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"


def known_steps(steps: int = 4) -> TraceBuilder:
    """Steps of 1000 µs each: on the GPU 400 µs tensor GEMM overlapped on another stream by
    100 µs of NCCL (50 µs of it exposed), 200 µs elementwise, the rest idle; for the step's
    first 200 µs the host is in a data-loader span."""
    b = TraceBuilder()
    for n in range(steps):
        t0 = 10_000.0 + n * 1000.0
        b.step(n, t0, 1000.0)
        b.cpu("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t0, 200.0)
        b.kernel(GEMM, t0 + 200, t0 + 250, 400.0)
        b.kernel(NCCL, t0 + 201, t0 + 600, 100.0, stream=20)
        b.kernel(ELEMENTWISE, t0 + 210, t0 + 700, 200.0)
    return b

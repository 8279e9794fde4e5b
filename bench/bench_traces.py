"""Trace reading speed and memory.

Prints, for the largest real trace in ../shared/data/hta-kineto-traces and for a synthetic
Kineto-layout trace of 2 million events (written gzipped to a temporary file), the time to
read and analyse it, events per second, and the growth of the process's peak RSS while
doing so (each in a fresh process, imports done first). Targets (issue 4): RSS growth
under 300 MB; at least 200k events/s.

Run: .venv/bin/python bench/bench_traces.py [--events N]
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from knowledge.derive import default_shared_root

CHILD = textwrap.dedent(
    """
    import json, resource, sys, time
    from profiles.trace.read import read_trace
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    with open(sys.argv[1], "rb") as handle:
        analysis, stats = read_trace(handle)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"seconds": seconds, "events": stats.events, "kernels": analysis.kernels,
                      "rss_growth_mb": (after - before) / 1024,
                      "compressed_mb": stats.compressed_bytes / 2**20,
                      "decompressed_mb": stats.decompressed_bytes / 2**20}))
    """
)


def synthetic(path: Path, events: int) -> None:
    """A Kineto-like trace: steps, CPU ops, launches, kernels, flows, in Kineto's layout."""
    names = ["void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(P)",
             "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>",
             "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"]  # fmt: skip
    head = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB",
            "numSms": 108}], "distributedInfo": {"rank": 0, "world_size": 8}}  # fmt: skip
    with gzip.open(path, "wt", compresslevel=1) as out:
        out.write(json.dumps(head)[:-1] + ', "traceEvents": [\n')
        t, corr, written = 0.0, 0, 0
        while written < events:
            if corr % 1000 == 0:
                step = {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{corr // 1000}",
                        "pid": 1, "tid": 1, "ts": t, "dur": 1000 * 12.0}  # fmt: skip
                out.write("  {\n    " + json.dumps(step)[1:-1] + "\n  },\n")
                written += 1
            corr += 1
            blocks = [
                {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t,
                 "dur": 8, "args": {"External id": corr, "Input Dims": [[64, 64], [64, 64]]}},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                 "tid": 1, "ts": t + 1, "dur": 4, "args": {"correlation": corr}},
                {"ph": "X", "cat": "kernel", "name": names[corr % 3], "pid": 0, "tid": 7,
                 "ts": t + 5, "dur": 6, "args": {"device": 0, "stream": 7, "correlation": corr,
                                                  "External id": corr, "grid": [64, 1, 1]}},
                {"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": t + 5, "cat": "ac2g",
                 "name": "ac2g", "bp": "e"},
            ]  # fmt: skip
            for block in blocks:
                out.write("  {\n    " + json.dumps(block)[1:-1] + "\n  },\n")
            written += len(blocks)
            t += 12.0
        out.write('  {\n    "ph": "i", "name": "end", "ts": 0\n  }\n]}')


def measure(path: Path) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", CHILD, str(path)], check=True,
                          capture_output=True, text=True)  # fmt: skip
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def report(label: str, r: dict[str, float]) -> None:
    print(f"{label:48s} {r['events']:>9.0f} events  {r['compressed_mb']:6.1f} MB gz -> "
          f"{r['decompressed_mb']:7.1f} MB  {r['seconds']:6.2f} s  "
          f"{r['events'] / r['seconds']:>9,.0f} events/s (>= 200,000)  "
          f"RSS +{r['rss_growth_mb']:.0f} MB (< 300)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=2_000_000)
    args = parser.parse_args()
    traces = sorted((default_shared_root() / "hta-kineto-traces").glob("*.json.gz"),
                    key=lambda p: p.stat().st_size)  # fmt: skip
    if traces:
        report(f"largest real trace: {traces[-1].name}", measure(traces[-1]))
    else:
        print("no real traces found (../shared/data absent); synthetic only")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "synthetic.json.gz"
        synthetic(path, args.events)
        report(f"synthetic Kineto trace ({args.events:,} events)", measure(path))


if __name__ == "__main__":
    main()

"""The stored benchmark tables, ``knowledge/data/benchmarks/*.csv``, from ``../shared/data``.

Each source family has its own module; this one runs them and merges their tables and reports:

* :mod:`knowledge.derive.benchmarks_lambda`: Lambda PyTorch training throughput → ``lambda.csv``;
* :mod:`knowledge.derive.benchmarks_mlperf`: MLPerf Training time-to-train and MLPerf Inference
  throughput → ``mlperf_training.csv``, ``mlperf_inference.csv``;
* :mod:`knowledge.derive.benchmarks_vidur`: vidur's Llama-2-7B operator timings → ``llm_ops.csv``.

Workload ids refer to the hand-written ``knowledge/data/workloads.yaml``.
"""

from __future__ import annotations

from pathlib import Path

from knowledge.derive import Derived, benchmarks_lambda, benchmarks_mlperf, benchmarks_vidur

PARTS = (benchmarks_lambda.derive, benchmarks_mlperf.derive, benchmarks_vidur.derive)


def derive(shared: Path) -> Derived:
    """All benchmark tables, with every source row left out and why."""
    merged = Derived()
    for part in PARTS:
        result = part(shared)
        for relpath, (columns, rows) in result.tables.items():
            merged.add_table(relpath, columns, rows)
        merged.excluded += result.excluded
    return merged

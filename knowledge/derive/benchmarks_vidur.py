"""vidur's Llama-2-7B operator timings (``vidur-llm-op-profiling/``) → ``benchmarks/llm_ops.csv``.

One row per GPU × tensor-parallel degree × token count × operator (the ten non-attention ops of
vidur's ``mlp.csv``), keeping vidur's median, mean and std in milliseconds. Only tensor-parallel
degrees 1 and 2 are kept: all four (1, 2, 4, 8) make a 6.8 MB table, over the ~3 MB a shipped
table may take; the dropped degrees are reported, one line per file and degree.

What vidur's own sources say about the setup (microsoft/vidur):

* dtype: ``vidur/profiling/mlp/mlp_wrapper.py`` casts the profiled model with
  ``.to(dtype=torch.float16)``, so every row is ``fp16``.
* GPUs: ``docs/profiling.md`` keeps one compute profile per SKU and uses the ``a100`` folder for
  both the Azure NC96ads_A100_v4 node (80 GB A100 **PCIe**) and the DGX A100 (80 GB **SXM4**);
  the ``h100`` folder likewise serves the H100 DGX and an H100 NVL node. Which form factor was
  measured is not stated. The device configs give 80 GB for both, so the A100 rows are named
  ``A100-80GB`` (which the catalog resolves to the SXM4 80 GB part) and the H100 rows ``H100``
  (the SXM5 part); the note on each row says the form factor is an assumption.
* Date: the commit date of 7d47513 is not in the stored copy. ``as_of`` is 2024-05-15, the date
  by which the ``data/profiling/compute/<sku>/<model>/mlp.csv`` layout these files come from was
  documented on vidur's main branch (microsoft/vidur#8): a lower bound, not the commit date.

Each file profiles token counts 2048 and 4096 twice per tensor-parallel degree; the first
measurement is kept and the repeat reported. Non-positive median or mean timings would be
reported too (there are none).
"""

from __future__ import annotations

import csv
from pathlib import Path

from knowledge.derive import Derived

FOLDER = "vidur-llm-op-profiling"
TABLE = "benchmarks/llm_ops.csv"
COLUMNS = [
    "gpu",
    "model",
    "workload",
    "op",
    "num_tokens",
    "tensor_parallel",
    "median_ms",
    "mean_ms",
    "std_ms",
    "dtype",
    "source",
    "as_of",
    "note",
]
OPS = (
    "emb",
    "input_layernorm",
    "attn_pre_proj",
    "attn_rope",
    "attn_post_proj",
    "post_attention_layernorm",
    "mlp_up_proj",
    "mlp_act",
    "mlp_down_proj",
    "add",
)
TENSOR_PARALLEL = (1, 2)
MODEL, WORKLOAD, DTYPE, AS_OF = "llama-2-7b", "llama-2-7b-ops", "fp16", "2024-05-15"
SOURCE = "microsoft/vidur@7d47513 data/profiling/compute/{sku}/meta-llama/Llama-2-7b-hf/mlp.csv"
# vidur's SKU folder → (name as vidur gives it, note on what is known of the part).
GPUS = {
    "a100": ("A100-80GB", "form factor assumed: SXM4"),
    "a40": ("A40", None),
    "h100": ("H100", "form factor assumed: SXM5"),
}


def derive(shared: Path) -> Derived:
    """Derive ``benchmarks/llm_ops.csv``."""
    out = Derived()
    rows: list[dict[str, object]] = []
    for sku in GPUS:
        name = f"{FOLDER}/{sku}_Llama-2-7b-hf_mlp.csv"
        with (shared / name).open(encoding="utf-8", newline="") as handle:
            rows += _rows(sku, name, list(csv.DictReader(handle)), out)
    rows.sort(
        key=lambda r: (r["gpu"], r["tensor_parallel"], r["num_tokens"], OPS.index(str(r["op"])))
    )
    out.add_table(TABLE, COLUMNS, rows)
    return out


def _rows(
    sku: str, name: str, records: list[dict[str, str]], out: Derived
) -> list[dict[str, object]]:
    gpu, note = GPUS[sku]
    seen: dict[tuple[int, int], int] = {}
    dropped: dict[int, int] = {}
    rows = []
    for line, record in enumerate(records, start=2):
        tokens, tp = int(record["num_tokens"]), int(record["num_tensor_parallel_workers"])
        where = f"{name} line {line} (num_tokens {tokens}, tensor parallel {tp})"
        if tp not in TENSOR_PARALLEL:
            dropped[tp] = dropped.get(tp, 0) + 1
            continue
        if (tokens, tp) in seen:
            out.exclude(where, f"repeats the configuration of line {seen[tokens, tp]}; first kept")
            continue
        seen[tokens, tp] = line
        for op in OPS:
            median, mean = (float(record[f"time_stats.{op}.{s}"]) for s in ("median", "mean"))
            if median <= 0 or mean <= 0:
                out.exclude(f"{where} {op}", f"non-positive timing (median {median}, mean {mean})")
                continue
            rows.append(
                {
                    "gpu": gpu,
                    "model": MODEL,
                    "workload": WORKLOAD,
                    "op": op,
                    "num_tokens": tokens,
                    "tensor_parallel": tp,
                    "median_ms": median,
                    "mean_ms": mean,
                    "std_ms": float(record[f"time_stats.{op}.std"]),
                    "dtype": DTYPE,
                    "source": SOURCE.format(sku=sku),
                    "as_of": AS_OF,
                    "note": note,
                }
            )
    for tp, count in sorted(dropped.items()):
        why = f"{count} configurations ({count * len(OPS)} timings): only degrees 1 and 2 are kept"
        out.exclude(f"{name} tensor parallel {tp}", why)
    return rows

"""MLPerf results → ``benchmarks/mlperf_training.csv`` and ``benchmarks/mlperf_inference.csv``.

Training (``mlperf-training/``, v3.0–v4.1, MLCommons' summarizer output): one row per system
row × benchmark column with a time. ``global_batch_size`` and ``samples_to_converge`` come from
the ``_detailed`` file, whose rows are the summary's rows in the same order (checked: the
identifying columns must agree row by row, else the derivation fails). Left out, reported:
systems whose accelerator is not a GPU (TPU, Gaudi, ``N/A`` = CPU only), and results that repeat
an earlier one exactly (same benchmark, GPU count and time to the last digit): the round
repositories carry older results forward (renamed systems, ``-POWER`` twins, the v4.1 H200 rows
with v4.0 scores), and such a result is kept once, under its first appearance.

Inference (``mlperf-inference/``, v3.1 datacenter closed): one row per table row, ``Result``
as the throughput (not "Result at System Name", a Tableau average for the BERT pairs). The
export collapses ``bert-99``/``bert-99.9`` (and ``3d-unet-99``/``-99.9``) into one label, so
each appears as a pair of rows with the same Public ID and scenario. A run that reaches 99.9 %
of the reference accuracy also qualifies for 99 %, so the higher result of a pair is the 99
entry and the lower the 99.9 one; a pair with equal results is one run submitted for both and
kept once. Left out, reported: non-GPU accelerators, ``nan`` accelerators (CPU-only systems)
and empty results.
"""

from __future__ import annotations

import csv
import re
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from knowledge.derive import Derived

TRAINING_TABLE = "benchmarks/mlperf_training.csv"
TRAINING_COLUMNS = [
    "round",
    "division",
    "availability",
    "submitter",
    "system",
    "nodes",
    "gpu",
    "gpu_count",
    "framework",
    "workload",
    "time_to_train_minutes",
    "global_batch_size",
    "samples_to_converge",
    "source",
    "as_of",
    "note",
]
INFERENCE_TABLE = "benchmarks/mlperf_inference.csv"
INFERENCE_COLUMNS = [
    "round",
    "submitter",
    "system",
    "gpu",
    "gpu_count",
    "workload",
    "accuracy",
    "scenario",
    "throughput",
    "throughput_unit",
    "software",
    "source",
    "as_of",
    "note",
]
# Round → publication date of its results (MLCommons press releases).
ROUNDS = {"v3.0": "2023-06-27", "v3.1": "2023-11-08", "v4.0": "2024-06-12", "v4.1": "2024-11-13"}
TRAINING_WORKLOADS = {
    "bert": "bert-large-wikipedia",
    "dlrm_dcnv2": "dlrm-dcnv2-criteo",
    "gpt3": "gpt3-175b-c4",
    "maskrcnn": "mask-rcnn-coco-time-to-train",
    "resnet": "resnet50-imagenet-time-to-train",
    "ssd": "retinanet-openimages",
    "rnnt": "rnnt-librispeech",
    "unet3d": "unet3d-kits19",
    "stable_diffusion": "stable-diffusion-laion",
    "llama2_70b_lora": "llama2-70b-lora-govreport",
    "gnn": "rgat-igbh",
}
_IDENTITY = (
    "division",
    "submitter",
    "system",
    "accelerator_model_name",
    "accelerators_count",
    "framework",
    "details_url",
)
_NOT_GPU = re.compile(r"tpu|gaudi|qualcomm|^n/?a$|^nan$|^$", re.IGNORECASE)
INFERENCE_ROUND, INFERENCE_AS_OF = "v3.1", "2023-09-11"
INFERENCE_FILE = "mlperf-inference/inference_v3.1_mlcommons_table_export.tsv"
INFERENCE_SOURCE = (
    "activescott/gpu-agent@459813e data/MLPerf benchmarks/MLPerf Inference Datacenter/"
    "mlperf-v3.1-Table - Inference_Full Data_data.csv, MLPerf Inference v3.1 result {id}"
)
# "Model MLC" → (workload id, accuracy target the label states, or None when collapsed).
INFERENCE_WORKLOADS = {
    "ResNet": ("resnet50-imagenet-inference", None),
    "BERT": ("bert-large-squad-inference", None),
    "Retinanet": ("retinanet-openimages-inference", None),
    "3D-UNet": ("unet3d-kits19-inference", None),
    "RNN-T": ("rnnt-librispeech-inference", None),
    "gptj-99": ("gptj-cnndm-inference", "99"),
    "gptj-99.9": ("gptj-cnndm-inference", "99.9"),
    "dlrm-v2-99": ("dlrm-v2-criteo-inference", "99"),
    "dlrm-v2-99.9": ("dlrm-v2-criteo-inference", "99.9"),
}
_COLLAPSED = ("BERT", "3D-UNet")  # two accuracy targets under one label


def is_gpu(accelerator: str) -> bool:
    """False for TPUs, Gaudi, Qualcomm AI 100 and CPU-only entries (``N/A``, ``nan``)."""
    return not _NOT_GPU.search(accelerator.strip())


def _sort_key(*columns: str) -> Callable[[dict[str, object]], tuple[str, ...]]:
    return lambda row: tuple(str(row[c] or "") for c in columns)


def _read(path: Path, delimiter: str = ",") -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle, delimiter=delimiter))


def derive(shared: Path) -> Derived:
    """Derive both MLPerf tables."""
    out = Derived()
    out.add_table(TRAINING_TABLE, TRAINING_COLUMNS, _training(shared, out))
    out.add_table(INFERENCE_TABLE, INFERENCE_COLUMNS, _inference(shared, out))
    return out


def _training(shared: Path, out: Derived) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    first: dict[tuple[str, int, float], str] = {}
    for rnd in ROUNDS:
        name = f"mlperf-training/training_{rnd}_summary.csv"
        summary = _read(shared / name)
        detailed = _read(shared / name.replace(".csv", "_detailed.csv"))
        if len(summary) != len(detailed):
            raise ValueError(
                f"{name}: {len(summary)} rows but the _detailed file has {len(detailed)}"
            )
        for index, (row, detail) in enumerate(zip(summary, detailed, strict=True), start=2):
            if [row[k] for k in _IDENTITY] != [detail[k] for k in _IDENTITY]:
                raise ValueError(f"{name} line {index}: the _detailed file's row differs")
            where = f"{name} line {index} ({row['submitter']} '{row['system']}')"
            results = {c: float(row[c]) for c in TRAINING_WORKLOADS if row.get(c)}
            if not is_gpu(row["accelerator_model_name"]):
                out.exclude(
                    where,
                    f"accelerator '{row['accelerator_model_name']}' is not a GPU; "
                    f"{len(results)} results",
                )
                continue
            for column, minutes in results.items():
                key = (column, int(float(row["accelerators_count"])), minutes)
                label = f"{rnd} {row['submitter']} '{row['system']}'"
                if key in first:
                    out.exclude(
                        f"{where} {column}",
                        f"{minutes:g} min repeats {first[key]} "
                        "exactly: a carried-over result, kept once",
                    )
                    continue
                first[key] = label
                rows.append(_training_row(rnd, row, detail, column, minutes))
    rows.sort(key=_sort_key("round", "submitter", "system", "framework", "workload", "source"))
    return rows


def _training_row(
    rnd: str, row: dict[str, str], detail: dict[str, str], column: str, minutes: float
) -> dict[str, object]:
    gbs, samples = detail.get(f"{column}:GBS"), detail.get(f"{column}:samples_to_converge")
    return {
        "round": rnd,
        "division": row["division"],
        "availability": row["availability"],
        "submitter": row["submitter"],
        "system": row["system"],
        "nodes": int(float(row["number_of_nodes"])),
        "gpu": row["accelerator_model_name"],
        "gpu_count": int(float(row["accelerators_count"])),
        "framework": row["framework"] or None,
        "workload": TRAINING_WORKLOADS[column],
        "time_to_train_minutes": minutes,
        "global_batch_size": int(float(gbs)) if gbs else None,
        "samples_to_converge": float(samples) if samples else None,
        "source": row["details_url"],
        "as_of": ROUNDS[rnd],
        "note": _training_note(row, detail, column),
    }


def _training_note(row: dict[str, str], detail: dict[str, str], column: str) -> str | None:
    notes = [f"submitter notes: {row['notes']}"] if row["notes"].strip() else []
    rcp, factor = detail.get(f"{column}:RCP", ""), detail.get(f"{column}:rcp_scaling_factor", "")
    if rcp and rcp != "Pass":
        notes.append(f"RCP check: {rcp}")
    elif not rcp:
        notes.append("no RCP check recorded")
    if factor and float(factor) != 1:
        notes.append(f"time scaled by the RCP factor {float(factor):.4g}")
    return "; ".join(notes) or None


def _inference(shared: Path, out: Derived) -> list[dict[str, object]]:
    groups: dict[tuple[str, str, str], list[tuple[int, dict[str, str]]]] = defaultdict(list)
    for line, row in enumerate(_read(shared / INFERENCE_FILE, "\t"), start=2):
        where = f"{INFERENCE_FILE} line {line} ({row['Public ID']} {row['Model MLC']} " + (
            f"{row['Scenario']})"
        )
        if not is_gpu(row["Accelerator"]):
            kind = "CPU-only (no accelerator)" if row["Accelerator"] == "nan" else "not a GPU"
            out.exclude(where, f"accelerator '{row['Accelerator']}': {kind}")
        elif row["Result"].strip().lower() in ("", "nan"):
            out.exclude(where, "no result")
        elif row["Model MLC"] not in INFERENCE_WORKLOADS:
            out.exclude(where, f"unknown benchmark '{row['Model MLC']}'")
        else:
            groups[(row["Public ID"], row["Model MLC"], row["Scenario"])].append((line, row))
    rows = [r for group in groups.values() for r in _inference_group(group, out)]
    rows.sort(key=_sort_key("submitter", "system", "workload", "accuracy", "scenario", "source"))
    return rows


def _inference_group(
    group: list[tuple[int, dict[str, str]]], out: Derived
) -> list[dict[str, object]]:
    """Rows of one (Public ID, benchmark, scenario); assigns the collapsed accuracy targets."""
    model = group[0][1]["Model MLC"]
    if model not in _COLLAPSED:
        return [_inference_row(row, INFERENCE_WORKLOADS[model][1], None) for _, row in group]
    if len(group) == 1:
        note = "the only row for this label: 99 or 99.9 accuracy target, the export does not say"
        return [_inference_row(group[0][1], None, note)]
    if len(group) > 2:
        raise ValueError(
            f"{INFERENCE_FILE}: {len(group)} rows for {model} {group[0][1]['Public ID']}"
        )
    (_, high), (line, low) = sorted(group, key=lambda g: -float(g[1]["Result"]))
    if float(high["Result"]) == float(low["Result"]):
        where = f"{INFERENCE_FILE} line {line} ({low['Public ID']} {model} {low['Scenario']})"
        out.exclude(where, "same result as its pair row: one run submitted for 99 and 99.9")
        return [_inference_row(high, "99.9", "one run submitted for both 99 and 99.9 targets")]
    why = "target inferred: the export merges 99 and 99.9; a 99.9 run also qualifies for 99"
    return [_inference_row(high, "99", why), _inference_row(low, "99.9", why)]


def _inference_row(
    row: dict[str, str], accuracy: str | None, note: str | None
) -> dict[str, object]:
    return {
        "round": INFERENCE_ROUND,
        "submitter": row["Organization"],
        "system": row["System Name (click + for details)"],
        "gpu": row["Accelerator"],
        "gpu_count": int(row["# of Accelerators"]),
        "workload": INFERENCE_WORKLOADS[row["Model MLC"]][0],
        "accuracy": accuracy,
        "scenario": row["Scenario"],
        "throughput": float(row["Result"]),
        "throughput_unit": row["Units"],
        "software": row["Software"].strip() or None,
        "source": INFERENCE_SOURCE.format(id=row["Public ID"]),
        "as_of": INFERENCE_AS_OF,
        "note": note,
    }

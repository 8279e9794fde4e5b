"""Lambda's PyTorch training throughput (``lambda-dl-benchmark/``) → ``benchmarks/lambda.csv``.

One output row per measured throughput: a configuration label × workload column × precision.
Four suites, never mixed (SOURCES.md: different containers and batch sizes):

* ``lambda-v0``: NGC 20.x–21.07 (``v0_*``, commit ca7c1f2);
* ``lambda-v1``: NGC 22.09+ (``v1_*``, commit aa5addb);
* ``lambda-v2``: the NGC 24.x rows of Lambda's curated ``v1v2_combined_*`` table. The other
  rows of that table re-state v1 rows: a combined row is a re-statement when a v1 row of the
  same GPU and count has the same throughput *and* batch size in every shared workload column,
  in both precisions. Those are left out (reported) and kept once, under ``lambda-v1``;
* ``lambda-v2-host``: the raw v2 results, one row per physical machine (``v2_per_host_*``).
  They have no ``bs`` file; their batch size is taken from the ``lambda-v2`` row of the same
  GPU and count, with a note.

Batch sizes come from the ``bs`` file of the same generation and precision, matched by label,
never by position: the v0 ``bs`` files list ``2x``/``4x RTX A5000`` in the opposite order, and
label the throughput file's ``RTX 3090`` row ``RTX 3090Ti`` (same position; no ``RTX 3090`` row;
its sizes are half those of ``2x RTX 3090`` in 10 of 11 columns), mapped explicitly and noted.

``watt_total`` and ``price_usd`` are Lambda's columns: total GPU TDP, and Lambda's estimated
hardware price of the GPUs (not a cloud price); the per-host files have neither.

Left out, each reported: zeros (not run, OOM), ncf in v1 multi-GPU rows (SOURCES.md: broken),
rows whose batch size is missing, zero or not divisible by the GPU count, and two implausible
kinds: an N-GPU row more than twice as fast per GPU as the best single-GPU row of that GPU
(data-parallel training on one node cannot be; these are logging faults such as 1.1e10 ncf
samples/s), and mixed precision slower than a quarter of the same row's fp32/TF32 figure (AMP
is never that much slower on the same GPU; the run failed).
"""

from __future__ import annotations

import csv
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from knowledge.derive import Derived

FOLDER = "lambda-dl-benchmark"
TABLE = "benchmarks/lambda.csv"
COLUMNS = [
    "suite",
    "workload",
    "gpu",
    "gpu_count",
    "nvlink",
    "precision",
    "batch_size_global",
    "batch_size_per_gpu",
    "throughput",
    "throughput_unit",
    "system",
    "watt_total",
    "price_usd",
    "source",
    "as_of",
    "note",
]
PRECISIONS = ("fp16", "fp32")
# Lambda's column → (workload id in workloads.yaml, unit per SOURCES.md).
WORKLOADS = {
    "resnet50": ("resnet50-imagenet", "images/s"),
    "ssd": ("ssd300-coco", "images/s"),
    "bert_base_squad": ("bert-base-squad", "sequences/s"),
    "bert_large_squad": ("bert-large-squad", "sequences/s"),
    "gnmt": ("gnmt-wmt16", "tokens/s"),
    "ncf": ("ncf-movielens", "samples/s"),
    "tacotron2": ("tacotron2-ljspeech", "mel-frames/s"),
    "waveglow": ("waveglow-ljspeech", "audio-samples/s"),
    "transformerxlbase": ("transformer-xl-base-wt103", "tokens/s"),
    "transformerxllarge": ("transformer-xl-large-wt103", "tokens/s"),
    "maskrcnn": ("mask-rcnn-coco", "images/s"),
}
REPO = "lambdal/deeplearning-benchmark"
# Host and vendor words that lead a label; the GPU name follows.
_PREFIXES = (
    "Lambda Cloud — ",
    "Linode Cloud — ",
    "LambdaCloud ",
    "DellTexas ",
    "Dell ",
    "SMC ",
    "1CC ",
    "RAIDZ1 ",
)
# AWS labels name no GPU; the instance types are fixed (AWS EC2 accelerated-computing specs).
_AWS = {
    "p3.16xlarge": ("V100 16GB", 8, "AWS p3.16xlarge: 8x V100 16GB SXM2 (AWS spec)"),
    "p3.8xlarge": ("V100 16GB", 4, "AWS p3.8xlarge: 4x V100 16GB SXM2 (AWS spec)"),
    "p4d.24xlarge": ("A100 40GB SXM4", 8, "AWS p4d.24xlarge: 8x A100 40GB SXM4 (AWS spec)"),
}
_HOST = re.compile(r"^LambdaOD_(?:\d+x_)?(?:Texas_)?(\d+)x(.+?)_\d+-\d+-\d+-\d+_v2$")
_COUNT = re.compile(r"^(\d+)x\s*(.+)$")
# (suite, throughput label) → the label the bs file gives the same configuration.
_BS_LABELS = {("lambda-v0", "RTX 3090"): "RTX 3090Ti"}
SUPERLINEAR_LIMIT = 2.0
AMP_FLOOR = 0.25


@dataclass(frozen=True)
class Label:
    """What a configuration label says: the GPU name, how many, NVLink, and any note."""

    gpu: str
    count: int
    nvlink: bool
    note: str | None = None


@dataclass(frozen=True)
class SourceRow:
    """One row of a Lambda throughput or bs file."""

    label: str
    position: int
    num_gpu: int | None
    watt: float | None
    price: float | None
    values: dict[str, float]


@dataclass(frozen=True)
class Generation:
    """One family of files: local prefix, upstream paths (``{p}`` = precision), commit, date."""

    prefix: str
    upstream: str
    upstream_bs: str | None
    commit: str
    as_of: str


_TPUT, _BS = "pytorch/pytorch-train-throughput-{p}.csv", "pytorch/pytorch-train-bs-{p}.csv"
_CURATED = "pytorch/csv_v1_v2/pytorch-train-{kind}-{{p}}.csv"
V0 = Generation("v0", _TPUT, _BS, "ca7c1f2", "2022-06-30")
V1 = Generation("v1", _TPUT, _BS, "aa5addb", "2025-12-17")
COMBINED = Generation(
    "v1v2_combined",
    _CURATED.format(kind="throughput"),
    _CURATED.format(kind="bs"),
    "aa5addb",
    "2025-12-17",
)
HOST = Generation(
    "v2_per_host", "pytorch/pytorch-train-throughput-v2-{p}.csv", None, "aa5addb", "2025-12-17"
)


@dataclass(frozen=True)
class File:
    """One throughput file as it feeds one suite."""

    gen: Generation
    suite: str
    precision: str

    def name(self, kind: str = "throughput") -> str:
        return f"{FOLDER}/{self.gen.prefix}_pytorch-train-{kind}-{self.precision}.csv"

    @property
    def source(self) -> str:
        """``repo@commit path`` of the upstream throughput file, and of its bs file if any."""
        paths = [self.gen.upstream] + ([self.gen.upstream_bs] if self.gen.upstream_bs else [])
        shown = " + ".join(path.format(p=self.precision) for path in paths)
        return f"{REPO}@{self.gen.commit} {shown}"


def parse_label(label: str) -> Label:
    """The GPU name (host, vendor prefix and count stripped), count and NVLink of a label."""
    if label in _AWS:
        gpu, count, note = _AWS[label]
        return Label(gpu, count, False, note)
    host = _HOST.match(label)
    if host:
        return Label(host.group(2).replace("_", " "), int(host.group(1)), False)
    name = next((label[len(p) :] for p in _PREFIXES if label.startswith(p)), label)
    count = 1
    counted = _COUNT.match(name)
    if counted:
        count, name = int(counted.group(1)), counted.group(2)
    nvlink = name.endswith(" NVLink")
    return Label(name.removesuffix(" NVLink"), count, nvlink)


def read_rows(path: Path) -> list[SourceRow]:
    """Rows of one file; the label is the first column (unnamed in the per-host files)."""
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        records = [
            (i, cells, dict(zip(header, cells, strict=True))) for i, cells in enumerate(reader)
        ]
    return [
        SourceRow(
            label=cells[0],
            position=i,
            num_gpu=int(float(record["num_gpu"])) if "num_gpu" in record else None,
            watt=_number(record.get("watt")),
            price=_number(record.get("price")),
            values={k: float(v) for k, v in record.items() if k in WORKLOADS},
        )
        for i, cells, record in records
    ]


def _number(text: str | None) -> float | None:
    return float(text) if text not in (None, "") else None


def _read(shared: Path, file: File, kind: str = "throughput") -> list[SourceRow]:
    return read_rows(shared / file.name(kind))


def restated_label(
    row: dict[str, SourceRow], bs: dict[str, SourceRow], v1: dict[str, dict[str, SourceRow]]
) -> str | None:
    """The v1 label that a combined row re-states, or None (a v2 run).

    ``row``/``bs`` hold the combined row's throughput and bs rows by precision; ``v1`` holds
    the v1 rows by ``f"{kind}-{precision}"``, then label.
    """
    mine = parse_label(row["fp16"].label)
    for label in v1["throughput-fp16"]:
        theirs = parse_label(label)
        if (theirs.gpu, theirs.count) != (mine.gpu, mine.count):
            continue
        pairs = [(row[p], v1[f"throughput-{p}"][label]) for p in PRECISIONS]
        pairs += [(bs[p], v1[f"bs-{p}"][label]) for p in PRECISIONS]
        if all(_same_values(a, b) for a, b in pairs):
            return label
    return None


def _same_values(a: SourceRow, b: SourceRow) -> bool:
    return all(b.values.get(k) == v for k, v in a.values.items())


def derive(shared: Path) -> Derived:
    """Derive ``benchmarks/lambda.csv`` from ``shared/lambda-dl-benchmark``."""
    out = Derived()
    rows: list[dict[str, object]] = []
    for gen, suite in ((V0, "lambda-v0"), (V1, "lambda-v1")):
        for p in PRECISIONS:
            file = File(gen, suite, p)
            rows += _measurements(shared, file, _read(shared, file), out)
    v2_labels = _split_combined(shared, out)
    for p in PRECISIONS:
        file = File(COMBINED, "lambda-v2", p)
        combined = [r for r in _read(shared, file) if r.label in v2_labels]
        rows += _measurements(shared, file, combined, out)
    rows += _host_measurements(shared, rows, out)
    kept = _plausible(rows, out)
    _mark_nvlink(kept)
    kept.sort(key=_order)
    out.add_table(TABLE, COLUMNS, kept)
    return out


def _split_combined(shared: Path, out: Derived) -> set[str]:
    """Labels of the combined table's v2 rows; its re-statements of v1 rows are reported."""
    v1 = {
        f"{kind}-{p}": {r.label: r for r in _read(shared, File(V1, "lambda-v1", p), kind)}
        for kind in ("throughput", "bs")
        for p in PRECISIONS
    }
    files = {p: File(COMBINED, "lambda-v2", p) for p in PRECISIONS}
    rows = {p: {r.label: r for r in _read(shared, f)} for p, f in files.items()}
    bs = {p: {r.label: r for r in _read(shared, f, "bs")} for p, f in files.items()}
    v2: set[str] = set()
    for label in rows["fp16"]:
        same = restated_label(
            {p: rows[p][label] for p in PRECISIONS}, {p: bs[p][label] for p in PRECISIONS}, v1
        )
        if same is None:
            v2.add(label)
            continue
        for file in files.values():
            out.exclude(
                f"{file.name()} '{label}'",
                f"re-states v1 row '{same}' (same throughput and batch size in every workload, "
                "fp16 and fp32); kept once, under lambda-v1",
            )
    return v2


def _measurements(
    shared: Path, file: File, rows: list[SourceRow], out: Derived
) -> list[dict[str, object]]:
    """Candidate output rows of one throughput file, its bs file matched by label."""
    bs_rows = {r.label: r for r in _read(shared, file, "bs")}
    found = []
    for row in rows:
        label = parse_label(row.label)
        where = f"{file.name()} '{row.label}'"
        if row.num_gpu is not None and row.num_gpu != label.count:
            out.exclude(where, f"num_gpu {row.num_gpu} but the label says {label.count}")
            continue
        bs = bs_rows.get(_BS_LABELS.get((file.suite, row.label), row.label))
        if bs is None:
            out.exclude(where, "no row with this label in the bs file")
            continue
        notes = [n for n in (label.note, _bs_note(row, bs)) if n]
        for column, value in row.values.items():
            why = _unusable(file.suite, label, column, value, bs.values.get(column, 0.0))
            if why:
                out.exclude(f"{where} {column}", why)
                continue
            batch = int(bs.values[column])
            found.append(_row(file, row, column, batch=batch, notes=notes))
    return found


def _bs_note(row: SourceRow, bs: SourceRow) -> str | None:
    if bs.label != row.label:
        return (
            f"batch sizes from the bs row labelled '{bs.label}' at the same position "
            f"(the bs file has no '{row.label}' row)"
        )
    if bs.position != row.position:
        return (
            f"the bs file lists this row at position {bs.position + 1}, the throughput file at "
            f"{row.position + 1}: matched by label"
        )
    return None


def _unusable(suite: str, label: Label, column: str, value: float, batch: float) -> str | None:
    """Why one measurement cannot be used, or None."""
    if value == 0:
        return "0 (not run, or OOM/failed)"
    if suite == "lambda-v1" and column == "ncf" and label.count > 1:
        return f"ncf in a v1 multi-GPU row ({value:.4g} samples/s): broken per SOURCES.md"
    if batch <= 0:
        return f"throughput {value:g} but batch size {batch:.0f} in the bs file"
    if batch % label.count:
        return f"global batch {batch:.0f} is not divisible by {label.count} GPUs"
    return None


def _row(
    file: File, row: SourceRow, column: str, *, batch: int | None, notes: list[str]
) -> dict[str, object]:
    label = parse_label(row.label)
    workload, unit = WORKLOADS[column]
    return {
        "suite": file.suite,
        "workload": workload,
        "gpu": label.gpu,
        "gpu_count": label.count,
        "nvlink": "true" if label.nvlink else None,
        "precision": file.precision,
        "batch_size_global": batch,
        "batch_size_per_gpu": None if batch is None else batch // label.count,
        "throughput": row.values[column],
        "throughput_unit": unit,
        "system": row.label,
        "watt_total": row.watt,
        "price_usd": row.price,
        "source": file.source,
        "as_of": file.gen.as_of,
        "note": "; ".join(notes) or None,
    }


def _key(r: dict[str, object], *extra: str) -> tuple[object, ...]:
    return (r["precision"], r["gpu"], r["gpu_count"], r["workload"], *(r[e] for e in extra))


def _host_measurements(
    shared: Path, found: list[dict[str, object]], out: Derived
) -> list[dict[str, object]]:
    """The per-host v2 rows; batch size from the lambda-v2 row of the same GPU and count."""
    v2 = {_key(r): r for r in found if r["suite"] == "lambda-v2"}
    rows = []
    for p in PRECISIONS:
        file = File(HOST, "lambda-v2-host", p)
        for row in _read(shared, file):
            label = parse_label(row.label)
            for column, value in row.values.items():
                if value == 0:
                    out.exclude(
                        f"{file.name()} '{row.label}' {column}", "0 (not run, or OOM/failed)"
                    )
                    continue
                twin = v2.get((p, label.gpu, label.count, WORKLOADS[column][0]))
                if twin is None:
                    rows.append(_row(file, row, column, batch=None, notes=[]))
                    continue
                note = f"batch size from lambda-v2 '{twin['system']}' (no bs file for hosts)"
                batch = int(str(twin["batch_size_global"]))
                rows.append(_row(file, row, column, batch=batch, notes=[note]))
    _note_curated_hosts(found, rows)
    return rows


def _note_curated_hosts(v2_rows: list[dict[str, object]], hosts: list[dict[str, object]]) -> None:
    """Note on each lambda-v2 row the per-host run whose figure it repeats, if one does."""
    by_figure: dict[tuple[object, ...], list[str]] = defaultdict(list)
    for r in hosts:
        by_figure[_key(r, "throughput")].append(str(r["system"]))
    for r in v2_rows:
        same = by_figure.get(_key(r, "throughput")) if r["suite"] == "lambda-v2" else None
        if same:
            note = f"same figure as lambda-v2-host '{min(same)}': Lambda's pick of that run"
            r["note"] = "; ".join(str(n) for n in (r["note"], note) if n)


def _plausible(rows: list[dict[str, object]], out: Derived) -> list[dict[str, object]]:
    """Drop (and report) superlinear multi-GPU rows and mixed precision far below fp32."""
    best_single: dict[tuple[object, ...], float] = {}
    fp32: dict[tuple[object, ...], float] = {}
    for r in rows:
        value = float(str(r["throughput"]))
        if r["gpu_count"] == 1:
            key = (r["suite"], r["precision"], r["gpu"], r["workload"])
            best_single[key] = max(best_single.get(key, 0.0), value)
        if r["precision"] == "fp32":
            fp32[(r["suite"], r["system"], r["workload"])] = value
    return [r for r in rows if _sane(r, best_single, fp32, out)]


def _sane(
    r: dict[str, object],
    best_single: dict[tuple[object, ...], float],
    fp32: dict[tuple[object, ...], float],
    out: Derived,
) -> bool:
    value, count = float(str(r["throughput"])), int(str(r["gpu_count"]))
    single = best_single.get((r["suite"], r["precision"], r["gpu"], r["workload"]))
    full = fp32.get((r["suite"], r["system"], r["workload"])) if r["precision"] == "fp16" else None
    where = f"{r['suite']} {r['precision']} '{r['system']}' {r['workload']}"
    if count > 1 and single and value / count > SUPERLINEAR_LIMIT * single:
        out.exclude(
            where,
            f"{value:g} {r['throughput_unit']} on {count} GPUs is "
            f"{value / count / single:.1f}x the best single-GPU {single:g} per GPU: "
            "more than data parallelism can give",
        )
        return False
    if full and value < AMP_FLOOR * full:
        out.exclude(
            where,
            f"mixed precision {value:g} is {value / full:.2f}x the same row's "
            f"fp32 {full:g}: a failed AMP run, not the GPU's speed",
        )
        return False
    return True


def _mark_nvlink(rows: list[dict[str, object]]) -> None:
    """``false`` where the suite also has an NVLink label for the same GPU and count."""
    linked = {(r["suite"], r["gpu"], r["gpu_count"]) for r in rows if r["nvlink"] == "true"}
    for r in rows:
        if r["nvlink"] is None and (r["suite"], r["gpu"], r["gpu_count"]) in linked:
            r["nvlink"] = "false"


_SUITES = ("lambda-v0", "lambda-v1", "lambda-v2", "lambda-v2-host")


def _order(r: dict[str, object]) -> tuple[object, ...]:
    return (
        _SUITES.index(str(r["suite"])),
        r["gpu"],
        r["gpu_count"],
        r["system"],
        r["workload"],
        r["precision"],
    )

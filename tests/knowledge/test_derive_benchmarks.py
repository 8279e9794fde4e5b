"""The benchmark derivation: real rows, real counts, and every left-out row reported.

Tests that read ``../shared/data`` use the ``shared_data`` fixture, which skips (saying why)
where the raw data is absent; the label parser and the workloads file are tested without it.
Expected figures are copied from the raw files named in each test.
"""

from __future__ import annotations

import collections
import re
from pathlib import Path
from typing import Any

import pytest

from knowledge.aliases import AliasIndex
from knowledge.benchmark_schemas import BENCHMARK_TABLES
from knowledge.derive import Derived, benchmarks, render_csv
from knowledge.derive.benchmarks_lambda import Label, parse_label
from knowledge.derive.benchmarks_mlperf import is_gpu
from knowledge.files import csv_records, yaml_records
from knowledge.loader import default_root
from knowledge.schemas import WorkloadSchema

Row = dict[str, object]


@pytest.fixture(scope="module")
def derived(shared_data: Path) -> Derived:
    return benchmarks.derive(shared_data)


def _table(derived: Derived, name: str) -> list[Row]:
    return derived.tables[f"benchmarks/{name}.csv"][1]


def _only(rows: list[Row], **match: object) -> Row:
    found = [r for r in rows if all(r[k] == v for k, v in match.items())]
    assert len(found) == 1, f"{len(found)} rows match {match}"
    return found[0]


def _excluded(derived: Derived, pattern: str) -> list[str]:
    return [line for line in derived.excluded if re.search(pattern, line)]


class TestLabels:
    @pytest.mark.parametrize(
        ("label", "expected"),
        [
            pytest.param(
                "LambdaCloud 1x A100 40GB PCIe",
                Label("A100 40GB PCIe", 1, False),
                id="cloud prefix and 1x",
            ),
            pytest.param(
                "Lambda Cloud — 8x V100 16GB", Label("V100 16GB", 8, False), id="v0 cloud prefix"
            ),
            pytest.param("4x RTX 2080Ti NVLink", Label("RTX 2080Ti", 4, True), id="NVLink"),
            pytest.param(
                "DellTexas 2x H100 80GB SXM5",
                Label("H100 80GB SXM5", 2, False),
                id="vendor chassis",
            ),
            pytest.param("LambdaCloud 4xV100 16GB", Label("V100 16GB", 4, False), id="no space"),
            pytest.param(
                "Quadro RTX 8000", Label("Quadro RTX 8000", 1, False), id="product word kept"
            ),
            pytest.param(
                "LambdaOD_8x_Texas_4xH100_80GB_SXM5_192-222-52-149_v2",
                Label("H100 80GB SXM5", 4, False),
                id="per-host: GPUs used, not host",
            ),
            pytest.param(
                "LambdaOD_Texas_1xH100_80GB_SXM5_192-222-52-102_v2",
                Label("H100 80GB SXM5", 1, False),
                id="per-host without host size",
            ),
        ],
    )
    def test_parse(self, label: str, expected: Label) -> None:
        assert parse_label(label) == expected

    @pytest.mark.parametrize(
        ("label", "gpu", "count"),
        [
            ("p3.16xlarge", "V100 16GB", 8),
            ("p3.8xlarge", "V100 16GB", 4),
            ("p4d.24xlarge", "A100 40GB SXM4", 8),
        ],
    )
    def test_aws_labels_name_the_instance_gpu(self, label: str, gpu: str, count: int) -> None:
        parsed = parse_label(label)
        assert (parsed.gpu, parsed.count) == (gpu, count)
        assert label in str(parsed.note)


@pytest.mark.shared_data
class TestLambda:
    def test_rows_per_suite(self, derived: Derived) -> None:
        counts = collections.Counter(r["suite"] for r in _table(derived, "lambda"))
        assert counts == {
            "lambda-v0": 1804,
            "lambda-v1": 872,
            "lambda-v2": 70,
            "lambda-v2-host": 1092,
        }

    def test_known_v1_row(self, derived: Derived) -> None:
        # v1_pytorch-train-throughput-fp16.csv: Quadro RTX 8000 resnet50 651; bs file: 928
        row = _only(
            _table(derived, "lambda"),
            suite="lambda-v1",
            system="Quadro RTX 8000",
            workload="resnet50-imagenet",
            precision="fp16",
        )
        assert (row["throughput"], row["throughput_unit"]) == (651.0, "images/s")
        batch = (row["batch_size_global"], row["batch_size_per_gpu"], row["gpu_count"])
        assert batch == (928, 928, 1)
        assert (row["watt_total"], row["price_usd"]) == (260.0, 6037.5)
        assert row["as_of"] == "2025-12-17"
        assert str(row["source"]).startswith("lambdal/deeplearning-benchmark@aa5addb pytorch/")

    @pytest.mark.parametrize(
        ("where", "expected"),
        [
            pytest.param(
                ("lambda-v1", "8x H100 80GB SXM5", "fp16"), (10240, 1280, 20728), id="v1 8x"
            ),
            pytest.param(("lambda-v0", "3x RTX 3090", "fp32"), (600, 200, 1350), id="v0 3x"),
            pytest.param(("lambda-v0", "p3.8xlarge", "fp16"), (1192, 298, 3293), id="AWS 4x"),
        ],
    )
    def test_global_batch_divided_per_gpu(
        self, derived: Derived, where: tuple[str, str, str], expected: tuple[int, int, float]
    ) -> None:
        suite, system, precision = where
        row = _only(
            _table(derived, "lambda"),
            suite=suite,
            system=system,
            precision=precision,
            workload="resnet50-imagenet",
        )
        assert (row["batch_size_global"], row["batch_size_per_gpu"], row["throughput"]) == expected

    def test_every_batch_divides_exactly(self, derived: Derived) -> None:
        for row in _table(derived, "lambda"):
            if row["batch_size_global"] is not None:
                assert row["batch_size_per_gpu"] * row["gpu_count"] == row["batch_size_global"]  # type: ignore[operator]

    def test_indivisible_batch_is_reported(self, derived: Derived) -> None:
        # v0 bs fp32: 8x A100 80GB SXM4 transformerxllarge = 182, not a multiple of 8
        assert _excluded(
            derived, r"fp32\.csv '8x A100 80GB SXM4' transformerxllarge: global batch 182"
        )

    def test_zeros_left_out_and_reported(self, derived: Derived) -> None:
        rows = _table(derived, "lambda")
        assert all(float(str(r["throughput"])) > 0 for r in rows)
        # v1 fp16: Dell H100 80GB SXM5 transformerxlbase = 0.0
        assert not [
            r
            for r in rows
            if r["system"] == "Dell H100 80GB SXM5" and r["workload"] == "transformer-xl-base-wt103"
        ]
        assert _excluded(derived, r"v1_.*fp16\.csv 'Dell H100 80GB SXM5' transformerxlbase: 0 ")
        assert len(_excluded(derived, r": 0 \(not run")) == 145

    def test_v1_multi_gpu_ncf_left_out(self, derived: Derived) -> None:
        v1_ncf = [
            r
            for r in _table(derived, "lambda")
            if r["suite"] == "lambda-v1" and r["workload"] == "ncf-movielens"
        ]
        assert {r["gpu_count"] for r in v1_ncf} == {1}
        assert len(v1_ncf) == 17 * 2  # the 17 single-GPU v1 rows, both precisions
        reported = _excluded(derived, r"ncf in a v1 multi-GPU row")
        assert len(reported) == 34 * 2
        assert any(
            "'Dell 4x H100 80GB SXM5' ncf" in line and "1.335e+10" in line for line in reported
        )

    def test_combined_restatements_kept_once_under_v1(self, derived: Derived) -> None:
        v2 = {r["system"] for r in _table(derived, "lambda") if r["suite"] == "lambda-v2"}
        assert v2 == {"LambdaCloud 1x H100 80GB PCIe"} | {
            f"LambdaCloud {n}x H100 80GB SXM5" for n in (1, 2, 4, 8)
        }
        restated = _excluded(derived, r"v1v2_combined.*re-states v1 row")
        assert len(restated) == 21 * 2
        assert any(
            "'LambdaCloud 4x V100 16GB'" in x and "'LambdaCloud 4xV100 16GB'" in x for x in restated
        )

    def test_v0_bs_label_mismatch_and_reordering(self, derived: Derived) -> None:
        rows = _table(derived, "lambda")
        rtx3090 = _only(
            rows,
            suite="lambda-v0",
            system="RTX 3090",
            precision="fp16",
            workload="resnet50-imagenet",
        )
        assert rtx3090["batch_size_global"] == 448
        assert "RTX 3090Ti" in str(rtx3090["note"])
        for system, glob in (("2x RTX A5000", 896), ("4x RTX A5000", 1792)):
            row = _only(
                rows,
                suite="lambda-v0",
                system=system,
                precision="fp16",
                workload="resnet50-imagenet",
            )
            assert row["batch_size_global"] == glob
            assert "matched by label" in str(row["note"])

    def test_nvlink_true_false_or_unknown(self, derived: Derived) -> None:
        rows = _table(derived, "lambda")

        def nvlink(system: str) -> object:
            match = {"suite": "lambda-v0", "precision": "fp16", "workload": "resnet50-imagenet"}
            return _only(rows, system=system, **match)["nvlink"]

        assert nvlink("2x RTX 8000 NVLink") == "true"
        assert nvlink("2x RTX 8000") == "false"
        assert nvlink("2x RTX 3090") is None
        assert {r["nvlink"] for r in rows if r["suite"] != "lambda-v0"} == {None}

    def test_host_rows_take_batch_from_v2(self, derived: Derived) -> None:
        row = _only(
            _table(derived, "lambda"),
            precision="fp16",
            workload="resnet50-imagenet",
            system="LambdaOD_8x_Texas_4xH100_80GB_SXM5_192-222-52-149_v2",
        )
        assert (row["gpu"], row["gpu_count"], row["throughput"]) == ("H100 80GB SXM5", 4, 11035)
        assert (row["batch_size_global"], row["batch_size_per_gpu"]) == (5120, 1280)
        assert "LambdaCloud 4x H100 80GB SXM5" in str(row["note"])
        assert (row["watt_total"], row["price_usd"]) == (None, None)

    def test_implausible_values_reported(self, derived: Derived) -> None:
        # v0 fp16 8x A100 80GB SXM4 ncf = 10872646574, 31.6x the single-GPU 42980368 per GPU
        assert _excluded(derived, r"lambda-v0 fp16 '8x A100 80GB SXM4' ncf-movielens: .* 31\.6x")
        assert len(_excluded(derived, r"a failed AMP run")) == 5  # RTX A4000 waveglow, 1-16 GPUs

    def test_generation_dates(self, derived: Derived) -> None:
        dates = {(r["suite"], r["as_of"]) for r in _table(derived, "lambda")}
        assert dates == {
            ("lambda-v0", "2022-06-30"),
            ("lambda-v1", "2025-12-17"),
            ("lambda-v2", "2025-12-17"),
            ("lambda-v2-host", "2025-12-17"),
        }


@pytest.mark.shared_data
class TestMlperfTraining:
    def test_rows_per_round(self, derived: Derived) -> None:
        counts = collections.Counter(r["round"] for r in _table(derived, "mlperf_training"))
        assert counts == {"v3.0": 244, "v3.1": 170, "v4.0": 161, "v4.1": 122}

    def test_known_row(self, derived: Derived) -> None:
        # training_v3.0_summary(_detailed).csv, ASUSTeK ESC4000-E11-4xA100-PCIE-80GB, bert
        system = "ESC4000-E11-4xA100-PCIE-80GB"
        row = _only(
            _table(derived, "mlperf_training"),
            round="v3.0",
            system=system,
            workload="bert-large-wikipedia",
        )
        assert row["time_to_train_minutes"] == pytest.approx(45.792875)
        assert (row["global_batch_size"], row["samples_to_converge"]) == (256, 2568800.0)
        assert (row["gpu"], row["gpu_count"], row["nodes"]) == ("NVIDIA A100-PCIe-80GB", 4, 1)
        assert row["as_of"] == "2023-06-27"
        assert str(row["source"]).startswith("https://github.com/mlcommons/training_results_v3.0/")

    def test_non_gpu_systems_reported_by_accelerator(self, derived: Derived) -> None:
        lines = _excluded(derived, r"^mlperf-training/.* is not a GPU")
        by_name = collections.Counter(
            re.search(r"accelerator '([^']*)'", x).group(1)  # type: ignore[union-attr]
            for x in lines
        )
        assert by_name == {
            "Habana Gaudi2": 6,
            "Intel Gaudi2": 5,
            "Intel(R) Gaudi(R) 2 AI Accelerator": 2,
            "TPU-v5e": 1,
            "TPU-v5p": 11,
            "TPU-trillium": 4,
            "N/A": 7,
        }
        assert all(is_gpu(str(r["gpu"])) for r in _table(derived, "mlperf_training"))

    def test_carried_over_result_kept_once(self, derived: Derived) -> None:
        # v4.1 "DGX H200" bert 5.21165 repeats v4.0 "NVIDIA H200 (8x H200-SXM-141GB)"
        rows = [
            r for r in _table(derived, "mlperf_training") if r["time_to_train_minutes"] == 5.21165
        ]
        assert [(r["round"], r["system"]) for r in rows] == [
            ("v4.0", "NVIDIA H200 (8x H200-SXM-141GB)")
        ]
        assert _excluded(derived, r"training_v4\.1.*'DGX H200'\) bert: 5\.21165 min repeats v4\.0")


@pytest.mark.shared_data
class TestMlperfInference:
    def test_rows_and_left_out(self, derived: Derived) -> None:
        rows = _table(derived, "mlperf_inference")
        assert len(rows) == 665
        lines = _excluded(derived, r"^mlperf-inference/.*accelerator")
        by_name = collections.Counter(
            re.search(r"accelerator '([^']*)'", x).group(1)  # type: ignore[union-attr]
            for x in lines
        )
        assert by_name == {
            "nan": 54,
            "QUALCOMM Cloud AI 100 PCIe/HHHL Pro": 32,
            "QUALCOMM Cloud AI 100 PCIe/HHHL Standard": 8,
            "Habana Gaudi2": 4,
            "TPU v5e": 2,
        }
        assert {r["as_of"] for r in rows} == {"2023-09-11"}

    def test_known_row_uses_result(self, derived: Derived) -> None:
        system = "NVIDIA DGX H100 (8x H100-SXM-80GB; MaxQ; TensorRT)"
        row = _only(
            _table(derived, "mlperf_inference"),
            workload="resnet50-imagenet-inference",
            system=system,
            scenario="Offline",
        )
        assert (row["throughput"], row["throughput_unit"], row["gpu_count"]) == (
            474849.0,
            "Samples/s",
            8,
        )
        assert "3.1-0109" in str(row["source"])

    def test_bert_pair_split_into_accuracy_targets(self, derived: Derived) -> None:
        # 3.1-0001 BERT Offline: the pair 7559.83 / 5186.72 ("Result at System Name" averages it)
        rows = [
            r
            for r in _table(derived, "mlperf_inference")
            if str(r["source"]).endswith("result 3.1-0001")
            and r["scenario"] == "Offline"
            and r["workload"] == "bert-large-squad-inference"
        ]
        pairs = sorted((r["accuracy"], r["throughput"]) for r in rows)
        assert pairs == [("99", 7559.83), ("99.9", 5186.72)]


@pytest.mark.shared_data
class TestLlmOps:
    def test_rows_and_dropped_degrees(self, derived: Derived) -> None:
        rows = _table(derived, "llm_ops")
        counts = collections.Counter((r["gpu"], r["tensor_parallel"]) for r in rows)
        assert counts == {(g, tp): 259 * 10 for g in ("A100-80GB", "A40", "H100") for tp in (1, 2)}
        assert {r["dtype"] for r in rows} == {"fp16"}
        assert len(_excluded(derived, r"_mlp\.csv tensor parallel [48]: 261 configurations")) == 6

    def test_repeated_configuration_keeps_the_first(self, derived: Derived) -> None:
        # a100 mlp.csv lines 2 and 3 both profile 4096 tokens at TP1; emb median 0.234 then 0.235
        row = _only(
            _table(derived, "llm_ops"),
            gpu="A100-80GB",
            tensor_parallel=1,
            num_tokens=4096,
            op="emb",
        )
        assert row["median_ms"] == 0.234
        assert _excluded(derived, r"a100_.*line 3 \(num_tokens 4096, tensor parallel 1\): repeats")

    def test_under_size_budget(self, derived: Derived) -> None:
        columns, rows = derived.tables["benchmarks/llm_ops.csv"]
        assert len(render_csv(columns, rows).encode()) < 3_100_000


@pytest.mark.shared_data
class TestTables:
    def test_every_row_validates_and_cites(self, derived: Derived) -> None:
        for relpath, (columns, rows) in derived.tables.items():
            schema = BENCHMARK_TABLES[relpath]()
            for label, raw in csv_records(render_csv(columns, rows)):
                record: Any = schema.load(raw)
                assert record.source, f"{relpath} {label}"
                assert record.as_of, f"{relpath} {label}"

    def test_workload_ids_exist_with_the_table_kind(self, derived: Derived) -> None:
        kinds = {w["id"]: w["kind"] for w in _workloads()}
        for relpath, (_, rows) in derived.tables.items():
            kind = BENCHMARK_TABLES[relpath].KIND
            assert {kinds.get(str(r["workload"])) for r in rows} == {kind}, relpath

    def test_deterministic(self, shared_data: Path, derived: Derived) -> None:
        again = benchmarks.derive(shared_data)
        assert again.excluded == derived.excluded
        for relpath, (columns, rows) in derived.tables.items():
            assert render_csv(*again.tables[relpath]) == render_csv(columns, rows)


def _workloads() -> list[dict[str, Any]]:
    text = (default_root() / "workloads.yaml").read_text(encoding="utf-8")
    return [raw for _, raw in yaml_records(text)]


class TestWorkloadsFile:
    def test_loads_and_ids_unique(self) -> None:
        records = [WorkloadSchema().load(raw) for raw in _workloads()]
        ids = [w.id for w in records]
        assert len(ids) == len(set(ids)) == 30

    def test_aliases_unique_within_a_kind(self) -> None:
        by_kind: dict[str, AliasIndex] = collections.defaultdict(AliasIndex)
        for raw in _workloads():
            by_kind[raw["kind"]].add(raw["id"], raw["aliases"])  # raises on a clash

    def test_field_order(self) -> None:
        order = [
            "id",
            "name",
            "kind",
            "task",
            "model",
            "dataset",
            "unit",
            "aliases",
            "description",
            "source",
            "as_of",
        ]
        # `profile` (how the profiler counts a row of the workload) comes last, where present
        assert all(
            [k for k in raw if k != "profile"] == order and list(raw)[-1] in ("as_of", "profile")
            for raw in _workloads()
        )

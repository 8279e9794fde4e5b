"""A corrupted knowledge file fails the load with its file, row and field named."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from knowledge import KnowledgeInvalid, knowledge_version, load_knowledge
from knowledge.loader import default_root

pytestmark = pytest.mark.slow  # copies of the knowledge loaded again, one per case


@pytest.fixture
def data_copy(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    shutil.copytree(default_root(), root)
    return root


def _edit(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, f"fixture text {old!r} not found in {path}"
    path.write_text(text.replace(old, new, count), encoding="utf-8")


def _first_gpu_file(root: Path) -> Path:
    return sorted((root / "gpus").glob("*.yaml"))[0]


def _failure(root: Path) -> KnowledgeInvalid:
    with pytest.raises(KnowledgeInvalid) as info:
        load_knowledge(root)
    return info.value


def _csv_cell(path: Path, column: str, value: str, row: int = 1) -> None:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    header = lines[0].rstrip("\n").split(",")
    assert '"' not in lines[row], "pick a row without quoted cells"
    cells = lines[row].rstrip("\n").split(",")
    cells[header.index(column)] = value
    lines[row] = ",".join(cells) + "\n"
    path.write_text("".join(lines), encoding="utf-8")


def _first_plain_row(path: Path) -> int:
    lines = path.read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(lines[1:], start=1) if '"' not in line)


Corruption = Callable[[Path], tuple[str, str, str]]


def unknown_gpu_field(root: Path) -> tuple[str, str, str]:
    path = _first_gpu_file(root)
    _edit(path, "  vendor:", "  colour: green\n  vendor:")
    return path.relative_to(root).as_posix(), "record 1", "colour"


def negative_bandwidth(root: Path) -> tuple[str, str, str]:
    path = _first_gpu_file(root)
    text = path.read_text(encoding="utf-8")
    value = re.search(r"memory_bandwidth_gb_per_s: ([0-9.]+)", text)
    assert value
    _edit(path, value.group(0), "memory_bandwidth_gb_per_s: -900")
    return path.relative_to(root).as_posix(), "record 1", "memory_bandwidth_gb_per_s"


def sparse_figure(root: Path) -> tuple[str, str, str]:
    path = root / "gpus" / "nvidia-datacenter.yaml"
    text = path.read_text(encoding="utf-8")
    start = text.index("id: h100-sxm-80gb")
    end = start + text[start:].index("tf32_tflops:")
    line_end = end + text[end:].index("\n")
    path.write_text(text[:end] + "tf32_tflops: 1979" + text[line_end:], encoding="utf-8")
    return "gpus/nvidia-datacenter.yaml", "id 'h100-sxm-80gb'", "tf32_tflops"


def _set_in_record(path: Path, gpu_id: str, field: str, value: str) -> None:
    text = path.read_text(encoding="utf-8")
    start = text.index(f"id: {gpu_id}\n")
    begin = start + text[start:].index(f"  {field}:")
    end = begin + text[begin:].index("\n")
    path.write_text(text[:begin] + f"  {field}: {value}" + text[end:], encoding="utf-8")


def missing_boost_clock(root: Path) -> tuple[str, str, str]:
    path = _first_gpu_file(root)
    text = path.read_text(encoding="utf-8")
    line = re.search(r"\n  boost_clock_mhz: [^\n]*", text)
    assert line
    path.write_text(text.replace(line.group(0), "", 1), encoding="utf-8")
    return path.relative_to(root).as_posix(), "record 1", "boost_clock_mhz"


def sparse_fp16_accumulate(root: Path) -> tuple[str, str, str]:
    path = root / "gpus" / "workstation-consumer.yaml"
    _set_in_record(path, "rtx-4090", "fp16_fp16acc_tflops", "660.6")
    return "gpus/workstation-consumer.yaml", "id 'rtx-4090'", "fp16_fp16acc_tflops"


def fp16_accumulate_without_tensor_cores(root: Path) -> tuple[str, str, str]:
    path = root / "gpus" / "workstation-consumer.yaml"
    _set_in_record(path, "gtx-1080-ti", "fp16_fp16acc_tflops", "0.36")
    return "gpus/workstation-consumer.yaml", "id 'gtx-1080-ti'", "fp16_fp16acc_tflops"


def duplicate_gpu_id(root: Path) -> tuple[str, str, str]:
    path = root / "gpus" / "workstation-consumer.yaml"
    _edit(path, "id: rtx-4090\n", "id: h100-sxm-80gb\n")
    return "gpus/workstation-consumer.yaml", "record", "id"


def dangling_offer_gpu(root: Path) -> tuple[str, str, str]:
    path = root / "offers.csv"
    row = _first_plain_row(path)
    _csv_cell(path, "gpu_id", "h900-sxm-80gb", row)
    return "offers.csv", f"row {row}", "gpu_id"


def price_without_offer(root: Path) -> tuple[str, str, str]:
    path = root / "offer_prices.csv"
    row = _first_plain_row(path)
    _csv_cell(path, "instance_type", "no-such-instance", row)
    return "offer_prices.csv", f"row {row}", "instance_type"


def negative_price(root: Path) -> tuple[str, str, str]:
    path = root / "offer_prices.csv"
    row = _first_plain_row(path)
    _csv_cell(path, "on_demand_usd_per_hour", "-1.5", row)
    return "offer_prices.csv", f"row {row}", "on_demand_usd_per_hour"


def missing_unit(root: Path) -> tuple[str, str, str]:
    path = root / "onprem.yaml"
    text = path.read_text(encoding="utf-8")
    first_unit = re.search(r"\n  unit: [^\n]*", text)
    assert first_unit
    path.write_text(text.replace(first_unit.group(0), "", 1), encoding="utf-8")
    return "onprem.yaml", "record 1", "unit"


def unknown_link(root: Path) -> tuple[str, str, str]:
    path = root / "gpus" / "nvidia-datacenter.yaml"
    _edit(path, "gpu_link: nvlink-4\n", "gpu_link: nvlink-9\n")
    return "gpus/nvidia-datacenter.yaml", "record", "gpu_link"


def two_networks_for_one_architecture(root: Path) -> tuple[str, str, str]:
    path = root / "interconnects.yaml"
    _edit(path, "  name: InfiniBand EDR (100 Gb/s)\n",
          "  name: InfiniBand EDR (100 Gb/s)\n  servers_of: [ampere]\n")  # fmt: skip
    return "interconnects.yaml", "infiniband-hdr", "servers_of"


def bad_benchmark_number(root: Path) -> tuple[str, str, str]:
    path = root / "benchmarks" / "lambda.csv"
    row = _first_plain_row(path)
    _csv_cell(path, "throughput", "fast", row)
    return "benchmarks/lambda.csv", f"row {row}", "throughput"


def missing_file(root: Path) -> tuple[str, str, str]:
    (root / "interconnects.yaml").unlink()
    return "interconnects.yaml", "", ""


CORRUPTIONS = [
    pytest.param(unknown_gpu_field, id="unknown-field"),
    pytest.param(negative_bandwidth, id="negative-value"),
    pytest.param(sparse_figure, id="sparse-figure"),
    pytest.param(missing_boost_clock, id="missing-boost-clock"),
    pytest.param(sparse_fp16_accumulate, id="sparse-fp16-accumulate"),
    pytest.param(fp16_accumulate_without_tensor_cores, id="fp16-accumulate-without-tensor-cores"),
    pytest.param(duplicate_gpu_id, id="duplicate-id"),
    pytest.param(dangling_offer_gpu, id="offer-names-unknown-gpu"),
    pytest.param(price_without_offer, id="price-without-offer"),
    pytest.param(negative_price, id="negative-price"),
    pytest.param(missing_unit, id="missing-unit"),
    pytest.param(unknown_link, id="gpu-names-unknown-link"),
    pytest.param(two_networks_for_one_architecture, id="two-networks-for-one-architecture"),
    pytest.param(bad_benchmark_number, id="benchmark-not-a-number"),
    pytest.param(missing_file, id="missing-file"),
]


class TestCorruptedCopy:
    @pytest.mark.parametrize("corrupt", CORRUPTIONS)
    def test_names_file_row_and_field(self, data_copy: Path, corrupt: Corruption) -> None:
        file, row, field = corrupt(data_copy)
        failure = _failure(data_copy)
        matching = [e for e in failure.errors if e.file == file]
        assert matching, str(failure)
        error = matching[0]
        assert row in (error.row or ""), str(error)
        assert field == (error.field or "") or field in str(error), str(error)
        assert file in str(failure)

    def test_intact_copy_loads(self, data_copy: Path) -> None:
        assert load_knowledge(data_copy).version == knowledge_version(default_root())

    def test_version_changes_with_any_figure(self, data_copy: Path) -> None:
        before = knowledge_version(data_copy)
        _edit(data_copy / "onprem.yaml", "description:", "description: edited", 1)
        assert knowledge_version(data_copy) != before

    def test_all_problems_are_reported_at_once(self, data_copy: Path) -> None:
        unknown_gpu_field(data_copy)
        negative_price(data_copy)
        files = {e.file for e in _failure(data_copy).errors}
        assert {
            "offer_prices.csv",
            _first_gpu_file(data_copy).relative_to(data_copy).as_posix(),
        } <= files

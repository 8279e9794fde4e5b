"""The trace reader: known answers on built traces, real traces, and every limit."""

from __future__ import annotations

import gzip
import io
import json
import zlib
from pathlib import Path

import pytest

from profiles.trace import stream as stream_module
from profiles.trace.read import read_trace
from profiles.trace.stream import Limits, TraceFormatError, TraceStream
from tests.profiles.trace_factory import GEMM, NCCL, TraceBuilder, known_steps


def _read(data: bytes, limits: Limits | None = None):  # type: ignore[no-untyped-def]
    return read_trace(io.BytesIO(data), limits)


class TestKnownAnswers:
    def test_breakdown_of_a_built_trace(self) -> None:
        analysis, stats = _read(known_steps(4).gzipped())
        assert stats.gzipped
        assert analysis.device_name == "NVIDIA H100 80GB HBM3"
        assert analysis.steps_found == 4
        assert analysis.steps_used == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]
        b = analysis.breakdown
        assert b is not None
        assert b.wall_us == pytest.approx(1000.0)
        assert b.busy_us["tensor_gemm"] == pytest.approx(400.0)
        assert b.busy_us["communication"] == pytest.approx(50.0)  # 50 of 100 µs exposed
        assert b.busy_us["elementwise"] == pytest.approx(200.0)
        # the window runs from the previous step's last kernel (t0 - 100) to t0 + 900: idle
        # before the GEMM is 350 µs, of which the data-loader span covers 200
        assert b.idle_us["input"] == pytest.approx(200.0)
        assert b.idle_total_us == pytest.approx(350.0)
        total = sum(b.busy_us.values()) + b.idle_total_us
        assert total == pytest.approx(b.wall_us, rel=1e-9)

    def test_other_compute_kernels_outrank_communication(self) -> None:
        # regression: 'other' kernels (cub sorts, Triton) once ranked below NCCL and copies
        b = TraceBuilder()
        b.kernel("void cub::DeviceRadixSortOnesweepKernel<Policy>(int*)", 0, 10, 100)
        b.kernel(NCCL, 1, 10, 100, stream=20)
        analysis, _ = _read(b.kineto_bytes())
        assert analysis.breakdown is not None
        assert analysis.breakdown.busy_us["other"] == pytest.approx(100)
        assert analysis.breakdown.busy_us["communication"] == 0
        assert analysis.kernels == 2

    def test_no_markers_is_one_window_and_says_so(self) -> None:
        b = TraceBuilder()
        b.kernel(GEMM, 0, 10, 100)
        analysis, _ = _read(b.kineto_bytes())
        assert analysis.steps_found == 0
        assert any("one window" in n for n in analysis.notes)
        assert analysis.breakdown is not None
        assert analysis.breakdown.wall_us == pytest.approx(100)

    def test_cpu_only_trace_says_what_it_lacks(self) -> None:
        b = TraceBuilder()
        b.step(0, 0, 100)
        b.cpu("aten::mm", 10, 50)
        analysis, _ = _read(b.kineto_bytes())
        assert analysis.kernels == 0
        assert any("no GPU kernels found" in n for n in analysis.notes)

    def test_multi_gpu_host_picks_the_traced_device(self) -> None:
        b = known_steps(2)
        doc = b.document()
        doc["deviceProperties"] = [
            {**b.device, "id": 0, "name": "other"},
            {**b.device, "id": 3, "name": "NVIDIA A100-SXM4-80GB"},
        ]
        for event in doc["traceEvents"]:
            if "device" in event.get("args", {}):
                event["args"]["device"] = 3
        analysis, _ = _read(json.dumps(doc).encode())
        assert analysis.device_name == "NVIDIA A100-SXM4-80GB"

    def test_flops_recorded_with_the_trace_give_achieved_tflops(self) -> None:
        b = TraceBuilder()
        b.step(0, 0, 1000)
        b.cpu("aten::mm", 5, 20, **{"External id": 77, "flops": 4.0e9})
        b.kernel(GEMM, 10, 100, 400.0, **{"External id": 77})
        analysis, _ = _read(b.kineto_bytes())
        assert analysis.achieved_tflops["tensor_gemm"] == pytest.approx(10.0)  # 4 GFLOP / 400 µs


class TestStream:
    def test_events_equal_a_plain_json_load_at_any_chunk_size(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        data = known_steps(3).kineto_bytes()
        expected = json.loads(data)["traceEvents"]
        for size in (7, 64, 4096):
            monkeypatch.setattr(stream_module, "CHUNK", size)
            stream = TraceStream(io.BytesIO(data))
            assert list(stream) == expected
            assert stream.stats.metadata["deviceProperties"][0]["numSms"] == 132

    def test_strings_with_brackets_quotes_and_escapes(self) -> None:
        tricky = {
            "traceEvents": [{"name": 'a\\"[{b\\\\', "ph": "X", "args": {"k": "]}"}}],
            "deviceProperties": [],
        }
        data = json.dumps(tricky).encode()
        assert list(TraceStream(io.BytesIO(data))) == tricky["traceEvents"]

    @pytest.mark.parametrize(
        ("data", "kind"),
        [
            pytest.param(b"", "not-json", id="empty"),
            pytest.param(b"hello", "not-json", id="not-json"),
            pytest.param(b'{"a": [1, 2]}', "not-a-trace", id="json-not-a-trace"),
            pytest.param(b'{"traceEvents": [{"ph": "X"}', "truncated", id="truncated-json"),
            pytest.param(
                gzip.compress(b'{"traceEvents": []}')[:-6], "truncated", id="truncated-gzip"
            ),
            pytest.param(b'{"traceEvents": [{"ph": "X", "name": }]}', "not-json", id="bad-event"),
        ],
    )
    def test_bad_input_says_what_is_wrong(self, data: bytes, kind: str) -> None:
        with pytest.raises(TraceFormatError) as info:
            list(TraceStream(io.BytesIO(data)))
        assert info.value.kind == kind

    def test_deeply_nested_json_is_refused_before_building(self) -> None:
        deep = b'{"traceEvents": [' + b"[" * 1_000_000 + b"]" * 1_000_000 + b"]}"
        with pytest.raises(TraceFormatError) as info:
            list(TraceStream(io.BytesIO(deep)))
        assert info.value.kind == "too-deep"

    @pytest.mark.slow  # a gigabyte inflated
    def test_gzip_bomb_of_1_gb_is_refused(self) -> None:
        # ~1 MB of gzip that would decompress to 1 GiB of spaces inside a valid trace
        packer = zlib.compressobj(9, zlib.DEFLATED, 31)
        block = b" " * 2**20
        bomb = packer.compress(b'{"traceEvents": [')
        for _ in range(1024):
            bomb += packer.compress(block)
        bomb += packer.compress(b"]}") + packer.flush()
        assert len(bomb) < 2 * 2**20
        with pytest.raises(TraceFormatError) as info:
            list(TraceStream(io.BytesIO(bomb)))
        assert info.value.kind == "too-large"
        assert "ratio" in str(info.value)

    @pytest.mark.parametrize(
        ("limits", "what"),
        [
            pytest.param(Limits(compressed_bytes=100), "upload", id="compressed-size"),
            pytest.param(Limits(decompressed_bytes=100), "decompresses", id="decompressed-size"),
            pytest.param(Limits(events=3), "events", id="event-count"),
        ],
    )
    def test_size_limits(self, limits: Limits, what: str) -> None:
        with pytest.raises(TraceFormatError, match=what) as info:
            list(TraceStream(io.BytesIO(known_steps(2).gzipped()), limits))
        assert info.value.kind == "too-large"


REAL = [
    pytest.param("alexnet_fwd_A100-PG509-200_1gpu.json.gz", "a100-sxm4-40gb", 0, 0, id="alexnet"),
    pytest.param(
        "recsys_train_A100-PG509-200_rank3_of8.json.gz", "a100-sxm4-40gb", 6, 5, id="recsys-a100"
    ),
    pytest.param(
        "recsys_train_V100-SXM2-16GB_rank1_of2.json.gz", "v100-sxm2-16gb", 6, 5, id="recsys-v100"
    ),
    pytest.param(
        "train_A100-SXM4-80GB_rank0_of16.json.gz", "a100-sxm4-80gb", 5, 4, id="train-a100-80"
    ),
]


@pytest.mark.shared_data
class TestRealTraces:
    @pytest.mark.parametrize(("name", "gpu_id", "found", "used"), REAL)
    def test_device_steps_and_a_breakdown_that_adds_up(
        self,
        shared_data: Path,
        knowledge,
        name: str,
        gpu_id: str,
        found: int,
        used: int,  # type: ignore[no-untyped-def]
    ) -> None:
        with (shared_data / "hta-kineto-traces" / name).open("rb") as handle:
            analysis, stats = read_trace(handle)
        assert knowledge.resolve_gpu(analysis.device_name) == gpu_id
        assert analysis.steps_found == found
        assert len(analysis.step_times_us) == used
        b = analysis.breakdown
        assert b is not None
        parts = sum(b.busy_us.values()) + b.idle_total_us
        assert parts == pytest.approx(b.wall_us, rel=0.01)
        assert analysis.kernels > 0
        assert stats.events > 1000

    def test_v100_trace_projected_to_a100_lands_near_the_measured_a100(
        self,
        shared_data: Path,
        knowledge,  # type: ignore[no-untyped-def]
    ) -> None:
        from profiles.trace.read import analysis_dict
        from service.engine.estimating.projection import project

        folder = shared_data / "hta-kineto-traces"
        with (folder / "recsys_train_V100-SXM2-16GB_rank1_of2.json.gz").open("rb") as handle:
            v100 = analysis_dict(*read_trace(handle))
        with (folder / "recsys_train_A100-PG509-200_rank3_of8.json.gz").open("rb") as handle:
            a100, _ = read_trace(handle)
        projected = project(
            v100,
            knowledge.gpus["v100-sxm2-16gb"],
            knowledge.gpus["a100-sxm4-40gb"],
            knowledge,
            count=2,
        )
        assert a100.step_time_us is not None
        assert projected["step_time_us"] == pytest.approx(a100.step_time_us, rel=0.15)

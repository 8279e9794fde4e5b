"""The Python client against a live server (real HTTP), and in this process."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from service.client import ApiError, Client, Unreachable, model_description
from tests.conftest import WRITE_KEY
from tests.profiles.trace_factory import known_steps

BERT = {
    "task": "fine-tuning",
    "batch_size": 32,
    "seq_len": 384,
    "precision": "bf16",
    "dataset_samples": 88000,
    "epochs": 2,
}
GPT2_CONFIG = {
    "model_type": "gpt2",
    "n_layer": 12,
    "n_embd": 768,
    "n_head": 12,
    "vocab_size": 50257,
    "n_positions": 1024,
}


@pytest.fixture(scope="module")
def rs(live_server: str) -> Client:
    return Client(live_server, WRITE_KEY)


class TestLive:
    def test_recommend_then_read_it_back_by_id(self, rs: Client) -> None:
        answer = rs.recommend("bert-base", BERT, constraints={"deployment": "cloud"})
        first = answer["recommendations"][0]
        assert first["deployment"]["kind"] == "cloud"
        assert answer["request"]["model"] == {"name": "bert-base"}
        again = rs.recommendation(answer["id"])
        assert again["recommendations"][0]["gpu"] == first["gpu"]

    def test_a_config_json_file_is_the_model(self, rs: Client, tmp_path: Path) -> None:
        path = tmp_path / "config.json"
        path.write_text(json.dumps(GPT2_CONFIG))
        found = rs.estimate(
            path, {"task": "training", "batch_size": 8, "seq_len": 512}, gpu="a100-sxm4-80gb"
        )
        assert found["gpu"] == "a100-sxm4-80gb"
        assert found["step_time_s"] > 0

    def test_problem_details_keep_the_field_errors(self, rs: Client) -> None:
        with pytest.raises(ApiError) as caught:
            rs.estimate("bert-base", {"task": "training"}, gpu="a100-sxm4-80gb")
        assert caught.value.status == 422
        assert [e.field for e in caught.value.errors] == ["workload.batch_size"]
        assert "workload.batch_size" in str(caught.value)

    def test_unknown_names_are_404_with_close_matches(self, rs: Client) -> None:
        with pytest.raises(ApiError) as caught:
            rs.gpu("h100-sxm-80")
        assert caught.value.status == 404
        assert "h100-sxm-80gb" in caught.value.problem["suggestions"]

    def test_catalog_reads(self, rs: Client) -> None:
        assert rs.model("llama-3-8b")["name"] == "llama-3-8b"
        listed = rs.models(page_size=200)
        assert len(listed["items"]) >= 47
        assert rs.gpus(vendor="nvidia", min_memory_gb=80)["items"]
        assert rs.gpu("H100 SXM")["id"] == "h100-sxm-80gb"

    def test_tco_plan_profile_and_rules(self, rs: Client) -> None:
        tco = rs.tco("h100-sxm-80gb", {"gpu_hours_per_month": 700}, count=8)
        assert tco["cheapest"] in ("on_premise", "cloud", "hybrid")
        plan = rs.plan(
            "gpt2",
            {"task": "training", "batch_size": 8, "seq_len": 512},
            gpu="a100-sxm4-80gb",
            count=2,
        )
        assert plan["layouts"][0]["gpus"] == 2
        assert rs.profile({"name": "gpt2"}, {"task": "training", "batch_size": 1, "seq_len": 128})[
            "flops"
        ]
        assert rs.rules()["rules"]

    def test_trace_upload_reports_progress_and_is_analysed(
        self, rs: Client, tmp_path: Path
    ) -> None:
        path = tmp_path / "trace.json.gz"
        path.write_bytes(known_steps(4).gzipped())
        seen: list[tuple[int, int]] = []
        accepted = rs.upload_trace(path, progress=lambda sent, total: seen.append((sent, total)))
        analysis = rs.wait_trace(accepted)
        assert analysis["analysis"]["step_time_us"] == pytest.approx(1000.0)
        assert seen[-1] == (path.stat().st_size, path.stat().st_size)
        assert rs.trace(analysis["trace_id"])["trace_id"] == analysis["trace_id"]

    def test_an_upload_without_a_key_is_refused(self, live_server: str, tmp_path: Path) -> None:
        path = tmp_path / "trace.json.gz"
        path.write_bytes(known_steps(4).gzipped())
        with pytest.raises(ApiError) as caught:
            Client(live_server).upload_trace(path)
        assert caught.value.status == 401


def test_no_server_is_unreachable_not_a_hang() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # free once closed: nothing listens there
    with pytest.raises(Unreachable):
        Client(f"http://127.0.0.1:{port}", timeout_s=5).gpus()


def test_in_process_answers_without_a_server() -> None:
    with Client.in_process() as rs:
        assert rs.health()["status"] in ("ready", "degraded")
        assert rs.model("resnet-50")["family"] == "resnet"
        scratch = rs._scratch
        assert scratch is not None
        assert (scratch / "keys.json").is_file()  # its own key, never the user's file
    assert not scratch.exists()  # removed on close


def test_model_description_reads_names_files_and_objects(tmp_path: Path) -> None:
    assert model_description("llama-3-8b") == {"name": "llama-3-8b"}
    assert model_description({"family": "resnet", "depth": 18}) == {"family": "resnet", "depth": 18}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GPT2_CONFIG))
    assert model_description(path) == GPT2_CONFIG
    with pytest.raises(ValueError, match="no such file"):
        model_description(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a JSON file"):
        model_description(tmp_path / "bad.json")

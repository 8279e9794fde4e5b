"""The product's commands (``rightsize recommend`` ...): in this process by default, and
against a live server with ``--url``; tables, ``--json`` and the documented exit codes."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from service.cli import main
from tests.conftest import WRITE_KEY
from tests.profiles.trace_factory import known_steps

BERT = [
    "--task",
    "fine-tuning",
    "--batch-size",
    "32",
    "--seq-len",
    "384",
    "--dataset-samples",
    "88000",
    "--epochs",
    "2",
]
GPT2_CONFIG = {
    "model_type": "gpt2",
    "n_layer": 12,
    "n_embd": 768,
    "n_head": 12,
    "vocab_size": 50257,
    "n_positions": 1024,
}


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


class TestInProcess:
    def test_recommend_prints_a_ranked_table(self) -> None:
        result = run("recommend", "bert-base", *BERT, "--deployment", "cloud")
        assert result.exit_code == 0, result.stderr
        assert "cost/job" in result.stdout
        assert "Why first" in result.stdout
        assert "answered in this process" in result.stdout

    def test_recommend_json_is_the_api_answer(self) -> None:
        result = run("recommend", "bert-base", *BERT, "--deployment", "cloud", "--json")
        answer = json.loads(result.stdout)
        assert answer["request"]["constraints"] == {"deployment": "cloud"}
        assert {r["deployment"]["kind"] for r in answer["recommendations"]} == {"cloud"}

    def test_a_config_json_path_is_the_model(self, tmp_path: Path) -> None:
        path = tmp_path / "config.json"
        path.write_text(json.dumps(GPT2_CONFIG))
        result = run(
            "estimate",
            str(path),
            "--batch-size",
            "8",
            "--seq-len",
            "512",
            "--gpu",
            "a100-sxm4-80gb",
            "--json",
        )
        assert result.exit_code == 0, result.stderr
        assert json.loads(result.stdout)["gpu"] == "a100-sxm4-80gb"

    def test_estimate_plan_and_tco_tables(self) -> None:
        estimate = run("estimate", "gpt2", "--batch-size", "8", "--seq-len", "512", "--gpu", "l4")
        assert "step time" in estimate.stdout
        assert "memory per GPU" in estimate.stdout
        plan = run(
            "plan",
            "gpt2",
            "--batch-size",
            "8",
            "--seq-len",
            "512",
            "--gpu",
            "a100-sxm4-80gb",
            "--count",
            "4",
        )
        assert plan.exit_code == 0, plan.stderr
        assert "layouts on 4 x a100-sxm4-80gb" in plan.stdout
        tco = run("tco", "--gpu", "h100-sxm-80gb", "--count", "8", "--gpu-hours-per-month", "700")
        assert "on premise" in tco.stdout
        assert "break-even" in tco.stdout

    @pytest.mark.slow  # several recommendations ranked
    def test_a_stack_and_its_options_reach_the_answer(self) -> None:
        listed = run("stacks", "--task", "inference")
        assert listed.exit_code == 0, listed.stderr
        assert "vllm" in listed.stdout
        assert "continuous" in listed.stdout
        args = ["estimate", "llama-3.2-1b", "--task", "fine-tuning", "--method", "full",
                "--batch-size", "2", "--seq-len", "2048", "--gpu", "a100-sxm4-80gb"]  # fmt: skip
        plain = json.loads(run(*args, "--stack", "torchtune", "--json").stdout)
        result = run(*args, "--stack", "torchtune", "--stack-option", "activation_offload=true",
                     "--json")  # fmt: skip
        offloaded = json.loads(result.stdout)
        assert offloaded["stack"]["overridden"] == ["activation_offload"]
        assert offloaded["memory_per_gpu_bytes"] < plain["memory_per_gpu_bytes"]
        table = run(*args, "--stack", "torchtune")
        assert "torchtune" in table.stdout
        assert "memory as reported" in table.stdout
        bad = run(*args, "--stack", "keras")
        assert bad.exit_code == 3
        assert "stack" in bad.stderr
        malformed = run(*args, "--stack-option", "activation_offload")
        assert malformed.exit_code == 2

    def test_catalog_commands(self) -> None:
        listed = json.loads(run("models", "--json").stdout)
        assert any(m["name"] == "llama-3-8b" for m in listed["items"])
        assert "resnet-50" in run("models").stdout
        gpus = run("gpus", "--vendor", "nvidia", "--min-memory-gb", "80")
        assert "h100-sxm-80gb" in gpus.stdout

    def test_trace_upload_and_recommend_from_a_trace(self, tmp_path: Path) -> None:
        path = tmp_path / "trace.json.gz"
        path.write_bytes(known_steps(4).gzipped())
        uploaded = run("trace", "upload", str(path))
        assert uploaded.exit_code == 0, uploaded.stderr
        assert "1.00 ms a step" in uploaded.stdout
        answered = run("recommend", "--trace", str(path), "--json")
        assert answered.exit_code == 0, answered.stderr
        assert json.loads(answered.stdout)["request"]["trace_id"]


class TestExitCodes:
    def test_a_refused_request_is_3_with_the_field(self) -> None:
        result = run("estimate", "bert-base", "--seq-len", "384", "--gpu", "l4")
        assert result.exit_code == 3
        assert "workload.batch_size" in result.stderr

    def test_an_unknown_model_is_3_with_close_matches(self) -> None:
        result = run("recommend", "llama-3-8", "--batch-size", "1", "--seq-len", "512")
        assert result.exit_code == 3
        assert "llama-3-8b" in result.stderr

    def test_usage_errors_are_2(self, tmp_path: Path) -> None:
        assert run("recommend").exit_code == 2  # no model
        (tmp_path / "bad.json").write_text("{not json")
        result = run("recommend", str(tmp_path / "bad.json"), "--batch-size", "1")
        assert result.exit_code == 2
        assert "not a JSON file" in result.stderr

    def test_no_server_is_4(self) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        result = run("gpus", "--url", f"http://127.0.0.1:{port}")
        assert result.exit_code == 4
        assert "no answer" in result.stderr

    def test_an_unknown_key_is_5(self, live_server: str) -> None:
        result = run("gpus", "--url", live_server, "--api-key", "rs_nope_nope")
        assert result.exit_code == 5


class TestRemote:
    def test_recommend_against_a_server_gives_share_and_export_links(
        self, live_server: str
    ) -> None:
        result = run("recommend", "bert-base", *BERT, "--deployment", "cloud", "--url", live_server)
        assert result.exit_code == 0, result.stderr
        assert f"{live_server}/?id=" in result.stdout
        assert "export.csv" in result.stdout

    def test_url_and_key_from_the_environment(
        self, live_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("RIGHTSIZE_URL", live_server)
        monkeypatch.setenv("RIGHTSIZE_API_KEY", WRITE_KEY)
        path = tmp_path / "trace.json.gz"
        path.write_bytes(known_steps(4).gzipped())
        uploaded = json.loads(run("trace", "upload", str(path), "--json").stdout)
        answered = run("recommend", "--trace-id", uploaded["trace_id"], "--json")
        assert answered.exit_code == 0, answered.stderr
        assert json.loads(answered.stdout)["request"] == {"trace_id": uploaded["trace_id"]}


COMMANDS = {
    "recommend": ["recommend", "bert-base", *BERT, "--deployment", "cloud"],
    "ask": ["ask", "fine-tune bert base on 88k samples for 2 epochs, cloud only"],
    "estimate": ["estimate", "gpt2", "--batch-size", "8", "--seq-len", "512", "--gpu", "l4"],
    "plan": ["plan", "gpt2", "--batch-size", "8", "--seq-len", "512", "--gpu",
             "a100-sxm4-80gb", "--count", "2"],
    "tco": ["tco", "--gpu", "h100-sxm-80gb", "--count", "8", "--gpu-hours-per-month", "700"],
    "gpus": ["gpus", "--vendor", "amd"],
    "models": ["models", "--page-size", "500"],
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_answers_the_same_in_process_and_remote(name: str, live_server: str) -> None:
    """One code path: the in-process answer is the server's (created_at aside)."""
    here = run(*COMMANDS[name], "--json")
    there = run(*COMMANDS[name], "--json", "--url", live_server)
    assert here.exit_code == there.exit_code == 0, here.stderr + there.stderr
    mine, theirs = json.loads(here.stdout), json.loads(there.stdout)
    for answer in (mine, theirs):
        answer.pop("created_at", None)
    assert mine == theirs

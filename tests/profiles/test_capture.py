"""Recording traces: the ``capture`` context manager, ``profiles.capture_main`` and
``rightsize capture``, on real torch (CPU), read back by the trace reader and the API."""

from __future__ import annotations

import gzip
import io
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner
from flask.testing import FlaskClient
from torch import nn

from profiles.capture import Capture, capture, step_hooks, upload_command
from profiles.trace.analysis import TraceAnalysis
from profiles.trace.read import read_trace
from service.cli import main
from tests.service.helpers import problem

pytestmark = pytest.mark.slow  # subprocesses: scripts captured

ROOT = Path(__file__).resolve().parents[2]
TRACES = Path(__file__).parent / "fixtures" / "traces"
NO_KERNELS = "no GPU kernels found"
SCRIPT = """\
import sys
import torch
from torch import nn

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 6
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(steps):
    loss = model(torch.randn(8, 16)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("trained", steps, "steps", sys.argv[1:])
if len(sys.argv) > 2:
    sys.exit(int(sys.argv[2]))
"""
SCHEDULE = ["--wait", "1", "--warmup", "1", "--active", "2"]


def train(steps: int, session: Capture | None = None) -> None:
    """A tiny CPU training loop; ``session.step()`` after each step when given."""
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if session is not None:
            session.step()


def analyse(path: Path) -> TraceAnalysis:
    with path.open("rb") as raw:
        analysis, stats = read_trace(raw)
    assert stats.gzipped
    return analysis


def assert_cpu_trace(analysis: TraceAnalysis, steps: int = 2) -> None:
    assert analysis.steps_found == steps
    assert analysis.kernels == 0
    assert analysis.gpu_events == 0
    assert any(NO_KERNELS in note for note in analysis.notes)


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trace of six steps (wait 1, warm-up 1, active 2) recorded in this process."""
    output = tmp_path_factory.mktemp("trace") / "trace.json.gz"
    with capture(output, wait=1, warmup=1, active=2, cpu_only=True) as session:
        train(6, session)
    return output


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(SCRIPT, encoding="utf-8")
    return path


def run_main(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("RIGHTSIZE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "profiles.capture_main", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


class TestContextManager:
    def test_writes_a_gzipped_trace_the_reader_reads(self, cpu_trace: Path) -> None:
        with gzip.open(cpu_trace, "rb") as raw:
            document = json.load(raw)
        assert document["traceName"] == "trace.json.gz"  # not the temporary file's path
        assert {"record_shapes", "with_flops", "profile_memory"} <= set(document)
        assert_cpu_trace(analyse(cpu_trace))
        assert not list(cpu_trace.parent.glob(".*"))  # no temporary file left behind

    def test_prints_the_upload_command(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("RIGHTSIZE_URL", "http://gpu-box:9000/")
        output = tmp_path / "t.json.gz"
        with capture(output, wait=0, warmup=1, active=1, cpu_only=True) as session:
            train(2, session)
        assert f"curl -F file=@{output} http://gpu-box:9000/v1/traces" in capsys.readouterr().err

    def test_optimizer_hook_advances_the_schedule(self, tmp_path: Path) -> None:
        output = tmp_path / "hooked.json.gz"
        with capture(output, wait=1, warmup=1, active=2, cpu_only=True) as session:
            with step_hooks(session):
                train(6)
            train(3)  # after the block the hook is gone
        assert session.steps == 6
        assert session.written == [output]
        assert_cpu_trace(analyse(output))

    def test_a_run_ending_while_recording_keeps_what_was_recorded(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        output = tmp_path / "short.json.gz"
        with capture(output, wait=1, warmup=1, active=3, cpu_only=True) as session:
            train(3, session)
        assert "1 complete step(s) of 3" in capsys.readouterr().err
        assert analyse(output).steps_found >= 1

    def test_a_run_ending_before_recording_writes_nothing_and_says_so(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        output = tmp_path / "none.json.gz"
        with capture(output, wait=2, warmup=1, active=1, cpu_only=True) as session:
            train(1, session)
        assert "nothing recorded" in capsys.readouterr().err
        assert not output.exists()

    @pytest.mark.parametrize(
        "schedule",
        [
            pytest.param({"active": 0}, id="no-active-steps"),
            pytest.param({"wait": -1}, id="negative-wait"),
            pytest.param({"repeat": 0}, id="endless-repeat"),
        ],
    )
    def test_rejects_a_bad_schedule(self, tmp_path: Path, schedule: dict[str, Any]) -> None:
        with pytest.raises(ValueError, match="schedule"), capture(tmp_path / "x", **schedule):
            pass

    def test_upload_command_quotes_the_path(self) -> None:
        assert upload_command("my trace.json.gz").startswith("curl -F 'file=@my trace.json.gz' ")


class TestCaptureMain:
    def test_records_a_script_and_prints_the_curl_command(
        self, script: Path, tmp_path: Path
    ) -> None:
        output = tmp_path / "out" / "run.json.gz"
        done = run_main(["--output", str(output), *SCHEDULE, str(script), "6"], tmp_path)
        assert done.returncode == 0, done.stderr
        assert "trained 6 steps ['6']" in done.stdout  # the script saw its own argv
        assert f"curl -F file=@{output} http://127.0.0.1:8000/v1/traces" in done.stderr
        assert_cpu_trace(analyse(output))

    def test_keeps_the_scripts_exit_status_and_a_short_run(
        self, script: Path, tmp_path: Path
    ) -> None:
        done = run_main([*SCHEDULE, "--active", "5", str(script), "3", "7"], tmp_path)
        assert done.returncode == 7
        assert "before the schedule" in done.stderr
        assert (tmp_path / "trace.json.gz").is_file()


class TestCli:
    def test_runs_a_python_script(
        self,
        script: Path,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str],
    ) -> None:
        # `python` as an activated virtual environment has it: the one running the tests
        monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.delenv("RIGHTSIZE_URL", raising=False)
        output = tmp_path / "cli.json.gz"
        result = CliRunner().invoke(
            main, ["capture", "--output", str(output), *SCHEDULE, "--", "python", str(script)]
        )
        assert result.exit_code == 0, result.output
        assert f"curl -F file=@{output}" in capfd.readouterr().err  # the child's stderr
        assert_cpu_trace(analyse(output))

    def test_propagates_the_exit_code(self, script: Path, tmp_path: Path) -> None:
        result = CliRunner().invoke(
            main,
            [
                "capture",
                "-o",
                str(tmp_path / "t.json.gz"),
                "--",
                sys.executable,
                str(script),
                "2",
                "3",
            ],
        )
        assert result.exit_code == 3, result.output

    @pytest.mark.parametrize(
        "command",
        [
            pytest.param(["ls", "-l"], id="not-python"),
            pytest.param(["python"], id="no-script"),
            pytest.param(["python", "-m", "train"], id="python-options"),
            pytest.param(["bash", "train.py"], id="other-interpreter"),
        ],
    )
    def test_refuses_anything_but_python_and_a_script(self, command: list[str]) -> None:
        result = CliRunner().invoke(main, ["capture", "--", *command])
        assert result.exit_code == 2
        assert "capture runs a Python training script" in result.output


class TestUpload:
    def test_api_reads_the_recorded_trace(self, client: FlaskClient, cpu_trace: Path) -> None:
        with cpu_trace.open("rb") as raw:
            response = client.post(
                "/v1/traces",
                data={"file": (raw, "trace.json.gz")},
                content_type="multipart/form-data",
            )
        assert response.status_code == 201, response.get_data(as_text=True)
        body = response.get_json()
        assert body["analysis"]["kernels"] == 0
        assert body["analysis"]["steps_found"] == 2
        assert any(NO_KERNELS in note for note in body["notes"])
        assert any("the trace names no GPU" in note for note in body["notes"])

        projected = client.post(
            f"/v1/traces/{body['trace_id']}/projections",
            json={"gpus": ["h100-sxm-80gb"], "reference_gpu": "a100-sxm4-80gb"},
        )
        assert "no GPU activity" in problem(projected, 422)["detail"]


class TestFixture:
    """``fixtures/traces/cpu_training.json.gz``, which trace reader tests use without
    ../shared/data, is what ``record_cpu_trace.py`` records."""

    def test_checked_in_trace_is_a_small_cpu_trace(self) -> None:
        path = TRACES / "cpu_training.json.gz"
        assert path.stat().st_size < 32 * 1024
        assert_cpu_trace(analyse(path))

    def test_record_script_regenerates_it(self, tmp_path: Path) -> None:
        record = runpy.run_path(str(TRACES / "record_cpu_trace.py"))["record"]
        fresh = record(tmp_path / "cpu_training.json.gz")
        assert_cpu_trace(analyse(fresh))
        with gzip.open(fresh, "rb") as raw:
            names = {e.get("name") for e in json.load(io.TextIOWrapper(raw))["traceEvents"]}
        assert {"ProfilerStep#2", "ProfilerStep#3", "aten::addmm", "[memory]"} <= names

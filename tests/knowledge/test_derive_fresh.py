"""The derived tables in knowledge/data are what the derivation makes from ../shared/data."""

from __future__ import annotations

from pathlib import Path

import pytest

from knowledge.derive.__main__ import run


@pytest.mark.shared_data
def test_derived_tables_are_up_to_date(
    shared_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = run(shared_data, check=True)
    printed = capsys.readouterr().out
    assert status == 0, printed
    assert "offers: offers.csv" in printed
    assert "benchmarks: benchmarks/lambda.csv" in printed
    assert "networks: instance_networks.csv" in printed

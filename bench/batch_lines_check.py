"""Profiles carried along the batch (profiles.batch) against counting them, over the catalog.

For every catalog model, training (512 tokens or the model's images) and inference (256
prompt and 32 output tokens; vision models a batch of images), bf16 or fp16: the batch sizes
2, 3 and 5 are counted, then 4, 7 and 16 are asked, each carried where the profiler carries
it, and compared with counting it afresh (every figure but the seconds taken). Prints how
many were carried, how many of those are identical, and how many were counted.

Run: .venv/bin/python bench/batch_lines_check.py (about 6 minutes on 2 cores)
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from profiles import profile as profile_module
from profiles.description import resolve
from profiles.errors import InvalidDescription
from profiles.model_catalog import Catalog
from profiles.resolved import ResolvedModel
from profiles.workload import Workload, WorkloadSchema

COUNTED = (2, 3, 5)
ASKED = (4, 7, 16)


def _workloads(model: ResolvedModel) -> list[dict[str, Any]]:
    if model.family == "transformer":
        return [
            {"task": "training", "seq_len": 512, "precision": "bf16"},
            {"task": "inference", "prompt_tokens": 256, "output_tokens": 32, "precision": "bf16"},
        ]
    return [{"task": "training", "precision": "fp16"}, {"task": "inference", "precision": "fp16"}]


def _at(workload: dict[str, Any], batch: int) -> Workload:
    loaded: Workload = WorkloadSchema().load({**workload, "batch_size": batch})
    return loaded


def _figures(model: ResolvedModel, workload: Workload) -> dict[str, Any]:
    out = profile_module.profile(model, workload, 120.0).to_dict()
    out.pop("seconds")
    return out


def main() -> None:
    logging.disable(logging.CRITICAL)
    catalog = Catalog.load()
    carried = identical = counted = refused = 0
    start = time.monotonic()
    for name in catalog.entries:
        model = resolve({"name": name}, catalog)
        for workload in _workloads(model):
            lines = profile_module._LINES
            try:
                lines.clear()
                for batch in COUNTED:
                    _figures(model, _at(workload, batch))
            except InvalidDescription:
                refused += 1
                continue
            key = profile_module.line_key(model, _at(workload, 1))
            kept = {b: lines.at(key, b) for b in ASKED} if key is not None else {}
            for batch in ASKED:
                if kept.get(batch) is None:
                    counted += 1
                    continue
                lines.clear()
                fresh = _figures(model, _at(workload, batch))
                lines.clear()
                for b in COUNTED:  # the line as it was
                    _figures(model, _at(workload, b))
                carried += 1
                identical += _figures(model, _at(workload, batch)) == fresh
    print(
        f"{carried} profiles carried along the batch, {identical} identical to counting them; "
        f"{counted} counted (not a dense transformer, or off the line); {refused} model and "
        f"workload pairs refused by the profiler; {time.monotonic() - start:.0f} s"
    )


if __name__ == "__main__":
    main()

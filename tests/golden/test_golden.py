"""The answers of a fixed set of requests covering every endpoint, and ``rightsize
validate``'s report, are what they were before the engine was restructured (issue 38).

A difference here is a change of behaviour: either a bug of the move, or a change meant to
happen, recorded again with ``python -m tests.golden.record [--validate]``."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.golden.cases import ANSWERS, send


def first_difference(  # noqa: PLR0911
    path: str, want: Any, got: Any, rel: float = 1e-6, abs_tol: float = 1e-12
) -> str | None:
    if type(want) is not type(got):
        return f"{path}: {want!r} became {got!r}"
    if isinstance(want, dict):
        for key in sorted(set(want) | set(got)):
            if key not in got or key not in want:
                return f"{path}.{key}: {'gone' if key not in got else 'new'}"
            found = first_difference(f"{path}.{key}", want[key], got[key], rel, abs_tol)
            if found:
                return found
        return None
    if isinstance(want, list):
        if len(want) != len(got):
            return f"{path}: {len(want)} items became {len(got)}"
        for i, (w, g) in enumerate(zip(want, got, strict=True)):
            found = first_difference(f"{path}[{i}]", w, g, rel, abs_tol)
            if found:
                return found
        return None
    if isinstance(want, float):
        # the fits sum in an order threads may change: the last digits of a float move
        same = math.isclose(want, got, rel_tol=rel, abs_tol=abs_tol)
        return None if same else f"{path}: {want!r} became {got!r}"
    return None if want == got else f"{path}: {want!r} became {got!r}"


@pytest.mark.slow
def test_every_endpoint_answers_as_recorded(client: FlaskClient) -> None:
    want = json.loads(ANSWERS.read_text(encoding="utf-8"))
    got = dict(send(client))
    assert list(got) == list(want) or set(got) == set(want), "the set of cases changed"
    differences = [d for name in want if (d := first_difference(name, want[name], got[name]))]
    assert not differences, f"{len(differences)} answers changed:\n" + "\n".join(differences)

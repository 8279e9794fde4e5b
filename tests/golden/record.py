"""Write tests/golden/answers.json (and, with --validate, validate.json) from the app as it
is now (see cases.py). Only when an answer is meant to change: say so in the commit."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from service import create_app
from tests.conftest import with_key
from tests.golden.cases import ANSWERS, VALIDATE, record, validate_report


def _write(path: Path, value: dict[str, Any]) -> None:
    path.write_text(json.dumps(value, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{len(value)} entries written to {path}")


def main() -> None:
    _write(ANSWERS, record(with_key(create_app({"TESTING": True}).test_client())))
    if "--validate" in sys.argv:
        with tempfile.TemporaryDirectory() as model_dir:
            _write(VALIDATE, validate_report(Path(model_dir)))


if __name__ == "__main__":
    main()

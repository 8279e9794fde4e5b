"""``python -m knowledge.derive [--shared DIR] [--check]``: write or check derived tables."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from knowledge.derive import (
    Derived,
    benchmarks,
    default_shared_root,
    networks,
    offers,
    render_csv,
)

DATA = Path(__file__).resolve().parents[1] / "data"
DERIVATIONS = {
    "offers": offers.derive,
    "benchmarks": benchmarks.derive,
    "networks": networks.derive,
}


def run(shared: Path, check: bool, out: Path = DATA) -> int:
    stale: list[str] = []
    for name, derive in DERIVATIONS.items():
        result: Derived = derive(shared)
        for relpath, (columns, rows) in result.tables.items():
            text = render_csv(columns, rows)
            target = out / relpath
            if check:
                if not target.exists() or target.read_text(encoding="utf-8") != text:
                    stale.append(relpath)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")
            print(f"{name}: {relpath}: {len(rows)} rows")
        print(f"{name}: {len(result.excluded)} groups of source rows left out")
        for line in result.excluded:
            print(f"  left out {line}")
    if stale:
        print("stale derived tables (run python -m knowledge.derive): " + ", ".join(stale))
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m knowledge.derive", description=__doc__)
    parser.add_argument("--shared", type=Path, default=default_shared_root())
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    if not args.shared.is_dir():
        print(f"raw data folder not found: {args.shared}", file=sys.stderr)
        return 2
    return run(args.shared, args.check)


if __name__ == "__main__":
    sys.exit(main())

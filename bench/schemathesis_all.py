"""Schemathesis with every check against the app (served on a loopback port by this
process) and the checked-in openapi.yaml.

The test suite (tests/service/test_schemathesis.py) runs the response checks; this runs
all of schemathesis's checks (``--checks all``: also ``positive_data_acceptance``,
``negative_data_rejection``, ``missing_required_header``, ``unsupported_method``,
``use_after_free``, ``ensure_resource_availability``, ``ignored_auth``, ...) in both
generation modes (positive and negative) over every phase, with an admin key. It prints
the requests the app answered, how many were 5xx, and the unique failures grouped by
operation and check, each with an example and the fields and messages of the 4xx answers
behind it. A "valid" request schemathesis sent that breaks openapi.yaml (its coverage
phase builds some that break a ``oneOf``) is told apart: refusing it is right.

Profiles are bounded (``PROFILE_TIME_LIMIT_S``); keys, submitted rows, prices and the
embedded store go to a temporary directory, never the user's own files. It runs by hand,
not in the test suite: CPU-heavy (25 cases an operation: about 4,600 requests, 1.5 min).

Run: .venv/bin/python bench/schemathesis_all.py [--cases 25] [--seed 1] [--only-check NAME]
     [--operations REGEX] [--reasons 12]
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import re
import tempfile
import threading
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
# retraining and validating need the job queue; this app is the embedded default, so their
# documented answer is 503 with Retry-After (as in tests/service/test_schemathesis.py):
# not counted as 5xx, nor as a not_a_server_error failure
QUEUED = ("POST /v1/benchmarks/retrain", "POST /v1/validation")
Found = dict[tuple[str, str], dict[str, Any]]  # (operation, check): failure titles, an example


def _isolate_files() -> None:
    """Keys, submitted rows, prices and the store of this run: a temporary directory."""
    scratch = Path(tempfile.mkdtemp(prefix="rightsize-schemathesis-"))
    os.environ["RIGHTSIZE_KEYS_FILE"] = str(scratch / "keys.json")
    os.environ["RIGHTSIZE_SUBMISSIONS_FILE"] = str(scratch / "submissions.jsonl")
    os.environ["RIGHTSIZE_PRICES_FILE"] = str(scratch / "prices.csv")
    os.environ["RIGHTSIZE_STORE_FILE"] = str(scratch / "store.sqlite3")


def _app(counts: Counter[str]) -> Any:
    """The app as the test makes it, counting every answer by status class."""
    from flask import Response, request

    from service import create_app

    app = create_app(
        {
            "TESTING": True,
            "RATE_LIMIT": "1000000 per minute",
            "PROFILE_TIME_LIMIT_S": 3,
            "LOG_LEVEL": "WARNING",
        }
    )

    @app.after_request
    def _count(response: Response) -> Response:
        counts["requests"] += 1
        if f"{request.method} {request.path}" in QUEUED and response.status_code == 503:
            counts["documented 503"] += 1  # no job queue: Retry-After, as documented
        elif response.status_code >= 500:
            counts["5xx"] += 1
            counts[f"status {response.status_code}"] += 1
        return response

    return app


@contextmanager
def _served(app: Any) -> Iterator[str]:
    """``app`` over real HTTP on a free loopback port: schemathesis's follow-up requests
    (use_after_free, ensure_resource_availability) need a real transport."""
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)


def _failures(args: argparse.Namespace, counts: Counter[str]) -> Found:
    """Run every phase with every check; the unique failures keyed by (operation, check)."""
    import schemathesis
    from schemathesis.config import SchemathesisConfig
    from schemathesis.engine import from_schema

    from service.infra.keys import KeyFile

    @schemathesis.serializer("application/gzip")
    def _gzipped(_: Any, value: Any) -> bytes:
        raw = value if isinstance(value, bytes) else json.dumps(value).encode()
        return gzip.compress(raw)

    admin, _ = KeyFile(Path(os.environ["RIGHTSIZE_KEYS_FILE"])).create("schemathesis", "admin")
    config = SchemathesisConfig()
    config.update(seed=args.seed, max_failures=None)
    project = config.projects.override
    project.checks.update(included_check_names=[args.only_check or "all"])
    modes = [schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE]
    project.generation.update(modes=modes, max_examples=args.cases)
    found: Found = {}
    with _served(_app(counts)) as url:
        project.update(base_url=url, headers={"Authorization": f"Bearer {admin}"}, workers=1)
        schema = schemathesis.openapi.from_path(ROOT / "openapi.yaml", config=config)
        if args.operations:
            schema = schema.include(name_regex=args.operations)  # type: ignore[assignment]
        document = yaml.safe_load((ROOT / "openapi.yaml").read_text(encoding="utf-8"))
        _collect(from_schema(schema).execute(), found, counts, document)
    return found


def _against_document(document: dict[str, Any], operation: str, request: Any) -> str | None:
    """Why a JSON body schemathesis sent as valid is not valid per the document (None: it
    is, or it is no JSON body): its coverage phase builds some "positive" bodies that break
    a ``oneOf``, and the service is right to refuse those."""
    from openapi_schema_validator import OAS30Validator

    method, path = operation.split(" ", 1)
    content = document["paths"][path][method.lower()].get("requestBody", {}).get("content", {})
    types = [v for k, v in (request.headers or {}).items() if k.lower() == "content-type"]
    if "application/json" not in content or not types or "json" not in str(types[0]):
        return None
    try:
        body = json.loads(request.body or b"")
    except ValueError:
        return None
    schema = {**content["application/json"]["schema"], "components": document["components"]}
    error = next(OAS30Validator(schema).iter_errors(body), None)
    if error is None:
        return None
    where = ".".join(str(p) for p in error.path) or "(body)"
    return f"{where}: {error.message[:100]}"


def _collect(stream: Any, found: Found, counts: Counter[str], document: dict[str, Any]) -> None:
    from schemathesis.engine import Status, events

    for event in stream:
        if isinstance(event, events.NonFatalError):
            counts["errors"] += 1
            print(f"error in {event.label}: {event.info.format()[:400]}")
        if not isinstance(event, events.ScenarioFinished):
            continue
        for case_id, checks in event.recorder.checks.items():
            for check in checks:
                counts["checks run"] += 1
                if check.status != Status.FAILURE or check.failure_info is None:
                    continue
                failure = check.failure_info.failure
                operation = failure.operation or event.label or "?"
                interaction = event.recorder.interactions.get(case_id)
                response = interaction.response if interaction else None
                status = response.status_code if response is not None else None
                if check.name == "not_a_server_error" and operation in QUEUED and status == 503:
                    continue  # documented: no job queue in the embedded app
                entry = found.setdefault((operation, check.name), _entry())
                invalid = None
                if check.name == "positive_data_acceptance" and interaction is not None:
                    invalid = _against_document(document, operation, interaction.request)
                _record(entry, check.failure_info, response, invalid)


def _entry() -> dict[str, Any]:
    """A unique failure: its titles, an example (a schema-valid request's where there is
    one), its 4xx reasons, and how many of its requests were valid per the document."""
    return {"kinds": Counter(), "example": "", "curl": "", "reasons": Counter(), "valid": 0}


def _record(entry: dict[str, Any], info: Any, response: Any, invalid: str | None) -> None:
    """One failing check into its unique failure (``invalid``: why its request broke the
    document, None if it did not)."""
    entry["kinds"][info.failure.title] += 1
    if invalid is not None:
        entry["reasons"][f"[sent though invalid per openapi.yaml: {invalid}]"] += 1
    else:
        entry["valid"] += 1
        if response is not None and 400 <= response.status_code < 500:
            entry["reasons"].update(_reasons(response.content))
    if not entry["example"] or (invalid is None and entry["valid"] == 1):
        answer = ""
        if response is not None:
            body = response.content[:300].decode(errors="replace")
            answer = f"-> {response.status_code} {body}"
        entry["example"] = f"{info.failure.message}\n{answer}"
        entry["curl"] = info.code_sample


def _reasons(body: bytes) -> list[str]:
    """The fields a problem+json answer names, each with its message (numbers and quoted
    values blanked, so one rule reads as one reason)."""
    try:
        errors = json.loads(body).get("errors") or []
    except (ValueError, AttributeError):
        return []
    found = []
    for error in errors:
        message = re.sub(r"'[^']*'|\d+(\.\d+)?(e[+-]?\d+)?", "_", str(error.get("message")))
        found.append(f"{error.get('field')}: {message[:140]}")
    return found


def _report(found: Found, counts: Counter[str], reasons: int) -> None:
    """Failures by operation and check; with ``reasons`` > 0, an example of each and the
    ``reasons`` most frequent fields and messages of the 4xx answers behind it."""
    by_operation: dict[str, list[str]] = defaultdict(list)
    by_check: Counter[str] = Counter()
    generators = 0
    for (operation, check), entry in sorted(found.items()):
        if not entry["valid"]:  # every failing request broke the document: schemathesis's error
            generators += 1
            by_operation[operation].append(f"{check}: only requests invalid per openapi.yaml")
        else:
            by_check[check] += len(entry["kinds"])
            for title in entry["kinds"]:
                by_operation[operation].append(f"{check}: {title}")
        if reasons:
            example = entry["example"].strip().replace("\n", "\n      ")[:1200]
            by_operation[operation].append(f"    e.g. {example}\n    {entry['curl'][:600]}")
            for reason, times in entry["reasons"].most_common(reasons):
                by_operation[operation].append(f"    {times:>5} x {reason}")
    for operation, lines in by_operation.items():
        print(f"\n{operation}")
        for line in lines:
            print(f"  {line}")
    statuses = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()) if k.startswith("status"))
    print(f"\nrequests answered: {counts['requests']}, 5xx: {counts['5xx']} ({statuses or 'none'})")
    print(f"documented 503s (no job queue) of {', '.join(QUEUED)}: {counts['documented 503']}")
    print(f"checks run: {counts['checks run']}, engine errors: {counts['errors']}")
    total = sum(by_check.values())
    print(f"unique failures: {total}" + "".join(f"\n  {c}: {n}" for c, n in by_check.most_common()))
    print(f"and {generators} where schemathesis sent only requests invalid per openapi.yaml")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=25, help="examples per operation")
    parser.add_argument("--seed", type=int, default=1, help="random seed, for repeatable runs")
    parser.add_argument("--only-check", help="one check instead of all (e.g. ignored_auth)")
    parser.add_argument("--operations", help="only the operations matching (e.g. 'POST /v1/tco')")
    parser.add_argument(
        "--reasons", type=int, default=12, help="4xx reasons shown per failure (0: none)"
    )
    args = parser.parse_args()
    _isolate_files()
    counts: Counter[str] = Counter()
    found = _failures(args, counts)
    _report(found, counts, args.reasons)


if __name__ == "__main__":
    main()

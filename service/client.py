"""A Python client of the rightsize API: one method per operation, errors as exceptions.

    from service.client import Client

    rs = Client("http://127.0.0.1:8000", api_key=None)
    answer = rs.recommend("llama-3-8b", {"task": "fine-tuning", "method": "qlora",
                                         "batch_size": 4, "seq_len": 2048,
                                         "dataset_tokens": 20_000_000})
    print(answer["summary"])

Every method sends what the API takes and returns its JSON as a ``dict``; the request and
answer fields are those of ``openapi.yaml``. A 4xx or 5xx answer raises :class:`ApiError`
(its ``problem`` is the RFC 9457 problem document, ``errors`` the bad fields). A model is
given as a catalog name, a path to a JSON file (a Hugging Face ``config.json``, a family or
a layer list), or the description itself as a ``dict``.

``Client.in_process()`` answers from an app built in this process (no server): what the
CLI does by default.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx
from flask import Flask

DEFAULT_URL = "http://127.0.0.1:8000"
JSON = dict[str, Any]
Model = str | Path | Mapping[str, Any]


@dataclass(frozen=True)
class FieldError:
    """One bad field of a request: where (json, query, path, form), which, and why."""

    location: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class ApiError(Exception):
    """An error answer (problem+json): ``status``, ``title``, ``detail`` and ``errors``."""

    def __init__(self, status: int, problem: JSON) -> None:
        self.status = status
        self.problem = problem
        self.title = str(problem.get("title") or "")
        self.detail = str(problem.get("detail") or problem.get("title") or f"HTTP {status}")
        self.errors = [
            FieldError(
                str(e.get("location", "")), str(e.get("field", "")), str(e.get("message", ""))
            )
            for e in problem.get("errors") or ()
            if isinstance(e, Mapping)
        ]
        super().__init__(self.describe())

    def describe(self) -> str:
        """The detail, then each bad field on a line, then close matches."""
        lines = [f"{self.status} {self.title}: {self.detail}" if self.title else self.detail]
        lines += [f"  {e}" for e in self.errors if str(e) not in self.detail]
        if self.problem.get("suggestions"):
            lines.append(f"  close matches: {', '.join(map(str, self.problem['suggestions']))}")
        return "\n".join(lines)


class Unreachable(Exception):
    """No answer from the server: not listening, a timeout, or a broken connection."""


def model_description(model: Model) -> JSON:
    """The API's ``model`` object for a catalog name, a JSON file or a description."""
    if isinstance(model, Mapping):
        return dict(model)
    path = Path(model)
    if path.suffix == ".json" or path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ValueError(f"{path}: no such file") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: not a JSON file ({exc})") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path}: the model must be a JSON object")
        return data
    return {"name": str(model)}


class Client:
    """The rightsize API at ``url``, with ``api_key`` (sent as a bearer token) if given."""

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        timeout_s: float = 300.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = (url or os.environ.get("RIGHTSIZE_URL") or DEFAULT_URL).rstrip("/")
        headers = {"User-Agent": "rightsize-client"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._http = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout_s, transport=transport
        )
        self.app: Flask | None = None  # the app answering, in process
        self._scratch: Path | None = None  # where that app's key file is

    @classmethod
    def in_process(cls, config: Mapping[str, Any] | None = None) -> Client:
        """A client of an app built here (knowledge loaded now): no server, no network.
        Its API keys live in a temporary file with one write key, which it sends, so that
        uploads work as they would for the owner of a server."""
        from service import create_app
        from service.infra.keys import KeyFile

        scratch = Path(tempfile.mkdtemp(prefix="rightsize-cli-"))
        token, _ = KeyFile(scratch / "keys.json").create("cli", "write")
        app = create_app({**(config or {}), "RIGHTSIZE_KEYS_FILE": str(scratch / "keys.json")})
        client = cls("http://rightsize.local", token, transport=httpx.WSGITransport(app=app))
        client.app, client._scratch = app, scratch
        return client

    def warm(self) -> None:
        """In process: build (or load from its cache) the performance model now, as a
        server does at start-up, rather than inside the first estimate. Elsewhere: nothing."""
        if self.app is None:
            return
        from service.state import state

        with self.app.app_context():
            state().estimates.warm().join()

    def close(self) -> None:
        self._http.close()
        if self._scratch is not None:  # the in-process app's key file
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- transport ---------------------------------------------------------------------

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise Unreachable(f"no answer from {self.url}: {exc}") from None
        if response.status_code >= 400:
            try:
                problem = response.json()
            except ValueError:
                problem = {"title": response.reason_phrase, "detail": response.text[:500]}
            if not isinstance(problem, dict):
                problem = {"detail": str(problem)}
            raise ApiError(response.status_code, problem)
        return response

    def exchange(
        self, method: str, path: str, query: list[tuple[str, str]] | None = None, body: Any = None
    ) -> tuple[int, Any]:
        """One request whatever its answer, for callers that report problems themselves
        (the MCP tools): the status and the body (parsed JSON, else the text); status 0
        and a problem when nothing answers."""
        try:
            response = self._http.request(
                method,
                path,
                params=tuple(query or ()),
                json=body,
                headers={"Accept": "application/json"},
            )
        except httpx.HTTPError as exc:
            return 0, {"title": "Unreachable", "detail": f"rightsize at {self.url}: {exc}"}
        try:
            return response.status_code, response.json()
        except ValueError:
            return response.status_code, response.text

    def _json(self, method: str, path: str, **kwargs: Any) -> JSON:
        found = self._send(method, path, **kwargs).json()
        return found if isinstance(found, dict) else {"items": found}

    def _post(self, path: str, body: Mapping[str, Any]) -> JSON:
        return self._json("POST", path, json=dict(body))

    # -- operations ----------------------------------------------------------------------

    def health(self) -> JSON:
        """``GET /readyz``: whether the service is ready, and on which cache."""
        return self._json("GET", "/readyz")

    def recommend(
        self, model: Model | None = None, workload: Mapping[str, Any] | None = None, **fields: Any
    ) -> JSON:
        """``POST /v1/recommendations``: ``fields`` are the request's other fields
        (``objective``, ``constraints``, ``usage``, ``trace_id``, ...)."""
        return self._post("/v1/recommendations", _body(model, workload, fields))

    def recommendation(self, rec_id: str) -> JSON:
        """``GET /v1/recommendations/{id}``: a recommendation as it was given."""
        return self._json("GET", f"/v1/recommendations/{rec_id}")

    def export_csv(self, rec_id: str) -> str:
        """``GET /v1/recommendations/{id}/export.csv``: one row per candidate."""
        return self._send("GET", f"/v1/recommendations/{rec_id}/export.csv").text

    def quote(self, rec_id: str) -> str:
        """``GET /v1/recommendations/{id}/quote``: the printable quote page (HTML)."""
        return self._send("GET", f"/v1/recommendations/{rec_id}/quote").text

    def ask(self, question: str) -> JSON:
        """``POST /v1/ask``: a one-line question read and answered."""
        return self._post("/v1/ask", {"question": question})

    def estimate(
        self,
        model: Model | None = None,
        workload: Mapping[str, Any] | None = None,
        *,
        gpu: str,
        count: int = 1,
        **fields: Any,
    ) -> JSON:
        """``POST /v1/estimates``: step time, throughput, memory and bound on ``gpu``."""
        return self._post(
            "/v1/estimates", _body(model, workload, {"gpu": gpu, "count": count, **fields})
        )

    def plan(
        self,
        model: Model | None = None,
        workload: Mapping[str, Any] | None = None,
        *,
        gpu: str,
        count: int = 1,
        **fields: Any,
    ) -> JSON:
        """``POST /v1/plans``: every valid parallel layout on ``count`` x ``gpu``, ranked."""
        return self._post(
            "/v1/plans", _body(model, workload, {"gpu": gpu, "count": count, **fields})
        )

    def profile(self, model: Model, workload: Mapping[str, Any]) -> JSON:
        """``POST /v1/profiles``: FLOPs, bytes and memory of one step, before any GPU."""
        return self._post("/v1/profiles", _body(model, workload, {}))

    def tco(self, gpu: str, usage: Mapping[str, Any], count: int = 1, **fields: Any) -> JSON:
        """``POST /v1/tco``: owning against renting ``count`` x ``gpu`` at a usage."""
        return self._post("/v1/tco", {"gpu": gpu, "count": count, "usage": dict(usage), **fields})

    def gpus(self, **query: Any) -> JSON:
        """``GET /v1/gpus``: a page of GPUs (filters, ``sort``, ``page``, ``page_size``)."""
        return self._json("GET", "/v1/gpus", params=_query(query))

    def gpu(self, gpu_id: str) -> JSON:
        """``GET /v1/gpus/{id}``: one GPU by id or name."""
        return self._json("GET", f"/v1/gpus/{gpu_id}")

    def stacks(self, task: str | None = None) -> JSON:
        """``GET /v1/stacks``: the software stacks and their properties (``task`` filters)."""
        return self._json("GET", "/v1/stacks", params=_query({"task": task}))

    def stack(self, stack_id: str) -> JSON:
        """``GET /v1/stacks/{id}``: one stack by id or alias."""
        return self._json("GET", f"/v1/stacks/{stack_id}")

    def models(self, q: str | None = None, **query: Any) -> JSON:
        """``GET /v1/models``: a page of the catalog, ``q`` searching names and aliases."""
        return self._json("GET", "/v1/models", params=_query({"q": q, **query}))

    def model(self, name: str) -> JSON:
        """``GET /v1/models/{name}``: one catalog model by name or alias."""
        return self._json("GET", f"/v1/models/{name}")

    def rules(self) -> JSON:
        """``GET /v1/rules``: every rule behind the reasons."""
        return self._json("GET", "/v1/rules")

    def upload_trace(
        self,
        path: str | Path,
        *,
        progress: Callable[[int, int], None] | None = None,
        **options: Any,
    ) -> JSON:
        """``POST /v1/traces``: upload a profiler trace file (JSON, gzip or zip); ``options``
        are the query's (``reference_gpu``, ``batch_size``, ...). ``progress(sent, total)``
        is called as the file goes. A large trace is analysed in the background: the answer
        is then the job (``job_id``), which :meth:`wait_trace` follows to the analysis."""
        file = Path(path)
        total = file.stat().st_size
        with file.open("rb") as handle:
            content = _chunks(handle, total, progress)
            response = self._send(
                "POST",
                "/v1/traces",
                params=_query(options),
                content=content,
                headers={"Content-Type": "application/octet-stream", "Content-Length": str(total)},
            )
        found: JSON = response.json()
        return found

    def trace(self, trace_id: str) -> JSON:
        """``GET /v1/traces/{id}``: a trace's analysis."""
        return self._json("GET", f"/v1/traces/{trace_id}")

    def projections(self, trace_id: str, gpus: list[str], count: int = 1, **fields: Any) -> JSON:
        """``POST /v1/traces/{id}/projections``: the traced step on other GPUs."""
        return self._post(
            f"/v1/traces/{trace_id}/projections", {"gpus": gpus, "count": count, **fields}
        )

    def job(self, job_id: str) -> JSON:
        """``GET /v1/jobs/{id}``: a background job's state."""
        return self._json("GET", f"/v1/jobs/{job_id}")

    def wait_job(
        self,
        job_id: str,
        *,
        timeout_s: float = 600.0,
        poll_s: float = 0.5,
        seen: Callable[[JSON], None] | None = None,
    ) -> JSON:
        """Poll a job until it finishes (returned) or fails (:class:`ApiError`, 422)."""
        ends = time.monotonic() + timeout_s
        while True:
            state = self.job(job_id)
            if seen is not None:
                seen(state)
            if state.get("status") == "finished":
                return state
            if state.get("status") in ("failed", "stopped", "canceled"):
                error = state.get("error") or {}
                raise ApiError(
                    422,
                    {
                        "title": "job failed",
                        "detail": str(error.get("message") or error or state.get("status")),
                    },
                )
            if time.monotonic() > ends:
                raise Unreachable(f"job {job_id} not finished after {timeout_s:g} s")
            time.sleep(poll_s)

    def wait_trace(self, accepted: JSON, **kwargs: Any) -> JSON:
        """The analysis of an uploaded trace: at once, or when its job has finished."""
        if "job_id" not in accepted:
            return accepted
        done = self.wait_job(str(accepted["job_id"]), **kwargs)
        return self.trace(str(done["trace_id"]))


def _body(model: Model | None, workload: Mapping[str, Any] | None, fields: JSON) -> JSON:
    body = {k: v for k, v in fields.items() if v is not None}
    if model is not None:
        body["model"] = model_description(model)
    if workload is not None:
        body["workload"] = dict(workload)
    return body


def _query(query: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in query.items() if v is not None}


def _chunks(
    handle: IO[bytes], total: int, progress: Callable[[int, int], None] | None
) -> Iterator[bytes]:
    sent = 0
    while chunk := handle.read(1 << 20):
        sent += len(chunk)
        if progress is not None:
            progress(sent, total)
        yield chunk

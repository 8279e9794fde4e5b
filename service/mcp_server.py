"""``rightsize mcp``: the service's operations as tools for chat assistants (MCP, stdio).

Each tool is one API operation, found in the app's own OpenAPI document by path and method:
its input schema is that operation's request body (or its query and path parameters)
turned into a self-contained JSON Schema, its description the operation's summary. A call
goes to the API as a request, in-process through a test client (the default) or over HTTP
to a running service (``--url``), so validation, errors and answers are exactly the API's.
An answer comes back as a short markdown summary followed by the full JSON; a problem
(4xx, 5xx) as a tool error naming its bad fields, for the assistant to correct its call.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import quote

import click

if TYPE_CHECKING:  # the SDK takes seconds to import: only `rightsize mcp` pays for it
    from mcp import types

JSON_MIME = "application/json"
BODY_KEY = "\0body"  # Operation.parameters: where the request body's fields go


@dataclass(frozen=True)
class Reply:
    """An API answer: its status (0 where none came) and its body (parsed JSON, else the
    text)."""

    status: int
    body: Any


# (method, path, query pairs, JSON body) -> the reply; the one place a request is made
Send = Callable[[str, str, list[tuple[str, str]], Any], Reply]


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def in_process(app: Any, api_key: str | None = None) -> Send:
    """Requests to ``app`` (a Flask app) through its test client."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def send(method: str, path: str, query: list[tuple[str, str]], body: Any) -> Reply:
        # a fresh client each call: a test client keeps cookies, and calls run in threads
        response = app.test_client().open(
            path, method=method, query_string=query, json=body, headers=headers
        )
        return Reply(response.status_code, _parsed(response.get_data(as_text=True)))

    return send


def over_http(url: str, api_key: str | None = None, timeout_s: float = 300.0) -> Send:
    """Requests to the service at ``url`` (``http://host:port``)."""
    import httpx

    headers = {"Accept": JSON_MIME}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"

    def send(method: str, path: str, query: list[tuple[str, str]], body: Any) -> Reply:
        try:
            response = httpx.request(
                method,
                url.rstrip("/") + path,
                params=tuple(query),
                json=body,
                headers=headers,
                timeout=timeout_s,
            )
        except httpx.HTTPError as exc:
            return Reply(0, {"title": "Unreachable", "detail": f"rightsize at {url}: {exc}"})
        return Reply(response.status_code, _parsed(response.text))

    return send


# -- JSON Schema from OpenAPI 3.0 ------------------------------------------------------

SCHEMA_MAPS = ("properties", "patternProperties")
SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
SCHEMA_ONE = ("items", "additionalProperties", "not")
ANNOTATIONS = ("title", "description", "default")


class SchemaMaker:
    """JSON Schemas (2020-12) from an OpenAPI 3.0 document's schemas: references inlined
    (a recursive one carried once under ``$defs``), ``nullable`` and boolean exclusive
    bounds rewritten, a lone ``allOf`` (how apispec describes a nested field) merged."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.defs: dict[str, Any] = {}

    def resolve(self, ref: str) -> Any:
        node: Any = self.spec
        for part in ref.removeprefix("#/").split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def schema(self, node: dict[str, Any], seen: tuple[str, ...] = ()) -> dict[str, Any]:
        if "$ref" in node:
            ref, name = node["$ref"], node["$ref"].rsplit("/", 1)[-1]
            rest = {k: v for k, v in node.items() if k != "$ref"}
            if ref not in seen:
                return self.schema({**self.resolve(ref), **rest}, (*seen, ref))
            if name not in self.defs:
                self.defs[name] = {}  # against re-entry while it is made
                self.defs[name] = self.schema(self.resolve(ref), (ref,))
            return _json_schema_keywords({"$ref": f"#/$defs/{name}", **rest})
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in SCHEMA_MAPS:
                out[key] = {k: self.schema(v, seen) for k, v in value.items()}
            elif key in SCHEMA_LISTS:
                out[key] = [self.schema(v, seen) for v in value]
            elif key in SCHEMA_ONE and isinstance(value, dict):
                out[key] = self.schema(value, seen)
            else:
                out[key] = value
        return _json_schema_keywords(out)

    def finish(self, schema: dict[str, Any]) -> dict[str, Any]:
        return {**schema, "$defs": dict(self.defs)} if self.defs else schema


def _json_schema_keywords(out: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI 3.0's own keywords as JSON Schema 2020-12 says them."""
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if out.get(exclusive) is True and bound in out:
            out[exclusive] = out.pop(bound)
        elif isinstance(out.get(exclusive), bool):
            del out[exclusive]
    if "example" in out:
        out["examples"] = [out.pop("example")]
    all_of = out.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and not set(all_of[0]) & set(out):
        out = {**all_of[0], **{k: v for k, v in out.items() if k != "allOf"}}
    if not out.pop("nullable", False):
        return out
    if isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
        if "enum" in out and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
        return out
    notes = {k: out.pop(k) for k in ANNOTATIONS if k in out}
    return {"anyOf": [out, {"type": "null"}], **notes}


# -- tools -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Operation:
    """A tool: the API operation it calls and how its answer is summarised."""

    tool: str
    method: str
    path: str
    summarise: Callable[[Any], str]
    optional: bool = False  # left out while the API has no such operation
    parameters: dict[str, str] = field(default_factory=dict)  # argument -> path/query/body


def _request_schema(spec: dict[str, Any], method: str, path: str) -> tuple[Any, dict[str, str]]:
    """The operation's input as one object schema, and where each argument goes."""
    item = spec["paths"][path]
    operation = item[method]
    maker = SchemaMaker(spec)
    params = {}  # the operation's own override the path's
    for given in [*item.get("parameters", []), *operation.get("parameters", [])]:
        param = maker.resolve(given["$ref"]) if "$ref" in given else given
        params[param["name"], param["in"]] = param
    schema: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
    places: dict[str, str] = {}
    body = operation.get("requestBody", {}).get("content", {}).get(JSON_MIME)
    if body is not None:
        schema = maker.schema(body["schema"])
        places[BODY_KEY] = "body"
    properties, required = schema.setdefault("properties", {}), list(schema.get("required", []))
    for (name, where), param in params.items():
        if where not in ("path", "query"):
            continue
        properties[name] = maker.schema(param.get("schema", {}))
        if "description" in param:
            properties[name]["description"] = param["description"]
        if param.get("required") or where == "path":
            required.append(name)
        places[name] = where
    if required:
        schema["required"] = sorted(set(required), key=required.index)
    return maker.finish(schema), places


def make_tools(spec: dict[str, Any]) -> list[tuple[types.Tool, Operation]]:
    """The tools the API's document describes; an operation missing from it fails here,
    naming it (an optional one is left out)."""
    from mcp import types

    found = []
    for operation in OPERATIONS:
        described = spec["paths"].get(operation.path, {}).get(operation.method)
        if described is None:
            if operation.optional:
                continue
            raise click.ClickException(
                f"the API has no {operation.method.upper()} {operation.path} for the "
                f"'{operation.tool}' tool"
            )
        schema, places = _request_schema(spec, operation.method, operation.path)
        text = "\n\n".join(filter(None, (described.get("summary"), described.get("description"))))
        tool = types.Tool(
            name=operation.tool,
            description=text,
            inputSchema=schema,
            annotations=types.ToolAnnotations(readOnlyHint=True, openWorldHint=False),
        )
        found.append((tool, replace(operation, parameters=places)))
    return found


def _query_value(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return [v for item in value for v in _query_value(item)]
    if isinstance(value, bool):
        return ["true" if value else "false"]
    return [str(value)]


def call(operation: Operation, arguments: dict[str, Any], send: Send) -> types.CallToolResult:
    """The operation called with the tool's arguments; its answer, or its problem."""
    from mcp import types

    path, query, body = operation.path, [], {}
    for name, value in arguments.items():
        where = operation.parameters.get(name, "body" if BODY_KEY in operation.parameters else "")
        if where == "path":
            path = path.replace("{" + name + "}", quote(str(value), safe=""))
        elif where == "body":
            body[name] = value
        else:  # a query parameter, or one the API does not know (it says so)
            query += [(name, v) for v in _query_value(value)]
    has_body = BODY_KEY in operation.parameters
    reply = send(operation.method.upper(), path, query, body if has_body else None)
    if not 200 <= reply.status < 300 or not isinstance(reply.body, dict):
        return types.CallToolResult(content=[_text(problem_text(reply))], isError=True)
    try:
        summary = operation.summarise(reply.body)
    except (AttributeError, KeyError, TypeError, ValueError):  # an answer of another shape
        summary = own_summary({})
    return types.CallToolResult(
        content=[_text(summary), _text(json.dumps(reply.body))],
        structuredContent=reply.body,
    )


def _text(text: str) -> types.TextContent:
    from mcp import types

    return types.TextContent(type="text", text=text)


def problem_text(reply: Reply) -> str:
    """A problem+json answer as the assistant should read it: what, and which fields."""
    problem = reply.body if isinstance(reply.body, dict) else {"detail": str(reply.body)}
    detail = str(problem.get("detail") or "no detail given")
    status = f" ({reply.status})" if reply.status else ""  # 0: no answer at all
    lines = [f"{problem.get('title') or 'Error'}{status}: {detail}"]
    for error in problem.get("errors") or []:
        named = f"{error.get('field')}: {error.get('message')}" if isinstance(error, dict) else ""
        if named not in detail:  # the detail says the first few already
            lines.append(f"- {named}")
    matches = ", ".join(map(str, problem.get("suggestions") or []))
    if matches and matches not in detail:
        lines.append(f"close matches: {matches}")
    return "\n".join(lines)


# -- markdown summaries of the answers ------------------------------------------------------


def _n(value: Any, digits: int = 3) -> str:
    """A number to ``digits`` significant figures (whole above that, in powers of ten above
    ten million), or 'n/a'."""
    if value is None:
        return "n/a"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if abs(value) >= 1e7:  # FLOPs, parameters: 5.4e11
        return f"{value:.{digits}g}".replace("e+0", "e").replace("e+", "e")
    if abs(value) >= 10**digits:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def _gib(value: Any) -> str:
    return _n(value / 2**30) if isinstance(value, int | float) else "n/a"


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _page(answer: dict[str, Any]) -> str:
    return (
        f"Page {answer.get('page')} of {answer.get('pages')} ({answer.get('total')} in all; "
        "`page` and `page_size` for more)"
    )


def own_summary(answer: dict[str, Any]) -> str:
    """The answer's own ``summary`` (a recommendation writes one)."""
    return str(answer.get("summary") or "Answered: the JSON follows.")


def ask_summary(answer: dict[str, Any]) -> str:
    """The recommendation's summary, and how the question was read (to check)."""
    understood = answer.get("understood") or {}
    read = {k: understood[k] for k in ("model", "workload") if k in understood}
    unused = ", ".join(answer.get("unparsed") or []) or "none"
    return f"{own_summary(answer)}\n\nRead as {json.dumps(read)}; words not used: {unused}"


def estimate_summary(answer: dict[str, Any]) -> str:
    interval = answer.get("interval") or {}
    speed = answer.get("throughput") or {}
    fits = "fits" if answer.get("fits") else "**does not fit**"
    headroom = answer.get("memory_headroom")
    lines = [
        f"**{answer.get('count', 1)} x {answer.get('gpu')}** ({answer.get('precision')}): "
        f"step time **{_n(answer.get('step_time_s'))} s** (80% interval "
        f"{_n(interval.get('low'))} to {_n(interval.get('high'))} s)",
        f"- throughput (all GPUs): {_n(speed.get('samples_per_s'))} samples/s, "
        f"{_n(speed.get('tokens_per_s'))} tokens/s",
        f"- memory per GPU: {_gib(answer.get('memory_per_gpu_bytes'))} GiB of "
        f"{_gib(answer.get('usable_memory_bytes'))} GiB usable: {fits}"
        + (f" ({headroom:.0%} headroom)" if isinstance(headroom, float) else ""),
        f"- bound by: {answer.get('bound')}",
    ]
    if answer.get("latency_s") is not None:
        lines.append(f"- latency: {_n(answer['latency_s'])} s a request")
    if answer.get("time_to_train_s") is not None:
        lines.append(f"- time to train: {_n(answer['time_to_train_s'] / 3600)} h")
    return "\n".join(lines)


def plan_summary(answer: dict[str, Any]) -> str:
    layouts = answer.get("layouts") or []
    head = (
        f"**{answer.get('gpu')}**, {answer.get('task')}: {answer.get('layouts_total')} valid "
        f"layouts at {answer.get('count')} GPUs (the fewest that fit: "
        f"{answer.get('smallest_count')})"
    )
    if not layouts:
        return head + "; none to show."
    rows = []
    for row in layouts[:5]:
        lay = row.get("layout") or {}
        shape = "x".join(str(lay.get(f"{k}_parallel")) for k in ("data", "tensor", "pipeline"))
        rows.append(
            (
                row.get("rank"),
                f"{shape} (CP {lay.get('context_parallel')})",
                lay.get("zero_stage"),
                f"{lay.get('micro_batch_size')} x {lay.get('gradient_accumulation')}",
                lay.get("activation_checkpointing"),
                _n(row.get("step_time_s")),
                _n(row.get("samples_per_s")),
                _gib(row.get("memory_per_gpu_bytes")),
                _n(row.get("mfu"), 2),
                row.get("bound"),
            )
        )
    header = ("#", "DP x TP x PP", "ZeRO", "micro-batch x accum.", "checkpointing", "step s")
    return f"{head}; the best {len(rows)}:\n\n" + _table(
        (*header, "samples/s", "GiB/GPU", "MFU", "bound"), rows
    )


def tco_summary(answer: dict[str, Any]) -> str:
    usage = answer.get("usage") or {}
    lines = [
        f"**{answer.get('count')} x {answer.get('gpu')}**, "
        f"{_n(usage.get('gpu_hours_per_month'))} GPU-hours a month for "
        f"{usage.get('horizon_months')} months: cheapest is **{answer.get('cheapest')}**"
    ]
    owned, cloud, hybrid = (answer.get(k) for k in ("on_premise", "cloud", "hybrid"))
    if owned:
        lines.append(
            f"- on premise: {_n(owned.get('monthly_usd'))} USD a month "
            f"({_n(owned.get('capital_usd'))} USD capital)"
        )
    if cloud:
        lines.append(
            f"- cloud: {_n(cloud.get('monthly_usd'))} USD a month ({cloud.get('provider')} "
            f"{cloud.get('instance_type')}, {cloud.get('pricing')}, "
            f"{_n(cloud.get('usd_per_gpu_hour'))} USD a GPU-hour)"
        )
    if hybrid:
        lines.append(
            f"- hybrid: {_n(hybrid.get('monthly_usd'))} USD a month "
            f"({hybrid.get('owned_count')} GPUs owned, the rest rented)"
        )
    even = answer.get("break_even_gpu_hours_per_month")
    lines.append(
        f"- break-even: owning pays above {_n(even)} GPU-hours a month"
        if even is not None
        else "- break-even: none (renting stays cheaper at any usage)"
    )
    return "\n".join(lines)


def profile_summary(answer: dict[str, Any]) -> str:
    model, work = answer.get("model") or {}, answer.get("workload") or {}
    flops, memory = answer.get("flops") or {}, answer.get("memory") or {}
    return "\n".join(
        (
            f"**{model.get('name')}** ({_n(model.get('parameters'))} parameters), "
            f"{work.get('task')} at batch {work.get('batch_size')}, {work.get('precision')}",
            f"- one step: {_n(flops.get('total'))} FLOPs ({_n(flops.get('per_sample'))} a "
            f"sample), arithmetic intensity {_n(answer.get('arithmetic_intensity'))} FLOPs/byte",
            f"- memory: {_gib(memory.get('total_bytes'))} GiB (parameters "
            f"{_gib(memory.get('parameters_bytes'))}, activations "
            f"{_gib(memory.get('activations_bytes'))}, optimizer states "
            f"{_gib(memory.get('optimizer_states_bytes'))} GiB)",
            f"- profile_id `{answer.get('profile_id')}`: give it to estimate, plan or "
            "recommend instead of model and workload",
        )
    )


def models_summary(answer: dict[str, Any]) -> str:
    rows = (
        (m.get("name"), m.get("family"), _n(m.get("parameters")), ", ".join(m["aliases"][:3]))
        for m in answer.get("items", [])
    )
    return _table(("name", "family", "parameters", "aliases"), rows) + "\n\n" + _page(answer)


def model_summary(answer: dict[str, Any]) -> str:
    return (
        f"**{answer.get('name')}** ({answer.get('family')}): "
        f"{_n(answer.get('parameters'))} parameters; also called "
        f"{', '.join(answer.get('aliases') or []) or 'nothing else'}; source {answer.get('source')}"
    )


GPU_COLUMNS = ("memory_gb", "memory_bandwidth_gb_per_s", "bf16_tflops", "fp8_tflops", "tdp_w")


def gpus_summary(answer: dict[str, Any]) -> str:
    rows = (
        (g.get("id"), g.get("name"), *(_n(g.get(c)) for c in (*GPU_COLUMNS, "price_usd")))
        for g in answer.get("items", [])
    )
    header = ("id", "name", "memory GB", "GB/s", "BF16 TFLOPS", "FP8 TFLOPS", "TDP W", "USD")
    return _table(header, rows) + "\n\n" + _page(answer)


def gpu_summary(answer: dict[str, Any]) -> str:
    figures = ", ".join(f"{c} {_n(answer.get(c))}" for c in (*GPU_COLUMNS, "price_usd"))
    return (
        f"**{answer.get('name')}** (`{answer.get('id')}`, {answer.get('architecture')}, "
        f"{answer.get('form_factor')}, {answer.get('release_year')}): {figures}"
    )


OPERATIONS = (
    Operation("recommend", "post", "/v1/recommendations", own_summary),
    Operation("estimate", "post", "/v1/estimates", estimate_summary),
    Operation("plan", "post", "/v1/plans", plan_summary),
    Operation("tco", "post", "/v1/tco", tco_summary),
    Operation("profile", "post", "/v1/profiles", profile_summary),
    Operation("list_models", "get", "/v1/models", models_summary),
    Operation("get_model", "get", "/v1/models/{name}", model_summary),
    Operation("list_gpus", "get", "/v1/gpus", gpus_summary),
    Operation("get_gpu", "get", "/v1/gpus/{gpu_id}", gpu_summary),
    Operation("ask", "post", "/v1/ask", ask_summary, optional=True),
)


# -- the server ---------------------------------------------------------------------------

INSTRUCTIONS = (
    "rightsize says which GPUs to buy or rent for a deep-learning workload, and why. "
    "`recommend` ranks GPUs, counts, layouts and deployments with costs and reasons; "
    "`estimate` times a workload on one GPU type; `plan` ranks parallel layouts; `tco` "
    "compares owning with renting; `profile` counts a step's FLOPs and memory. Name models "
    "as `list_models` does (or give a Hugging Face config) and GPUs by their `list_gpus` id. "
    "A tool error names the fields to correct."
)


def build_server(tools: list[tuple[types.Tool, Operation]], send: Send, version: str) -> Any:
    """An MCP server offering ``tools``, each call made through ``send``."""
    import anyio
    from mcp import types
    from mcp.server.lowlevel import Server

    server: Server[Any, Any] = Server("rightsize", version=version, instructions=INSTRUCTIONS)
    operations = {tool.name: operation for tool, operation in tools}

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return [tool for tool, _ in tools]

    # the API validates the arguments: its errors name the fields as its documentation does
    @server.call_tool(validate_input=False)
    async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        operation = operations.get(name)
        if operation is None:
            known = ", ".join(operations)
            return types.CallToolResult(
                content=[_text(f"no tool '{name}' ({known})")], isError=True
            )
        # a recommendation computes for seconds: in a thread, the protocol carries on
        return await anyio.to_thread.run_sync(partial(call, operation, arguments, send))

    return server


def _claim_stdout() -> IO[str] | None:
    """A stdout for the protocol alone: the descriptor is duplicated for it, and itself now
    leads to stderr, so that a print or a library's output cannot break the stream. None
    where stdout is not a file (a test runner's)."""
    try:
        sys.stdout.flush()
        fd = sys.stdout.fileno()
        kept = os.dup(fd)
        os.dup2(sys.stderr.fileno(), fd)
    except (AttributeError, OSError, ValueError):
        return None
    return os.fdopen(kept, "w", encoding="utf-8", newline="\n")


async def _serve(server: Any, protocol: IO[str] | None) -> None:
    import anyio
    from mcp.server.stdio import stdio_server

    stdout = anyio.wrap_file(protocol) if protocol is not None else None
    async with stdio_server(stdout=stdout) as (read, write):
        await server.run(read, write, server.create_initialization_options())


@click.command("mcp")
@click.option(
    "--url",
    envvar="RIGHTSIZE_URL",
    default=None,
    help="call a running service (e.g. http://127.0.0.1:8000) instead of one built in-process "
    "(RIGHTSIZE_URL)",
)
@click.option("--api-key", envvar="RIGHTSIZE_API_KEY", default=None, help="sent as a bearer token")
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=1),
    default=300.0,
    show_default=True,
    help="seconds a call over HTTP may take",
)
def mcp_command(url: str | None, api_key: str | None, timeout_s: float) -> None:
    """Serve rightsize's tools to a chat assistant over stdio (the Model Context Protocol).

    Logs go to stderr; stdout carries the protocol alone. Register it with a client as the
    command `rightsize mcp` (docs/mcp.md).
    """
    import anyio

    protocol = _claim_stdout()
    try:
        if url:
            send = over_http(url, api_key, timeout_s)
        else:
            from knowledge import KnowledgeInvalid
            from service import create_app

            try:
                send = in_process(create_app(), api_key)
            except KnowledgeInvalid as exc:
                raise click.ClickException(f"refusing to start: {exc}") from None
        reply = send("GET", "/openapi.json", [], None)
        if reply.status != 200 or not isinstance(reply.body, dict):
            where = url or "the app"
            raise click.ClickException(f"no API document from {where}: {problem_text(reply)}")
        tools = make_tools(reply.body)
        server = build_server(tools, send, str(reply.body.get("info", {}).get("version", "")))
        anyio.run(_serve, server, protocol)
    finally:
        if protocol is not None:
            protocol.close()

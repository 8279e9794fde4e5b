"""``rightsize mcp``: the service's operations as tools for chat assistants (MCP, stdio).

Each tool is one API operation, found in the app's own OpenAPI document by path and method:
its input schema is that operation's request body (or its query and path parameters)
turned into a self-contained JSON Schema (``service.mcp.schemas``), its description the
operation's summary. A call goes to the API as a request, in-process through a test client
(the default) or over HTTP to a running service (``--url``), so validation, errors and
answers are exactly the API's. An answer comes back as a short markdown summary followed by
the full JSON; a problem (4xx, 5xx) as a tool error naming its bad fields, for the
assistant to correct its call (``service.mcp.answers``).

The ``mcp`` SDK is imported inside the functions that need it: ``service.cli`` imports this
module only for ``rightsize mcp``, and other commands must not pay seconds for it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import quote

import click

from service.client import Client
from service.mcp.answers import (
    Reply,
    ask_summary,
    estimate_summary,
    gpu_summary,
    gpus_summary,
    model_summary,
    models_summary,
    own_summary,
    plan_summary,
    problem_text,
    profile_summary,
    stacks_summary,
    tco_summary,
)
from service.mcp.schemas import BODY_KEY, request_schema

if TYPE_CHECKING:  # the SDK takes seconds to import: only `rightsize mcp` pays for it
    from mcp import types

# (method, path, query pairs, JSON body) -> the reply; the one place a request is made
Send = Callable[[str, str, list[tuple[str, str]], Any], Reply]


def through(client: Client) -> Send:
    """Requests through ``client``: an app in this process (``Client.in_process``) or a
    server (``Client(url)``), the transport the CLI and the Python client use too."""

    def send(method: str, path: str, query: list[tuple[str, str]], body: Any) -> Reply:
        return Reply(*client.exchange(method, path, query, body))

    return send


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
        schema, places = request_schema(spec, operation.method, operation.path)
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
    Operation("list_stacks", "get", "/v1/stacks", stacks_summary),
    Operation("ask", "post", "/v1/ask", ask_summary, optional=True),
)


# -- the server ---------------------------------------------------------------------------

INSTRUCTIONS = (
    "rightsize says which GPUs to buy or rent for a deep-learning workload, and why. "
    "`recommend` ranks GPUs, counts, layouts and deployments with costs and reasons; "
    "`estimate` times a workload on one GPU type; `plan` ranks parallel layouts; `tco` "
    "compares owning with renting; `profile` counts a step's FLOPs and memory. Name models "
    "as `list_models` does (or give a Hugging Face config), GPUs by their `list_gpus` id and "
    "the software stack (Transformers, torchtitan, Megatron, vLLM...) as `list_stacks` does. "
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
    client: Client | None = None
    try:
        if url:
            client = Client(url, api_key, timeout_s=timeout_s)
        else:
            from knowledge import KnowledgeInvalid

            try:
                client = Client.in_process()
            except KnowledgeInvalid as exc:
                raise click.ClickException(f"refusing to start: {exc}") from None
        send = through(client)
        reply = send("GET", "/openapi.json", [], None)
        if reply.status != 200 or not isinstance(reply.body, dict):
            where = url or "the app"
            raise click.ClickException(f"no API document from {where}: {problem_text(reply)}")
        tools = make_tools(reply.body)
        server = build_server(tools, send, str(reply.body.get("info", {}).get("version", "")))
        anyio.run(_serve, server, protocol)
    finally:
        if client is not None:
            client.close()
        if protocol is not None:
            protocol.close()

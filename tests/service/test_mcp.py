"""``rightsize mcp``: the tools as a chat client sees them, through the MCP SDK's own client.

One server process per mode (each loads the knowledge): in-process, and ``--url`` against
the app served over HTTP. Their sessions live in an event loop on a thread of their own
(an anyio blocking portal), so that each test makes its calls on the module's session.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, TextIO

import httpx
import jsonschema
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

from service.mcp.answers import Reply, problem_text
from service.mcp.schemas import SchemaMaker
from tests.conftest import WRITE_KEY

pytestmark = pytest.mark.slow  # subprocesses: the MCP server over stdio and HTTP

TOOLS = {
    "recommend": ("post", "/v1/recommendations"),
    "estimate": ("post", "/v1/estimates"),
    "plan": ("post", "/v1/plans"),
    "tco": ("post", "/v1/tco"),
    "profile": ("post", "/v1/profiles"),
    "list_models": ("get", "/v1/models"),
    "get_model": ("get", "/v1/models/{name}"),
    "list_gpus": ("get", "/v1/gpus"),
    "get_gpu": ("get", "/v1/gpus/{gpu_id}"),
    "list_stacks": ("get", "/v1/stacks"),
}
OPTIONAL = {"ask": ("post", "/v1/ask")}  # offered once the API has it
BERT = {"name": "bert-base"}
BERT_TUNING = {"task": "fine-tuning", "batch_size": 32, "seq_len": 128, "dataset_samples": 10000}
TCO = {"gpu": "h100-sxm-80gb", "count": 8, "usage": {"gpu_hours_per_month": 700}}


def _command() -> tuple[str, list[str]]:
    """The installed ``rightsize`` script beside this interpreter, else the module."""
    script = Path(sys.executable).with_name("rightsize")
    if script.is_file():
        return str(script), []
    return sys.executable, ["-c", "from service.cli import main; main()"]


class Assistant:
    """A chat client's side of one ``rightsize mcp`` process."""

    def __init__(
        self, portal: BlockingPortal, session: ClientSession, faults: list[Exception], log: Path
    ) -> None:
        self.portal, self.session, self.faults, self.log = portal, session, faults, log

    def tools(self) -> dict[str, types.Tool]:
        listed = self.portal.call(self.session.list_tools)
        return {tool.name: tool for tool in listed.tools}

    def call(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        return self.portal.call(self.session.call_tool, name, arguments)

    def answer(self, name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """A call that succeeds: its markdown summary and its JSON answer."""
        result = self.call(name, arguments)
        texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
        assert not result.isError, texts
        summary, full = texts
        answer: dict[str, Any] = json.loads(full)
        assert result.structuredContent == answer
        return summary, answer


@asynccontextmanager
async def _session(
    args: list[str], env: dict[str, str], log: TextIO, faults: list[Exception]
) -> AsyncIterator[ClientSession]:
    command, first = _command()
    server = StdioServerParameters(command=command, args=[*first, "mcp", *args], env=env)

    async def seen(message: Any) -> None:
        if isinstance(message, Exception):  # a line on stdout that is not the protocol
            faults.append(message)

    async with (
        stdio_client(server, errlog=log) as (read, write),
        ClientSession(
            read, write, read_timeout_seconds=timedelta(seconds=180), message_handler=seen
        ) as session,
    ):
        await session.initialize()
        yield session


@contextmanager
def assistant(folder: Path, *args: str, **env: str) -> Iterator[Assistant]:
    """A ``rightsize mcp`` process started with ``args`` and ``env`` over this process's
    environment (the tests' keys file and data), its stderr kept in ``folder``."""
    base = {k: v for k, v in os.environ.items() if k not in ("RIGHTSIZE_URL", "RIGHTSIZE_API_KEY")}
    log_path = folder / "stderr.log"
    faults: list[Exception] = []
    with (
        log_path.open("w", encoding="utf-8") as log,
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(_session(list(args), base | env, log, faults)) as session,
    ):
        yield Assistant(portal, session, faults, log_path)


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Assistant]:
    with assistant(tmp_path_factory.mktemp("mcp-local")) as found:
        yield found


@pytest.fixture(scope="module")
def remote(live_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Assistant]:
    folder = tmp_path_factory.mktemp("mcp-remote")
    with assistant(folder, "--url", live_server, RIGHTSIZE_API_KEY=WRITE_KEY) as found:
        yield found


def text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def _no_refs(schema: Any) -> bool:
    return "#/components/" not in json.dumps(schema)


def _converted(schemas: dict[str, Any], name: str) -> dict[str, Any]:
    maker = SchemaMaker({"components": {"schemas": schemas}})
    made = maker.finish(maker.schema({"$ref": f"#/components/schemas/{name}"}))
    jsonschema.Draft202012Validator.check_schema(made)
    return made


class TestSchemaMaker:
    """OpenAPI 3.0 schemas as JSON Schema 2020-12 (no server)."""

    def test_nullable_and_exclusive_bounds(self) -> None:
        made = _converted(
            {
                "Limits": {
                    "type": "object",
                    "properties": {
                        "budget": {"type": "number", "nullable": True, "minimum": 0},
                        "hours": {"type": "number", "minimum": 0, "exclusiveMinimum": True},
                        "kind": {"type": "string", "enum": ["a", "b"], "nullable": True},
                    },
                }
            },
            "Limits",
        )
        checker = jsonschema.Draft202012Validator(made)
        assert checker.is_valid({"budget": None, "kind": None, "hours": 0.5})
        assert not checker.is_valid({"hours": 0})
        assert not checker.is_valid({"budget": -1})

    def test_nested_references_inlined(self) -> None:
        made = _converted(
            {
                "Outer": {
                    "type": "object",
                    "properties": {
                        "inner": {
                            "description": "why",
                            "allOf": [{"$ref": "#/components/schemas/Inner"}],
                        }
                    },
                },
                "Inner": {"type": "object", "properties": {"n": {"type": "integer"}}},
            },
            "Outer",
        )
        inner = made["properties"]["inner"]
        assert inner == {
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "description": "why",
        }

    def test_recursion_carried_in_defs(self) -> None:
        node = {"$ref": "#/components/schemas/Node"}
        made = _converted(
            {
                "Node": {
                    "type": "object",
                    "properties": {
                        "kids": {"type": "array", "items": node},
                        "parent": {**node, "nullable": True},
                    },
                }
            },
            "Node",
        )
        assert set(made["$defs"]) == {"Node"}
        checker = jsonschema.Draft202012Validator(made)
        assert checker.is_valid({"kids": [{"kids": [], "parent": None}]})
        assert not checker.is_valid({"kids": [{"kids": [1]}]})


def test_problem_text_names_each_field_once() -> None:
    detail = "workload.batch_size: Not a valid integer."
    errors = [
        {"field": "workload.batch_size", "message": "Not a valid integer."},
        {"field": "workload.seq_len", "message": "Must be at least 1."},
    ]
    body = {"title": "Unprocessable Content", "detail": detail, "errors": errors}
    assert problem_text(Reply(422, body)).splitlines() == [
        f"Unprocessable Content (422): {detail}",
        "- workload.seq_len: Must be at least 1.",
    ]


class TestTools:
    def test_every_operation_is_a_tool(self, local: Assistant) -> None:
        tools = local.tools()
        assert set(TOOLS) <= set(tools) <= set(TOOLS) | set(OPTIONAL)
        for tool in tools.values():
            assert tool.inputSchema["type"] == "object"
            assert tool.description
            jsonschema.Draft202012Validator.check_schema(tool.inputSchema)
            assert _no_refs(tool.inputSchema), tool.name  # self-contained

    def test_schemas_carry_the_api_fields(self, local: Assistant) -> None:
        tools = local.tools()
        recommend = tools["recommend"].inputSchema["properties"]
        assert {"model", "workload", "objective", "constraints", "usage"} <= set(recommend)
        assert {"task", "batch_size", "seq_len"} <= set(recommend["workload"]["properties"])
        assert recommend["workload"]["additionalProperties"] is False
        assert "best_value" in recommend["objective"]["enum"]
        assert tools["get_gpu"].inputSchema["required"] == ["gpu_id"]
        gpus = tools["list_gpus"].inputSchema["properties"]
        assert {"vendor", "min_memory_gb", "sort", "page", "page_size"} <= set(gpus)
        assert set(tools["tco"].inputSchema["required"]) == {"gpu", "usage"}

    @pytest.mark.parametrize(
        ("body", "valid"),
        [
            pytest.param({"model": BERT, "workload": BERT_TUNING}, True, id="bert-fine-tuning"),
            pytest.param(
                {"model": BERT, "workload": BERT_TUNING, "constraints": {"max_gpus": 8}},
                True,
                id="constraints",
            ),
            pytest.param(
                {"model": BERT, "workload": {**BERT_TUNING, "batch_size": "eight"}},
                False,
                id="batch-size-a-string",
            ),
            pytest.param(
                {"model": BERT, "workload": {**BERT_TUNING, "batchsize": 8}},
                False,
                id="unknown-workload-field",
            ),
            pytest.param({"model": BERT, "objective": "slowest"}, False, id="unknown-objective"),
            pytest.param({"model": BERT, "workload": {"batch_size": 8}}, False, id="no-task"),
        ],
    )
    def test_recommend_schema_checks_bodies(
        self, local: Assistant, body: dict[str, Any], valid: bool
    ) -> None:
        schema = local.tools()["recommend"].inputSchema
        errors = list(jsonschema.Draft202012Validator(schema).iter_errors(body))
        assert not errors if valid else errors

    def test_tco_schema_checks_bodies(self, local: Assistant) -> None:
        checker = jsonschema.Draft202012Validator(local.tools()["tco"].inputSchema)
        assert checker.is_valid(TCO)
        assert not checker.is_valid({**TCO, "count": 0})
        assert not checker.is_valid({"gpu": "h100-sxm-80gb"})  # no usage


class TestCalls:
    def test_recommend(self, local: Assistant) -> None:
        summary, answer = local.answer("recommend", {"model": BERT, "workload": BERT_TUNING})
        assert summary == answer["summary"]
        assert answer["recommendations"]
        assert answer["recommendations"][0]["gpu_name"] in summary

    def test_ask(self, local: Assistant) -> None:
        if "ask" not in local.tools():
            pytest.skip("the API has no POST /v1/ask yet: the tool is offered once it does")
        question = "fine-tune bert-base at batch 32 on 10k samples"
        summary, answer = local.answer("ask", {"question": question})
        assert summary.startswith(answer["summary"])
        assert answer["understood"]["model"] == BERT
        assert '"task": "fine-tuning"' in summary

    @pytest.mark.parametrize(
        ("tool", "arguments", "said", "key"),
        [
            pytest.param(
                "estimate",
                {"model": BERT, "workload": BERT_TUNING, "gpu": "a100-sxm-80gb"},
                "step time",
                "step_time_s",
                id="estimate",
            ),
            pytest.param("tco", TCO, "break-even", "cheapest", id="tco"),
            pytest.param(
                "plan",
                {
                    "model": BERT,
                    "workload": {"task": "training", "batch_size": 8, "seq_len": 128},
                    "gpu": "a100-sxm-80gb",
                    "count": 2,
                    "limit": 3,
                },
                "| DP x TP x PP |",
                "layouts",
                id="plan",
            ),
            pytest.param(
                "profile",
                {"model": BERT, "workload": {"task": "training", "batch_size": 8, "seq_len": 64}},
                "profile_id",
                "flops",
                id="profile",
            ),
            pytest.param("get_model", {"name": "llama-3-8b"}, "**llama-3-8b**", "parameters"),
            pytest.param("get_gpu", {"gpu_id": "H100 SXM"}, "`h100-sxm-80gb`", "memory_gb"),
            pytest.param("list_models", {"page_size": 5}, "| name |", "items"),
        ],
    )
    def test_answers(
        self, local: Assistant, tool: str, arguments: dict[str, Any], said: str, key: str
    ) -> None:
        summary, answer = local.answer(tool, arguments)
        assert said in summary
        assert answer[key]

    def test_tco_summary(self, local: Assistant) -> None:
        summary, answer = local.answer("tco", TCO)
        assert summary.startswith("**8 x h100-sxm-80gb**, 700 GPU-hours a month")
        assert f"cheapest is **{answer['cheapest']}**" in summary

    def test_list_gpus_query(self, local: Assistant) -> None:
        arguments = {"vendor": "nvidia", "min_memory_gb": 80, "sort": "-memory_gb", "page_size": 3}
        summary, answer = local.answer("list_gpus", arguments)
        assert len(answer["items"]) == 3
        assert all(g["vendor"] == "nvidia" and g["memory_gb"] >= 80 for g in answer["items"])
        memory = [g["memory_gb"] for g in answer["items"]]
        assert memory == sorted(memory, reverse=True)
        for gpu in answer["items"]:
            assert f"| {gpu['id']} |" in summary

    def test_list_stacks_by_task(self, local: Assistant) -> None:
        """A chat client finds the stacks it may name: the serving ones for inference, each
        a row with what it does, and how a request names one."""
        summary, answer = local.answer("list_stacks", {"task": "inference"})
        ids = {s["id"] for s in answer["stacks"]}
        assert {"vllm", "tensorrt-llm", "sglang"} <= ids
        assert "torchtitan" not in ids
        for stack_id in ids:
            assert f"| {stack_id} |" in summary
        assert "continuous_batching True" in summary
        assert "`stack_options`" in summary
        result = local.call("list_stacks", {"task": "baking"})
        assert result.isError
        assert "task" in result.content[0].text

    def test_missing_field_is_a_tool_error_naming_it(self, local: Assistant) -> None:
        workload = {"task": "fine-tuning", "seq_len": 128}
        result = local.call("recommend", {"model": BERT, "workload": workload})
        assert result.isError
        assert "(422)" in text(result)
        assert "workload.batch_size: Missing data for required field." in text(result)

    def test_unknown_gpu_lists_close_matches(self, local: Assistant) -> None:
        result = local.call("get_gpu", {"gpu_id": "h1000"})
        assert result.isError
        assert "close matches: h100-sxm-80gb" in text(result)

    def test_unknown_query_argument_is_refused(self, local: Assistant) -> None:
        result = local.call("list_gpus", {"colour": "green"})
        assert result.isError
        assert "colour" in text(result)

    def test_logs_go_to_stderr(self, local: Assistant) -> None:
        local.answer("get_model", {"name": "bert-base"})
        lines = local.log.read_text(encoding="utf-8").splitlines()
        assert any(
            '"rightsize.access"' in line and "/v1/models/bert-base" in line for line in lines
        )
        assert local.faults == []  # nothing but the protocol on stdout


class TestRemote:
    def test_tools_from_the_served_document(self, remote: Assistant, live_server: str) -> None:
        spec = httpx.get(f"{live_server}/openapi.json", timeout=30).json()
        tools = remote.tools()
        assert set(TOOLS) <= set(tools)
        for name, (method, path) in TOOLS.items():
            summary = spec["paths"][path][method]["summary"]
            assert (tools[name].description or "").startswith(summary)
        body = spec["components"]["schemas"]["RecommendationRequest"]["properties"]
        assert set(tools["recommend"].inputSchema["properties"]) == set(body)

    def test_calls_over_http_with_the_key(
        self, remote: Assistant, caplog: pytest.LogCaptureFixture
    ) -> None:
        with caplog.at_level(logging.INFO, logger="rightsize.access"):
            summary, answer = remote.answer("get_gpu", {"gpu_id": "h100-sxm-80gb"})
        assert answer["id"] == "h100-sxm-80gb"
        assert "NVIDIA H100" in summary
        served = [r for r in caplog.records if getattr(r, "path", "") == "/v1/gpus/h100-sxm-80gb"]
        assert served
        assert all(getattr(r, "key_id", None) for r in served)  # the bearer key was sent

    def test_problem_over_http(self, remote: Assistant) -> None:
        result = remote.call("estimate", {"model": BERT, "workload": BERT_TUNING})
        assert result.isError
        assert "gpu: Missing data for required field." in text(result)
        assert remote.faults == []

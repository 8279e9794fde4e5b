"""Schemathesis with every check (bench/schemathesis_all.py): what the service refuses is
what openapi.yaml says it refuses. Booleans are true or false; every string query
parameter has a length and every integer a range; the rules across fields (a workload's
fields by task, one source of the model) are in the document; and the values the document
now names get answers, not 500s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from flask.testing import FlaskClient
from openapi_schema_validator import OAS30Validator

from profiles.workload import TASK_FIELDS, WorkloadSchema
from service.engine.deciding import cost
from tests.service.helpers import fields_in, problem

SPEC = yaml.safe_load((Path(__file__).resolve().parents[2] / "openapi.yaml").read_text("utf-8"))
TCO: dict[str, Any] = {"gpu": "h100-sxm-80gb", "usage": {"gpu_hours_per_month": 700}}
BERT: dict[str, Any] = {"name": "bert-base"}
TRAINING: dict[str, Any] = {"task": "training", "batch_size": 8, "seq_len": 128}


def valid(component: str, value: Any) -> bool:
    schema = {"$ref": f"#/components/schemas/{component}", "components": SPEC["components"]}
    return OAS30Validator(schema).is_valid(value)


class TestBooleansAreTrueOrFalse:
    @pytest.mark.parametrize("sent", [0, 1, "yes", "true", None], ids=repr)
    def test_interruptible_0_is_refused(self, client: FlaskClient, sent: Any) -> None:
        body = {**TCO, "usage": {**TCO["usage"], "interruptible": sent}}
        assert fields_in(problem(client.post("/v1/tco", json=body), 422)) == {"usage.interruptible"}

    def test_a_query_boolean_is_the_word(self, client: FlaskClient) -> None:
        assert client.get("/v1/offers?spot=true").status_code == 200
        assert fields_in(problem(client.get("/v1/offers?spot=1"), 422)) == {"spot"}


class TestQueryParametersAreBounded:
    @pytest.mark.parametrize(
        "url",
        [
            "/v1/offers?region=" + "r" * 101,
            "/v1/gpus?architecture=" + "a" * 101,
            "/v1/benchmarks?suite=" + "s" * 101,
            "/v1/models?page=100001",
            "/v1/benchmarks?gpu_count=100001",
        ],
    )
    def test_an_oversized_value_is_a_422_naming_it(self, client: FlaskClient, url: str) -> None:
        name = url.split("?")[1].split("=", maxsplit=1)[0]
        assert fields_in(problem(client.get(url), 422)) == {name}

    def test_every_query_string_has_a_length_and_integer_a_range(self) -> None:
        for path, item in SPEC["paths"].items():
            for method, operation in item.items():
                if method == "parameters":  # the path's own: path parameters
                    continue
                for parameter in operation.get("parameters", []):
                    schema = parameter.get("schema", {})
                    if parameter.get("in") != "query" or "enum" in schema:
                        continue
                    where = (method, path, parameter["name"])
                    if schema.get("type") == "string":
                        assert "maxLength" in schema, where
                    if schema.get("type") == "integer":
                        assert {"minimum", "maximum"} <= set(schema), where


class TestWorkloadFieldsByTask:
    @pytest.mark.parametrize("task", TASK_FIELDS)
    def test_the_document_and_the_schema_agree(self, task: str) -> None:
        every = set().union(*TASK_FIELDS.values())
        sample = {"batch_size": 8, "precision": "bf16", "seq_len": 128, "image_size": 224,
                  "attention": "flash", "optimizer": "adamw", "activation_checkpointing": "none",
                  "dataset_samples": 1000, "epochs": 1.0, "method": "lora", "lora_rank": 8,
                  "prompt_tokens": 100, "output_tokens": 10}  # fmt: skip
        taken = {"task": task, **{k: v for k, v in sample.items() if k in TASK_FIELDS[task]}}
        assert valid("Workload", taken)
        assert not WorkloadSchema().validate(taken)
        for name in sorted(every - set(TASK_FIELDS[task]) - {"dataset_tokens"}):
            refused = {**taken, name: sample[name]}
            assert not valid("Workload", refused), name
            assert name in WorkloadSchema().validate(refused), name

    @pytest.mark.parametrize(
        "workload",
        [
            pytest.param({"task": "training"}, id="no-batch-size"),
            pytest.param({**TRAINING, "precision": "int8"}, id="int8-training"),
            pytest.param(
                {**TRAINING, "dataset_samples": 1, "dataset_tokens": 1}, id="samples-and-tokens"
            ),
            pytest.param(
                {"task": "fine-tuning", "batch_size": 8, "lora_rank": 8}, id="rank-without-lora"
            ),
        ],
    )
    def test_each_rule_is_in_the_document(self, workload: dict[str, Any]) -> None:
        assert not valid("Workload", workload)
        assert WorkloadSchema().validate(workload)


class TestOneSourceOfTheModel:
    @pytest.mark.parametrize(
        "extra",
        [
            pytest.param({"profile_id": "abc"}, id="model-and-profile"),
            pytest.param({"trace_id": "t-1"}, id="model-and-trace"),
        ],
    )
    def test_two_sources_are_refused_as_the_document_says(
        self, client: FlaskClient, extra: dict[str, Any]
    ) -> None:
        body = {"model": BERT, "workload": TRAINING, "gpu": "h100-sxm-80gb", **extra}
        assert not valid("EstimateRequest", body)
        assert fields_in(problem(client.post("/v1/estimates", json=body), 422)) == set(extra)

    def test_a_model_without_its_workload_is_refused_as_the_document_says(
        self, client: FlaskClient
    ) -> None:
        body = {"model": BERT, "gpu": "h100-sxm-80gb"}
        assert not valid("PlanRequest", body)
        assert fields_in(problem(client.post("/v1/plans", json=body), 422)) == {"workload"}


class TestNamedValuesGetAnswers:
    """Values the document came to name (keys of onprem, the model's forms) were 500s."""

    @pytest.mark.parametrize(
        ("onprem", "field"),
        [
            pytest.param({"depreciation_years": 0}, "onprem.depreciation_years", id="years-0"),
            pytest.param({"utilisation": 0}, "onprem.utilisation", id="utilisation-0"),
            pytest.param({"pue": 0.5}, "onprem.pue", id="pue-under-1"),
        ],
    )
    def test_a_divisor_of_0_is_a_422(
        self, client: FlaskClient, onprem: dict[str, Any], field: str
    ) -> None:
        body = {**TCO, "onprem": onprem}
        assert not valid("TcoRequest", body)
        assert fields_in(problem(client.post("/v1/tco", json=body), 422)) == {field}

    def test_a_denormal_usage_is_a_422_not_an_infinite_cost(self, client: FlaskClient) -> None:
        body = {**TCO, "usage": {"gpu_hours_per_month": 5e-324}}
        assert fields_in(problem(client.post("/v1/tco", json=body), 422)) == {
            "usage.gpu_hours_per_month"
        }

    def test_a_denormal_input_rate_is_a_422_not_an_infinite_step(self, client: FlaskClient) -> None:
        body = {"model": BERT, "workload": TRAINING, "gpu": "h100-sxm-80gb",
                "input_samples_per_s": 5e-324}  # fmt: skip
        assert fields_in(problem(client.post("/v1/estimates", json=body), 422)) == {
            "input_samples_per_s"
        }

    def test_free_owned_gpus_are_ranked_not_a_500(self, client: FlaskClient) -> None:
        priced = [k for k, b in cost.OVERRIDE_BOUNDS.items() if b.least == 0]
        free = dict.fromkeys(priced, 0.0)  # every price and running cost 0
        body = {"model": BERT, "workload": TRAINING, "onprem": {**free, "pue": 1.0},
                "constraints": {"deployment": "on-premise"}}  # fmt: skip
        response = client.post("/v1/recommendations", json=body)
        assert response.status_code == 200, response.get_data(as_text=True)

    def test_a_model_name_that_is_no_string_is_a_422(self, client: FlaskClient) -> None:
        body = {"model": {"name": {}}, "workload": TRAINING}
        assert fields_in(problem(client.post("/v1/profiles", json=body), 422)) == {"model.name"}

    def test_a_fractional_zero_stage_is_refused(self, client: FlaskClient) -> None:
        body = {"model": BERT, "workload": TRAINING, "gpu": "h100-sxm-80gb",
                "layout": {"zero_stage": 0.5}}  # fmt: skip
        assert fields_in(problem(client.post("/v1/estimates", json=body), 422)) == {
            "layout.zero_stage"
        }

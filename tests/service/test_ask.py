"""POST /v1/ask: questions in words read into recommendation requests (the parser, fast, on
the real catalog and knowledge), and a few answered end to end."""

from __future__ import annotations

import contextlib
import json
import random
from dataclasses import replace
from typing import Any

import pytest
from flask.testing import FlaskClient
from marshmallow import ValidationError

from knowledge import Knowledge
from profiles.model_catalog import Catalog
from service.api.base import schema_instance
from service.api.recommendations import RecommendationRequestSchema
from service.ask import Clouds, NoModelNamed, Reading, read_question
from service.engine.deciding import candidate
from tests.service.helpers import fields_in, problem


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.load()


@pytest.fixture(scope="module")
def clouds(knowledge: Knowledge) -> Clouds:
    return Clouds.of(knowledge, candidate.DEPLOYMENTS)


def read(question: str, catalog: Catalog, clouds: Clouds) -> Reading:
    return read_question(question, catalog, clouds)


def missing(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Where ``actual`` differs from ``expected`` in what ``expected`` states (a subset)."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{path or '(top)'}: {actual!r} is not a mapping"]
        out = []
        for key, value in expected.items():
            where = f"{path}.{key}" if path else key
            if key not in actual:
                out.append(f"{where}: absent")
            else:
                out.extend(missing(value, actual[key], where))
        return out
    same = expected == pytest.approx(actual) if isinstance(expected, float) else expected == actual
    return [] if same else [f"{path}: {actual!r}, expected {expected!r}"]


def llm(name: str, **workload: Any) -> dict[str, Any]:
    return {"model": {"name": name}, "workload": workload}


READINGS = [
    pytest.param(
        "Fine-tune Llama 3 8B with LoRA on 20M tokens under $50 on AWS",
        {**llm("llama-3-8b", task="fine-tuning", method="lora", dataset_tokens=20_000_000),
         "constraints": {"budget_monthly_usd": 50.0, "providers": ["aws"], "deployment": "cloud"},
         "usage": {"runs_per_month": 1}, "objective": "best_value"},
        id="lora-tokens-job-budget-provider",
    ),
    pytest.param(
        "Pretrain Llama-3-8B on 10B tokens, at most 64 GPUs, as fast as possible",
        {**llm("llama-3-8b", task="training", dataset_tokens=10_000_000_000, seq_len=2048),
         "constraints": {"max_gpus": 64}, "objective": "fastest"},
        id="hyphenated-name-pretrain",
    ),
    pytest.param(
        "train llama3 8b from scratch on 1.5 billion tokens",
        llm("llama-3-8b", task="training", dataset_tokens=1_500_000_000),
        id="joined-name-from-scratch-billion",
    ),
    pytest.param(
        "serve Llama 3.1 70B, prompt 1000 tokens, 256 output tokens, 32 concurrent users",
        {**llm("llama-3.1-70b", task="inference", prompt_tokens=1000, output_tokens=256,
               batch_size=1), "concurrency": 32},
        id="dotted-version-serving",
    ),
    pytest.param(
        "mistral 7b inference in the cloud only, int4, on gcp or azure",
        {**llm("mistral-7b", task="inference", precision="int4"),
         "constraints": {"providers": ["gcp", "azure"], "deployment": "cloud"}},
        id="cloud-only-two-providers-int4",
    ),
    pytest.param(
        "fine-tune bert base on 50k samples, seq 128, batch 32, by tomorrow",
        {**llm("bert-base", task="fine-tuning", method="full", dataset_samples=50_000,
               seq_len=128, batch_size=32), "constraints": {"deadline_hours": 24.0}},
        id="bert-samples-by-tomorrow",
    ),
    pytest.param(
        "Train ResNet50 on ImageNet for 90 epochs at 224px, fp16, cheapest",
        {**llm("resnet-50", task="training", dataset_samples=1_281_167, epochs=90.0,
               image_size=224, precision="fp16", batch_size=32), "objective": "cheapest"},
        id="resnet-imagenet-epochs-pixels",
    ),
    pytest.param(
        "train gpt2 in 24 hours with a budget of 2000 dollars",
        {**llm("gpt2", task="training", seq_len=1024, batch_size=8),
         "constraints": {"deadline_hours": 24.0, "budget_monthly_usd": 2000.0},
         "usage": {"runs_per_month": 1}},
        id="gpt2-hours-dollars",
    ),
    pytest.param(
        "whisper small inference on-prem",
        {**llm("whisper-small", task="inference", prompt_tokens=224, output_tokens=224),
         "constraints": {"deployment": "on-premise"}},
        id="whisper-on-prem-within-learned-positions",
    ),
    pytest.param(
        "Qwen2.5 7B sft on 1.5 billion tokens with 4k context, $5k a month, 10 runs a month, "
        "for 3 years",
        {**llm("qwen2.5-7b", task="fine-tuning", method="full", seq_len=4096, batch_size=2),
         "constraints": {"budget_monthly_usd": 5000.0},
         "usage": {"runs_per_month": 10.0, "horizon_months": 36}},
        id="qwen-monthly-budget-runs-horizon",
    ),
    pytest.param(
        "What GPU should I buy for under $300k to fine-tune mixtral 8x7b with qlora?",
        {**llm("mixtral-8x7b", task="fine-tuning", method="qlora"),
         "constraints": {"budget_capital_usd": 300_000.0, "deployment": "on-premise"}},
        id="buy-under-capital-qlora",
    ),
    pytest.param(
        "deploy Llama-3-8B, capital budget $200k, deadline 8h, lowest cost",
        {**llm("llama-3-8b", task="inference"), "objective": "cheapest",
         "constraints": {"budget_capital_usd": 200_000.0, "deadline_hours": 8.0}},
        id="capital-budget-deadline-hours",
    ),
    pytest.param(
        "serve stable diffusion 1.5 on lambda",
        {**llm("stable-diffusion-1.5-unet", task="inference", batch_size=1),
         "constraints": {"providers": ["lambda"], "deployment": "cloud"}},
        id="name-beginning-stable-diffusion",
    ),
    pytest.param(
        "vit b 16 on 1.2M images for 3 epochs in us-east-1",
        {**llm("vit-b-16", task="training", dataset_samples=1_200_000, epochs=3.0),
         "constraints": {"regions": ["us-east-1"], "deployment": "cloud"}},
        id="vit-images-region",
    ),
    pytest.param(
        "fine-tune llama 2 13b with lora rank 64, 2048 tokens per sample, 3 epochs, "
        "100k examples, bf16",
        llm("llama-2-13b", task="fine-tuning", method="lora", lora_rank=64, seq_len=2048,
            epochs=3.0, dataset_samples=100_000, precision="bf16"),
        id="lora-rank-tokens-per-sample",
    ),
    pytest.param(
        "meta-llama/Meta-Llama-3-8B on vast",
        {**llm("llama-3-8b"), "constraints": {"providers": ["vast"], "deployment": "cloud"}},
        id="org-prefixed-alias",
    ),
    pytest.param(
        "Llama 3.1 70B, 500 GPU hours a month, bursty, owned hardware",
        {**llm("llama-3.1-70b"), "constraints": {"deployment": "on-premise"},
         "usage": {"gpu_hours_per_month": 500.0, "pattern": "bursty"}},
        id="gpu-hours-bursty-owned",
    ),
    pytest.param(
        "gpt2 train from scratch on 1B tokens within 2 days on 8 GPUs, spot",
        {**llm("gpt2", task="training", dataset_tokens=1_000_000_000),
         "constraints": {"deadline_hours": 48.0, "max_gpus": 8}, "usage": {"interruptible": True}},
        id="within-days-on-gpus-spot",
    ),
    pytest.param(
        "cheapest single GPU to host phi 3 mini",
        {**llm("phi-3-mini", task="inference"), "objective": "cheapest",
         "constraints": {"max_gpus": 1}},
        id="single-gpu-host",
    ),
    pytest.param(
        "llama 3 70b",
        {**llm("llama-3-70b", task="inference", batch_size=1, prompt_tokens=512,
               output_tokens=256), "objective": "best_value"},
        id="default-generative-served",
    ),
    pytest.param(
        "bert large",
        llm("bert-large", task="fine-tuning", method="full", seq_len=512, batch_size=16),
        id="default-encoder-fine-tuned",
    ),
    pytest.param(
        "efficientnet b0",
        llm("efficientnet-b0", task="training", batch_size=32),
        id="default-vision-trained",
    ),
    pytest.param(
        "llama 3 8b on 20M tokens",
        llm("llama-3-8b", task="fine-tuning", method="full", dataset_tokens=20_000_000),
        id="small-dataset-means-fine-tuning",
    ),
    pytest.param(
        "llama 3 8b on 2 trillion tokens",
        llm("llama-3-8b", task="training", dataset_tokens=2_000_000_000_000),
        id="large-dataset-means-training",
    ),
    pytest.param(
        "gemma 2 9b with LoRA, two epochs, $100",
        {**llm("gemma-2-9b", task="fine-tuning", method="lora", epochs=2.0),
         "constraints": {"budget_monthly_usd": 100.0}, "usage": {"runs_per_month": 1}},
        id="word-number-epochs",
    ),
    pytest.param(
        "fine-tune llama 3 8b, under $50 per run, 4 runs a month",
        {**llm("llama-3-8b", task="fine-tuning"), "constraints": {"budget_monthly_usd": 200.0},
         "usage": {"runs_per_month": 4.0}},
        id="job-budget-times-runs",
    ),
    pytest.param(
        "rent GPUs to fine-tune Llama-3-8B with QLoRA within 2 days",
        {**llm("llama-3-8b", task="fine-tuning", method="qlora"),
         "constraints": {"deployment": "cloud", "deadline_hours": 48.0}},
        id="rent-means-cloud",
    ),
    pytest.param(
        "t5 base fine-tune for 1 epoch on 1,000,000 examples in fp32",
        llm("t5-base", task="fine-tuning", epochs=1.0, dataset_samples=1_000_000,
            precision="fp32", seq_len=512),
        id="thousands-separators-fp32",
    ),
    pytest.param(
        "serve mistral 7b on google cloud as cheaply as possible",
        {**llm("mistral-7b", task="inference"), "objective": "cheapest",
         "constraints": {"providers": ["gcp"], "deployment": "cloud"}},
        id="provider-by-name",
    ),
    pytest.param(
        "resnet-50 inference on Amazon Web Services, batch 64",
        {**llm("resnet-50", task="inference", batch_size=64),
         "constraints": {"providers": ["aws"]}},
        id="provider-by-full-name-vision-serving",
    ),
    pytest.param(
        "llama 3 8b with 128k context",
        llm("llama-3-8b", task="inference", prompt_tokens=131_072),
        id="binary-k-context-serving",
    ),
    pytest.param(
        "llama 3 8b training, seq 8192, global batch 512, gradient checkpointing, adamw",
        {**llm("llama-3-8b", task="training", seq_len=8192, batch_size=1,
               activation_checkpointing="full", optimizer="adamw"), "global_batch_size": 512},
        id="global-batch-checkpointing-optimizer",
    ),
    pytest.param(
        "retrain resnet-18 weekly on cifar-10",
        {**llm("resnet-18", task="training", dataset_samples=50_000),
         "usage": {"runs_per_month": 52 / 12}},
        id="weekly-named-dataset",
    ),
    pytest.param(
        "Mixtral 8x7B, max 8 gpus, quickest, on premise",
        {**llm("mixtral-8x7b"), "objective": "fastest",
         "constraints": {"max_gpus": 8, "deployment": "on-premise"}},
        id="max-gpus-quickest-on-premise",
    ),
    pytest.param(
        "train stable diffusion 2 base on 1M images at 512px",
        llm("stable-diffusion-2-base", task="training", image_size=512,
            dataset_samples=1_000_000),
        id="longest-name-wins",
    ),
    pytest.param(
        "qlora llama 3 8b on 20M tokens with torchtune",
        {**llm("llama-3-8b", task="fine-tuning", method="qlora", seq_len=2048, batch_size=4,
               dataset_tokens=20_000_000), "stack": "torchtune"},
        id="stack-by-id",
    ),
    pytest.param(
        "serve llama 3.1 70b on TensorRT-LLM",
        {**llm("llama-3.1-70b", task="inference"), "stack": "tensorrt-llm"},
        id="stack-by-name",
    ),
]  # fmt: skip


class TestReading:
    @pytest.mark.parametrize(("question", "expected"), READINGS)
    def test_question_read(
        self, catalog: Catalog, clouds: Clouds, question: str, expected: dict[str, Any]
    ) -> None:
        reading = read(question, catalog, clouds)
        assert missing(expected, reading.request) == [], reading.request

    @pytest.mark.parametrize(("question", "expected"), READINGS)
    def test_what_is_read_is_a_valid_request(
        self, catalog: Catalog, clouds: Clouds, question: str, expected: dict[str, Any]
    ) -> None:
        reading = read(question, catalog, clouds)
        schema_instance(RecommendationRequestSchema).load(reading.request)
        assert json.loads(json.dumps(reading.request)) == reading.request

    def test_words_no_rule_used_are_unparsed(self, catalog: Catalog, clouds: Clouds) -> None:
        reading = read("Serve Llama 3 8B on RunPod with blue widgets, please", catalog, clouds)
        assert reading.unparsed == ["runpod", "blue", "widgets"]
        assert read("fine-tune llama 3 8b on 20M tokens", catalog, clouds).unparsed == []

    def test_the_first_of_two_contrary_statements_counts(
        self, catalog: Catalog, clouds: Clouds
    ) -> None:
        reading = read("fastest way to serve llama 3 8b, no, cheapest", catalog, clouds)
        assert reading.request["objective"] == "fastest"
        assert "cheapest" in reading.unparsed

    def test_a_value_the_task_cannot_use_stays_unparsed(
        self, catalog: Catalog, clouds: Clouds
    ) -> None:
        reading = read("train llama 3 8b at 224px", catalog, clouds)
        assert "image_size" not in reading.request["workload"]
        assert "224px" in reading.unparsed

    def test_same_question_same_reading(self, catalog: Catalog, clouds: Clouds) -> None:
        question = "Fine-tune Llama 3 8B with LoRA on 20M tokens under $50 on AWS by tomorrow"
        first = read(question, catalog, clouds)
        assert read(question, Catalog.load(), clouds) == first
        assert read(question, catalog, clouds) == first

    def test_names_come_from_the_catalog_given(self, catalog: Catalog) -> None:
        base = catalog.entries["llama-3-8b"]
        only = Catalog([replace(base, name="zeta-9b", aliases=("Zeta9B-Instruct",))])
        assert read_question("serve Zeta 9B", only).request["model"] == {"name": "zeta-9b"}
        assert read_question("zeta9b instruct", only).unparsed == []
        with pytest.raises(NoModelNamed):
            read_question("serve llama 3 8b", only)

    def test_no_model_names_close_catalog_entries(self, catalog: Catalog, clouds: Clouds) -> None:
        with pytest.raises(NoModelNamed) as begun:
            read("llama 3 inference on aws", catalog, clouds)
        assert {"llama-3-8b", "llama-3-70b"} <= set(begun.value.suggestions)
        assert begun.value.field == "question"
        assert "/v1/models" in begun.value.message
        with pytest.raises(NoModelNamed) as misspelt:
            read("serve lama3 8b", catalog, clouds)
        assert "llama-3-8b" in misspelt.value.suggestions
        with pytest.raises(NoModelNamed) as nothing:
            read("which GPU for my chatbot?", catalog, clouds)
        assert nothing.value.suggestions == []


ODD_WORDS = ["llama 3 8b", "$", "1e400", "-", "k", "tokens", "gpus", "\U0001f642", "İ", "\x00",
             ",", "9" * 30, "epochs", "hours", "by", "under", "a month", "x", ".", "seq", "4k",
             "lora", "serve", "train", "px", "batch", "per", "runs", "in", "aws", "\u200b",
             "\ufb01ne-tune", "0", "-0.5", "1,000,000", "nan", "inf", "%", "/", "max",
             "context"]  # fmt: skip


def odd_questions(count: int) -> list[str]:
    pick = random.Random(20261206)
    return [" ".join(pick.choices(ODD_WORDS, k=pick.randint(1, 30))) for _ in range(count)]


class TestOddQuestions:
    def test_odd_questions_are_read_or_refused_never_broken(
        self, catalog: Catalog, clouds: Clouds
    ) -> None:
        schema = schema_instance(RecommendationRequestSchema)
        for question in odd_questions(300):
            try:
                reading = read(question, catalog, clouds)
            except NoModelNamed:
                continue
            json.dumps(reading.request, allow_nan=False)
            with contextlib.suppress(ValidationError):  # the API's 422 naming the question
                schema.load(reading.request)


class TestAskApi:
    def test_the_answer_is_the_recommendation_for_what_was_understood(
        self, client: FlaskClient
    ) -> None:
        response = client.post(
            "/v1/ask", json={"question": "Fine-tune BERT base on 50k samples, seq 128, cheapest"}
        )
        assert response.status_code == 200, response.get_data(as_text=True)
        body = response.get_json()
        assert body["recommendations"]
        assert body["unparsed"] == []
        understood = body["understood"]
        assert understood["model"] == {"name": "bert-base"}
        assert understood["workload"]["task"] == "fine-tuning"
        assert understood["objective"] == "cheapest"
        assert body["request"] == understood
        same = client.post("/v1/recommendations", json=understood)
        assert same.status_code == 200
        assert same.get_json()["id"] == body["id"]

    @pytest.mark.parametrize(
        ("question", "suggested"),
        [
            pytest.param("which GPU for my chatbot?", None, id="no-model"),
            pytest.param("llama 3 inference", "llama-3-8b", id="a-beginning"),
        ],
    )
    def test_no_model_is_a_422_naming_the_question(
        self, client: FlaskClient, question: str, suggested: str | None
    ) -> None:
        body = problem(client.post("/v1/ask", json={"question": question}), 422)
        assert fields_in(body) == {"question"}
        assert "no model named" in body["errors"][0]["message"]
        if suggested is not None:
            assert suggested in body["suggestions"]

    @pytest.mark.parametrize(
        ("sent", "field"),
        [
            pytest.param({"question": ""}, "question", id="empty"),
            pytest.param({"question": "llama 3 8b " * 100}, "question", id="too-long"),
            pytest.param({"question": 8}, "question", id="not-a-string"),
            pytest.param({}, "question", id="absent"),
            pytest.param({"question": "serve llama 3 8b", "model": "x"}, "model", id="unknown"),
        ],
    )
    def test_a_bad_body_is_a_422(
        self, client: FlaskClient, sent: dict[str, Any], field: str
    ) -> None:
        assert fields_in(problem(client.post("/v1/ask", json=sent), 422)) == {field}

    def test_a_body_that_is_not_json_is_refused(self, client: FlaskClient) -> None:
        problem(client.post("/v1/ask", data="{not json", content_type="application/json"), 400)
        problem(client.post("/v1/ask", data="serve gpt2", content_type="text/plain"), 415)

    @pytest.mark.parametrize(
        "question",
        [
            pytest.param("serve llama 3 8b for $1e400", id="infinite-money"),
            pytest.param("train llama 3 8b on 99999999999999999999 tokens", id="huge-tokens"),
            pytest.param("serve llama 3 8b on -5 gpus", id="negative-gpus"),
            pytest.param("serve llama 3 8b with a budget of -100 dollars", id="negative-money"),
            pytest.param("train llama 3 8b in 0 hours", id="zero-deadline"),
            pytest.param("fine-tune gpt2 with seq 4096", id="past-learned-positions"),
            pytest.param("\U0001f642 İ \x00 \u200b \ufb01", id="unicode-only"),
        ],
    )
    def test_what_cannot_be_asked_is_a_422_naming_the_question(
        self, client: FlaskClient, question: str
    ) -> None:
        body = problem(client.post("/v1/ask", json={"question": question}), 422)
        assert fields_in(body) == {"question"}

"""``/v1/ask``: a one-line question read into a recommendation request, and answered."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from flask import Response, current_app
from flask.views import MethodView
from marshmallow import Schema, ValidationError, fields, post_load, validate

from profiles.errors import InvalidDescription
from service.api.base import Blueprint, schema_instance
from service.api.recommendations import RecommendationRequestSchema, RecommendationSchema, answer
from service.ask import Clouds, NoModelNamed, Reading, read_question
from service.engine.deciding import candidate
from service.engine.errors import InvalidRequest
from service.engine.requests import RecommendationRequest
from service.errors import InvalidInput
from service.state import state

blp = Blueprint("ask", __name__, url_prefix="/v1", description="Questions in words")


class AskRequestSchema(Schema):
    question = fields.String(
        required=True,
        validate=validate.Length(1, 1000),
        metadata={
            "description": "one line naming a catalog model (GET /v1/models) and what to do "
            "with it, e.g. 'fine-tune Llama 3 8B with LoRA on 20M tokens under $50 on AWS'"
        },
    )

    @post_load
    def _typed(self, data: dict[str, Any], **_: Any) -> AskRequest:
        return AskRequest(**data)


@dataclass(frozen=True)
class AskRequest:
    """``POST /v1/ask``'s body, typed: one line in words."""

    question: str


class AskAnswerSchema(RecommendationSchema):
    understood = fields.Dict(
        metadata={
            "description": "the POST /v1/recommendations body the question was read into, "
            "defaults included: post it (changed) to ask again precisely"
        }
    )
    unparsed = fields.List(
        fields.String(),
        metadata={"description": "words of the question no rule used (less stop words)"},
    )


@blp.route("/ask")
class Ask(MethodView):
    @blp.arguments(AskRequestSchema)
    @blp.response(200, AskAnswerSchema)
    @blp.problem(404)
    @blp.problem(422)
    @blp.problem(503)
    def post(self, body: AskRequest) -> Response:
        """Answer a question in words: which GPUs for this model and workload

        For chat bots without tool calling. The question is read deterministically (word
        lists and patterns, no language model) into a `POST /v1/recommendations` body,
        answered exactly as that endpoint answers it (the same `id`), with `understood`
        (the body read, every default written out) and `unparsed` (the words no rule
        used). Check `understood`; to correct it, post it changed to
        `/v1/recommendations`.

        Read: the **model**, the longest catalog name or alias in the question, case,
        spaces, hyphens and dots ignored (`llama 3 8b`, `Llama-3.1-70B`, `qwen2.5 7b`,
        `resnet50`, `stable diffusion 1.5`; none is a 422 naming `question`, with close
        catalog names); the **task** (`pretrain`/`train from scratch`: training;
        `fine-tune`/`sft`: fine-tuning, `lora`/`qlora` its method, `lora rank 64`;
        `serve`/`inference`/`deploy`/`host`/`chatbot`: inference); the **dataset**
        (`20M tokens`, `1.5 billion tokens`, `50k samples`, `1.2M images`, `ImageNet`,
        `COCO`, `CIFAR-10`, `3 epochs`); `4k context`/`seq 2048`/`2048 tokens per sample`
        (4k is 4,096), `batch 32`, `global batch 512`, `at 224px`, `bf16`/`fp16`/`fp8`/
        `fp32`/`int8`/`int4`, `adamw`/`sgd`/`8-bit adam`, `gradient checkpointing`;
        serving: `prompt 1000 tokens`, `256 output tokens`, `32 concurrent users`;
        **money**: `$5k a month` (monthly budget), `capital budget $200k`/`buy for under
        $300k` (capital, and buying means on premise), and a budget with no period
        (`under $50`, `budget 2000 dollars`) is one job's: the monthly budget is it times
        the runs a month (one, written into `usage`, unless said; for inference a job is a
        million requests); **time**: `by tomorrow` (24 h), `in 24 hours`, `within 2
        days`, `deadline 8h`; **where**: `cloud only`/`rent` (cloud), `on-prem`/`buy`/
        `own hardware`/`locally` (on premise), the providers and regions of
        `/v1/offers` by id or name (`on AWS`, `gcp`, `azure`, `lambda`, `vast`,
        `us-east-1`; naming one means the cloud); **objective** `fastest`/`as fast as
        possible`, `cheapest`/`lowest cost`, else `best_value`; `at most 8 GPUs`/`on 4
        GPUs`/`single GPU` (max_gpus); **usage**: `10 runs a month`, `twice a week`,
        `500 GPU hours a month`, `for 3 years` (horizon), `spot`/`interruptible`,
        `bursty`. The first of two contrary statements counts.

        Defaults: with no task word, a method means fine-tuning; a dataset, epochs or an
        optimizer means training (fine-tuning for a transformer on under 1B tokens);
        prompt, output, concurrency or int8/int4 mean inference; else generative models
        (language models, diffusion) are served, encoders (BERT) fine-tuned, vision and
        other models trained. Fine-tuning is full unless LoRA or QLoRA is named.
        Training a transformer: seq_len 2,048 (512 for encoders and encoder-decoders,
        within a learned position table), a batch of about 8,192 tokens per GPU; serving
        a generative model: a 512-token prompt, 256 output tokens (within a learned
        position table), batch 1 (concurrency is the batch); other models: batch 32 and
        the model's image size. Precision bf16; objective best_value; deployment any.
        Numbers out of range (`$1e400`, `-5 GPUs`) are a 422 naming `question`.
        """
        reading = _read(body.question)
        found = _answered(reading.request, _checked(reading.request))
        if isinstance(found, Response):  # a compute process answered the whole request
            return found
        full = {**json.loads(found), "understood": reading.request, "unparsed": reading.unparsed}
        return Response(current_app.json.dumps(full), mimetype="application/json")


def _unreadable(message: str, suggestions: list[str] | None = None) -> InvalidInput:
    """A 422 naming ``question`` (and close catalog names, where there are some)."""
    error = InvalidInput("question", message)
    if suggestions:
        error.extra["suggestions"] = suggestions
    return error


def _read(question: str) -> Reading:
    st = state()
    clouds = Clouds.of(st.layers.service().knowledge, candidate.DEPLOYMENTS)
    try:
        return read_question(question, st.catalog, clouds)
    except NoModelNamed as exc:
        raise _unreadable(exc.message, exc.suggestions) from None


def _checked(understood: dict[str, Any]) -> RecommendationRequest:
    """The request read, validated as ``POST /v1/recommendations`` validates it; what
    fails is the question's fault (a 422 naming it, and what was read)."""
    schema = schema_instance(RecommendationRequestSchema)
    try:
        typed: RecommendationRequest = schema.load(understood)
    except ValidationError as exc:
        said = "; ".join(
            f"{path} = {_at(understood, path)!r}: {message}"
            for path, message in _flat(exc.messages)
        )
        raise _unreadable(f"read as {said}") from None
    return typed


def _at(data: Any, path: str) -> Any:
    """The value at a dotted ``path`` of ``data`` (None where there is none)."""
    for key in path.split("."):
        data = data.get(key) if isinstance(data, dict) else None
    return data


def _flat(messages: Any, path: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(messages, dict):
        for key, value in messages.items():
            inner = path if key == "_schema" else f"{path}.{key}" if path else str(key)
            yield from _flat(value, inner)
    elif isinstance(messages, list):
        for message in messages:
            yield from _flat(message, path)
    else:
        yield path or "request", str(messages)


def _answered(understood: dict[str, Any], typed: RecommendationRequest) -> bytes | Response:
    """The recommendation; a workload the model cannot run as read is a 422 naming the
    question."""
    try:
        return answer(understood, typed)
    except (InvalidDescription, InvalidRequest) as exc:
        field = getattr(exc, "field", None) or "request"
        raise _unreadable(f"read as {field}: {exc.message}") from None

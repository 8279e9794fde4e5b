"""The options the product's commands share: the connection (``--url``, ``--api-key``,
``--json``), the workload's fields, the GPU, and reading a model or a request from a file."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from service.client import model_description

WORKLOAD = (
    (
        "--task",
        click.Choice(("training", "fine-tuning", "inference")),
        "training, fine-tuning or inference (default: fine-tuning with --method, else training)",
    ),
    ("--method", click.Choice(("full", "lora", "qlora")), "fine-tuning: full, lora or qlora"),
    ("--lora-rank", int, "LoRA / QLoRA adapter rank"),
    ("--batch-size", int, "samples per step per GPU (required)"),
    ("--seq-len", int, "tokens per sample (training and fine-tuning)"),
    ("--image-size", int, "input height and width, pixels (vision)"),
    ("--prompt-tokens", int, "inference: tokens in the prompt"),
    ("--output-tokens", int, "inference: tokens generated"),
    ("--precision", str, "fp32, tf32, bf16, fp16, fp8, int8, int4 (default bf16)"),
    ("--optimizer", str, "adamw, adam, sgd, sgd+momentum, adafactor, '8-bit adam'"),
    ("--activation-checkpointing", str, "none, selective or full"),
    ("--attention", str, "flash or materialized"),
    ("--dataset-samples", int, "samples in the dataset"),
    ("--dataset-tokens", int, "tokens in the dataset (instead of --dataset-samples)"),
    ("--epochs", float, "passes over the dataset"),
)


def connection(command: Callable[..., Any]) -> Callable[..., Any]:
    command = click.option(
        "--json", "as_json", is_flag=True, help="print the API's JSON answer as is"
    )(command)
    command = click.option(
        "--api-key",
        envvar="RIGHTSIZE_API_KEY",
        default=None,
        help="API key for --url (RIGHTSIZE_API_KEY)",
    )(command)
    return click.option(
        "--url",
        envvar="RIGHTSIZE_URL",
        default=None,
        help="a rightsize server (RIGHTSIZE_URL); default: answer in this process",
    )(command)


def workload_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for flag, kind, text in reversed(WORKLOAD):
        command = click.option(flag, type=kind, default=None, help=text)(command)
    return command


def workload(options: dict[str, Any]) -> dict[str, Any]:
    names = [flag[2:].replace("-", "_") for flag, _, _ in WORKLOAD]
    found = {k: options.pop(k) for k in names if options.get(k) is not None}
    for k in names:
        options.pop(k, None)
    found.setdefault("task", "fine-tuning" if "method" in found else "training")
    return found


def model(value: str) -> dict[str, Any]:
    try:
        return model_description(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="MODEL") from None


def gpu_options(command: Callable[..., Any]) -> Callable[..., Any]:
    command = click.option("--count", type=int, default=1, show_default=True, help="GPUs")(command)
    return click.option("--gpu", required=True, help="GPU id or name (rightsize gpus)")(command)


def json_file(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise click.BadParameter(f"{path}: {exc}") from None
    if not isinstance(data, dict):
        raise click.BadParameter(f"{path}: a request is a JSON object")
    return data


def stack_options(command: Callable[..., Any]) -> Callable[..., Any]:
    command = click.option(
        "--stack-option",
        "stack_option",
        multiple=True,
        metavar="NAME=VALUE",
        help="override a property of the stack, e.g. activation_offload=true (rightsize stacks)",
    )(command)
    return click.option(
        "--stack",
        default=None,
        help="the software stack (rightsize stacks), e.g. torchtune, vllm; default: the "
        "most common one for the work",
    )(command)


def stack_fields(options: dict[str, Any]) -> dict[str, Any]:
    """``--stack`` and ``--stack-option`` as the request's ``stack`` and ``stack_options``
    (values read as JSON where they parse: true, 8, "8bit"; else as text)."""
    out: dict[str, Any] = {}
    stack = options.pop("stack", None)
    if stack:
        out["stack"] = stack
    overrides: dict[str, Any] = {}
    for item in options.pop("stack_option", ()) or ():
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"{item!r}: give NAME=VALUE", param_hint="--stack-option")
        try:
            overrides[name.strip()] = json.loads(value)
        except json.JSONDecodeError:
            overrides[name.strip()] = value
    if overrides:
        out["stack_options"] = overrides
    return out

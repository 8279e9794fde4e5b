"""Rules as data: every "why" of a recommendation, loaded from ``knowledge/rules/*.yaml``.

A rule names a condition over typed symbols (:data:`SYMBOLS`), an effect and a message.
Conditions are written in the ``rule-engine`` expression language and compiled once, at
load, against the typed context: an unknown symbol, a type mismatch or a message field
that names no symbol stops the load with the file, the rule id and a suggestion.

Scopes say what a rule sees:

- ``gpu``: a GPU type alone, before any layout is planned on it (precision support);
  ``exclude`` or ``warn``.
- ``candidate``: one GPU at a count and layout, deployed on-premise or as a cloud offer;
  its effect is ``exclude``, ``penalise`` (the objective's score times ``factor``),
  ``warn`` or ``advise``.
- ``request``: the workload and the answer as a whole; its effect is ``advise`` or ``warn``
  (the software fixes worth doing before any purchase).
- ``trace``: a recorded sample run's measured breakdown; ``advise`` with the saving the
  engine predicts.
"""

from __future__ import annotations

import datetime as dt
import difflib
import hashlib
import math
import string
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import rule_engine
import yaml
from rule_engine import ast

DataType = rule_engine.DataType

RULES_DIR = Path(__file__).resolve().parents[2] / "knowledge" / "rules"
EFFECTS = ("exclude", "penalise", "warn", "advise")
SCOPES = {
    "gpu": frozenset({"exclude", "warn"}),
    "candidate": frozenset(EFFECTS),
    "request": frozenset({"warn", "advise"}),
    "trace": frozenset({"advise"}),
}
MYTHS = {
    1: "the newest GPU is always best",
    2: "more VRAM means faster",
    3: "owning (or renting) is always cheaper",
    4: "a GPU is plug-and-play",
    5: "hardware beats software tuning",
    6: "any GPU will do",
    0: "the buyer's own constraints",
}

_F, _S, _B = DataType.FLOAT, DataType.STRING, DataType.BOOLEAN
# symbol -> (type, scopes it is defined in, meaning); a value may be null where the
# meaning says "or null"
SYMBOLS: dict[str, tuple[Any, frozenset[str], str]] = {}


def _symbols(scopes: str, table: Mapping[str, tuple[Any, str]]) -> None:
    for name, (kind, meaning) in table.items():
        known = SYMBOLS[name][1] if name in SYMBOLS else frozenset()
        SYMBOLS[name] = (kind, known | frozenset(scopes.split()), meaning)


_symbols(
    "gpu candidate request",
    {
        "task": (_S, "train, finetune or inference"),
        "precision": (_S, "the workload's precision (fp32, tf32, fp16, bf16, fp8, int8)"),
        "objective": (_S, "fastest, cheapest or best_value"),
        "model_params_b": (_F, "the model's parameters, billions"),
        "traced": (_B, "the request is a recorded trace"),
        "input_idle_share": (_F, "share of the traced step spent waiting on input (0 if none)"),
        "pattern": (_S, "usage pattern: steady or bursty"),
        "interruptible": (_B, "the work can be checkpointed and restarted (spot)"),
        "gpu_hours_per_month": (_F, "GPU-hours a month the usage asks for, or null"),
        "horizon_months": (_F, "months the usage is costed over"),
        "budget_capital_usd": (_F, "the buyer's capital budget, or null"),
        "budget_monthly_usd": (_F, "the buyer's monthly budget, or null"),
        "deadline_hours": (_F, "the job's deadline in hours, or null"),
        "max_kg_co2e": (_F, "the most one job may emit, kg CO2e, or null"),
        "max_gpus": (_F, "the most GPUs the buyer allows, or null"),
        "max_server_power_kw": (_F, "the most power one server may draw, or null"),
        "deployment_allowed": (_S, "cloud, on-premise or any"),
    },
)
_symbols(
    "gpu candidate",
    {
        "gpu_id": (_S, "the candidate GPU's catalog id"),
        "gpu_name": (_S, "its name"),
        "gpu_architecture": (_S, "its architecture (volta, ampere, ada, hopper, blackwell...)"),
        "gpu_segment": (_S, "datacenter, workstation or consumer"),
        "gpu_cooling": (_S, "passive, blower, open-air or liquid"),
        "gpu_release_year": (_F, "year of release"),
        "gpu_memory_gib": (_F, "memory per GPU, GiB"),
        "gpu_ecc": (_B, "ECC memory"),
        "gpu_tdp_w": (_F, "board power, W"),
        "gpu_tensor_cores": (_B, "has tensor cores"),
        "gpu_has_bf16": (_B, "bf16 tensor-core support (Ampere and newer)"),
        "gpu_has_fp8": (_B, "FP8 tensor-core support (Ada, Hopper and newer)"),
        "gpu_pcie_generation": (_F, "PCIe generation"),
        "gpu_p2p": (_B, "peer-to-peer transfers between GPUs over PCIe or NVLink"),
        "gpu_nvlink_gb_per_s": (_F, "NVLink bandwidth per GPU (0: none)"),
        "gpu_datacenter_use_allowed": (_B, "the driver licence allows data-centre deployment"),
    },
)
_symbols(
    "candidate",
    {
        "count": (_F, "GPUs in the candidate"),
        "gpus_per_server": (_F, "GPUs in one server of the candidate"),
        "nodes": (_F, "instances or servers the candidate spans"),
        "interconnect": (_S, "the link between its GPUs inside an instance or server"),
        "memory_needed_gib": (_F, "memory its layout needs per GPU, GiB"),
        "memory_headroom_share": (_F, "share of the GPU's memory left unused"),
        "bound": (_S, "what bounds its step: compute, memory, communication, input, ..."),
        "tensor_parallel": (_F, "tensor-parallel degree of its layout"),
        "zero_stage": (_F, "ZeRO stage of its layout"),
        "deployment": (_S, "on-premise or cloud"),
        "pricing": (_S, "owned, on_demand, spot or reserved"),
        "provider": (_S, "the cloud provider, or on-premise"),
        "instances": (_F, "cloud instances (or servers) the count takes"),
        "gpus_per_instance": (_F, "GPUs in one instance of the offer, or one server"),
        "marketplace": (_B, "hosts rented on a marketplace: no shared fabric, may go away"),
        "cluster_network": (_B, "its instances can be placed on one cluster network"),
        "between_name": (_S, "the network between its instances or servers ('none')"),
        "between_gb_per_s": (_F, "that network's bandwidth per instance, GB/s, or null"),
        "between_rdma": (_B, "that network carries GPU memory without the host's TCP stack"),
        "job_hours": (_F, "wall-clock hours of one job (or of the usage's hours), or null"),
        "job_cost_usd": (_F, "what one job costs on this candidate"),
        "job_kwh": (_F, "energy one job draws, kWh (PUE included)"),
        "job_kg_co2e": (_F, "one job's emissions, kg CO2e"),
        "monthly_usd": (_F, "what the usage costs a month"),
        "capital_usd": (_F, "purchase cost (on-premise), 0 for cloud"),
        "server_power_kw": (_F, "power one server draws at full load, kW"),
        "utilisation": (_F, "share of owned GPU-hours the usage keeps busy"),
        "break_even_gpu_hours": (_F, "monthly GPU-hours above which owning wins, or null"),
        "speedup_over_cheapest": (_F, "how many times faster than the cheapest choice"),
        "cost_over_cheapest": (_F, "how many times the cheapest choice's cost"),
        "newest_gpu": (_S, "the fastest candidate of the newest generation"),
        "time_over_newest": (_F, "job time over the newest generation's, or null"),
        "cost_over_newest": (_F, "job cost over the newest generation's, or null"),
    },
)
_symbols(
    "request",
    {
        "smallest_count": (_F, "fewest GPUs of the best choice the workload fits, or null"),
        "fits_one_gpu_accumulating": (_B, "fits one GPU at micro-batch 1 with accumulation"),
        "largest_gpu": (_S, "where no candidate holds the workload, the GPU with the most memory"),
        "micro_batch": (_F, "the workload's micro-batch per model replica, or null (a trace)"),
        "mixed_precision_speedup": (_F, "predicted speed-up of bf16 over fp32, or null"),
        "checkpointing_memory_saving": (_F, "share of memory full checkpointing saves, or null"),
        "hybrid_cheaper": (_B, "owning the baseline and renting bursts is cheapest"),
        "stack": (_S, "the software stack the estimate assumed, or null (a trace)"),
        "faster_stack": (_S, "the stack estimated to run the top choice fastest, or null"),
        "faster_stack_speedup": (_F, "how many times faster it runs it, or null"),
        "faster_stack_fit": (_S, "where that stack's constants come from, or null"),
        "hybrid_owned": (_F, "GPUs the hybrid owns, or null"),
        "hybrid_saving_share": (_F, "what the hybrid saves over the next choice, or null"),
    },
)
_symbols(
    "trace",
    {
        "wall_ms": (_F, "the traced step, ms"),
        "fp32_gemm_saving_share": (_F, "share of the step mixed precision would save"),
        "input_idle_share": (_F, "share of the step the GPU waits on input"),
        "short_kernel_share": (_F, "share of kernels under 10 us"),
        "busy_share": (_F, "share of the step the GPU is busy"),
        "launch_saving_share": (_F, "share of launch and host idle CUDA graphs would save"),
        "h2d_share": (_F, "share of the step in host-to-device copies"),
        "communication_share": (_F, "share of the step in exposed communication"),
        "overlap_saving_share": (_F, "share of the step overlapping communication would save"),
        "faster_link": (_S, "the faster interconnect to name"),
    },
)


class RuleLoadError(Exception):
    """A rules file that cannot be used: names the file, the rule and what to fix."""

    def __init__(self, path: Path, rule_id: str | None, message: str) -> None:
        where = f"{path.name}" + (f", rule '{rule_id}'" if rule_id else "")
        super().__init__(f"{where}: {message}")
        self.path = path
        self.rule_id = rule_id


@dataclass(frozen=True, slots=True)
class Guard:
    """A symbol whose value alone can make a condition false: null always; false where the
    condition is the symbol itself (``x and ...``); another string where it must equal
    ``equals`` (``x == 'cloud' and ...``)."""

    name: str
    itself: bool = False
    equals: str | None = None

    def passes(self, value: Any) -> bool:
        if value is None or (self.itself and value is False):
            return False
        return self.equals is None or not isinstance(value, str) or value == self.equals


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    scope: str
    effect: str
    condition: str
    message: str
    source: str
    as_of: dt.date
    myth: int
    factor: float | None
    saving: str | None  # trace rules: the symbol holding the share of the step saved
    compiled: Any
    reads: tuple[str, ...] = ()  # the symbols ``condition`` names
    guards: tuple[Guard, ...] = ()  # where one fails, the condition is not evaluated

    def matches(self, context: Mapping[str, Any], memo: dict[Any, bool] | None = None) -> bool:
        """Whether the condition holds in ``context`` (a comparison with a null value does
        not hold). ``memo``: results by the values of the symbols read, shared by the many
        contexts that differ elsewhere (:meth:`RuleBook.results`)."""
        for guard in self.guards:
            if not guard.passes(context.get(guard.name)):
                return False
        key = None
        if memo is not None:
            key = (self.id, *map(context.get, self.reads))
            found = memo.get(key)
            if found is not None:
                return found
        try:
            matched = bool(self.compiled.matches(context))
        except rule_engine.EvaluationError:
            matched = False
        if memo is not None:
            memo[key] = matched
        return matched

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "title": self.title,
            "scope": self.scope,
            "effect": self.effect,
            "when": self.condition,
            "message": self.message,
            "myth": MYTHS[self.myth],
            "source": self.source,
            "as_of": self.as_of.isoformat(),
        }
        if self.factor is not None:
            out["factor"] = self.factor
        return out


@dataclass(frozen=True)
class Fired:
    """A rule that matched one context, its message filled in."""

    rule: Rule
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule.id,
            "effect": self.rule.effect,
            "message": self.message,
            "source": self.rule.source,
            "as_of": self.rule.as_of.isoformat(),
        }


def _context(scope: str, read: list[str]) -> rule_engine.Context:
    """A typed context for ``scope`` that notes in ``read`` each symbol a rule names."""
    types = {name: kind for name, (kind, scopes, _) in SYMBOLS.items() if scope in scopes}
    resolve = rule_engine.type_resolver_from_dict(types)

    def noted(name: str) -> Any:
        found = resolve(name)
        if name not in read:
            read.append(name)
        return found

    return rule_engine.Context(type_resolver=noted, default_value=None)


def _guards(expression: Any) -> tuple[Guard, ...]:
    """What the top-level conjuncts of a parsed condition need of single symbols: a value
    where a conjunct tests it against null (``x != null``) or compares it in order (``x >
    1``: an evaluation error with a null, which does not hold); true where it is the
    symbol (``x``); a string where it compares the symbol with one (``x == 'cloud'``)."""
    if isinstance(expression, ast.LogicExpression) and expression.type == "and":
        return (*_guards(expression.left), *_guards(expression.right))
    if isinstance(expression, ast.SymbolExpression):
        return (Guard(expression.name, itself=True),)
    sides = (getattr(expression, "left", None), getattr(expression, "right", None))
    names = [x.name for x in sides if isinstance(x, ast.SymbolExpression)]
    if isinstance(expression, ast.ArithmeticComparisonExpression):
        return tuple(Guard(name) for name in names)
    found: tuple[Guard, ...] = ()
    if isinstance(expression, ast.ComparisonExpression) and len(names) == 1:
        literal = next((x.value for x in sides if isinstance(x, ast.StringExpression)), None)
        if expression.type == "ne" and any(isinstance(x, ast.NullExpression) for x in sides):
            found = (Guard(names[0]),)
        elif expression.type == "eq" and literal is not None:
            found = (Guard(names[0], equals=literal),)
    return found


def _suggest(name: str, scope: str) -> str:
    known = [n for n, (_, scopes, _) in SYMBOLS.items() if scope in scopes]
    close = difflib.get_close_matches(name, known, n=3)
    return f"did you mean {', '.join(close)}?" if close else f"known symbols: {', '.join(known)}"


_FIELDS = ("id", "title", "scope", "when", "effect", "message", "source", "as_of", "myth")


def _compile(path: Path, raw: Mapping[str, Any]) -> Rule:
    rid = raw.get("id") if isinstance(raw, Mapping) else None
    if not isinstance(raw, Mapping) or not isinstance(rid, str):
        raise RuleLoadError(path, None, "each rule is a mapping with a string id")
    missing = [k for k in _FIELDS if k not in raw]
    unknown = sorted(set(raw) - {*_FIELDS, "factor", "saving"})
    if missing or unknown:
        raise RuleLoadError(path, rid, f"missing {missing}, unknown {unknown}")
    scope, effect = raw["scope"], raw["effect"]
    if scope not in SCOPES or effect not in SCOPES[scope]:
        allowed = ", ".join(SCOPES.get(scope, ()))
        raise RuleLoadError(path, rid, f"scope {scope!r} with effect {effect!r} (scopes: "
                            f"{', '.join(SCOPES)}; effects here: {allowed})")  # fmt: skip
    if raw["myth"] not in MYTHS:
        raise RuleLoadError(path, rid, f"myth is one of {sorted(MYTHS)}")
    factor = raw.get("factor")
    if (effect == "penalise") != (factor is not None) or (factor is not None and factor <= 0):
        raise RuleLoadError(path, rid, "factor (a positive number) goes with penalise only")
    read: list[str] = []
    try:
        compiled = rule_engine.Rule(raw["when"], context=_context(scope, read))
    except rule_engine.SymbolResolutionError as exc:
        name = exc.symbol_name
        why = f"unknown symbol '{name}' in when for scope {scope}: {_suggest(name, scope)}"
        raise RuleLoadError(path, rid, why) from exc
    except rule_engine.EngineError as exc:
        raise RuleLoadError(path, rid, f"when: {exc.message}: {raw['when']}") from exc
    for _, name, _spec, _ in string.Formatter().parse(raw["message"]):
        if name is not None and (name not in SYMBOLS or scope not in SYMBOLS[name][1]):
            raise RuleLoadError(path, rid, f"message field '{name}': {_suggest(name, scope)}")
    saving = raw.get("saving")
    if saving is not None and (scope != "trace" or saving not in SYMBOLS):
        raise RuleLoadError(path, rid, "saving names a trace symbol")
    as_of = raw["as_of"]
    if not isinstance(as_of, dt.date):
        raise RuleLoadError(path, rid, "as_of is a date (YYYY-MM-DD)")
    guards = tuple(dict.fromkeys(_guards(compiled.statement.expression)))
    return Rule(rid, str(raw["title"]), scope, effect, raw["when"], str(raw["message"]),
                str(raw["source"]), as_of, int(raw["myth"]), factor, saving, compiled,
                tuple(read), guards)  # fmt: skip


RESULTS_KEPT = 200_000  # rule results a book keeps by the values they read (then starts over)


@dataclass(frozen=True)
class RuleBook:
    """Every rule, compiled, in file order."""

    rules: tuple[Rule, ...]
    digest: str  # of the files' contents: answers cached under it change with the rules
    _results: dict[Any, bool] = field(default_factory=dict, compare=False, repr=False)

    def results(self) -> dict[Any, bool]:
        """The book's rule results by rule and the values of the symbols it reads, shared by
        every request the process answers (a rule's result is a function of those values
        alone): two requests that differ in a budget evaluate again only the rules that read
        it. Emptied once it holds :data:`RESULTS_KEPT`."""
        if len(self._results) >= RESULTS_KEPT:
            self._results.clear()
        return self._results

    @classmethod
    def load(cls, directory: Path = RULES_DIR) -> RuleBook:
        found: list[Rule] = []
        seen: dict[str, Path] = {}
        digest = hashlib.sha256()
        for path in sorted(directory.glob("*.yaml")):
            text = path.read_text(encoding="utf-8")
            digest.update(f"{path.name}\n{text}".encode())
            try:
                raw = yaml.load(text, Loader=yaml.CSafeLoader) or []  # libyaml: per app
            except yaml.YAMLError as exc:
                raise RuleLoadError(path, None, f"not YAML: {exc}") from exc
            if not isinstance(raw, list):
                raise RuleLoadError(path, None, "a rules file is a list of rules")
            for item in raw:
                rule = _compile(path, item)
                if rule.id in seen:
                    raise RuleLoadError(path, rule.id, f"id also in {seen[rule.id].name}")
                seen[rule.id] = path
                found.append(rule)
        if not found:
            raise RuleLoadError(directory, None, "no rules found")
        return cls(tuple(found), digest.hexdigest()[:16])

    def scoped(self, scope: str) -> tuple[Rule, ...]:
        return self._by_scope.get(scope, ())

    @cached_property
    def _by_scope(self) -> dict[str, tuple[Rule, ...]]:
        return {scope: tuple(r for r in self.rules if r.scope == scope) for scope in SCOPES}

    def fire(
        self,
        scope: str,
        context: Mapping[str, Any],
        effects: Collection[str] = EFFECTS,
        memo: dict[Any, bool] | None = None,
    ) -> list[Fired]:
        """The rules of ``scope`` (with one of ``effects``) that match ``context`` (a value
        per symbol of the scope; a missing one is null), their messages filled in;
        ``memo``: see :meth:`Rule.matches`."""
        return [
            Fired(rule, _fill(rule.message, context))
            for rule in self.scoped(scope)
            if rule.effect in effects and rule.matches(context, memo)
        ]


def _fill(template: str, context: Mapping[str, Any]) -> str:
    """``template`` with each field formatted from ``context``; a null (or non-finite)
    value shows as n/a whatever its format."""
    out = []
    for literal, name, spec, _ in string.Formatter().parse(template):
        out.append(literal)
        if name is None:
            continue
        value = context.get(name)
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            out.append("n/a")
        else:
            out.append(format(value, spec or ""))
    return "".join(out)

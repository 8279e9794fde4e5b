"""The phrase rules that read a question's words into request facts, deterministically.

:data:`RULES` is a table of regular expressions, each with a reader that turns its match
into facts (``budget_usd``, ``deadline_hours``, ``dataset_tokens``, ``task``, ...): the
numbers, money, time, sizes and choices a question states. :func:`place_rules` adds rules
for the cloud providers and regions a knowledge base knows. :func:`scan` applies rules in
order, each blanking the words it matched so a later rule never sees them; the first value
said of a fact counts (every provider and region is kept). Numbers are read, never
range-checked: one too big to hold is :data:`BIG`, out of every range.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

BIG = 1e30  # numbers beyond (or infinite) are read as this: out of every range, so a 422
_LISTED = frozenset({"providers", "regions"})  # every one named is kept, not the first

# ---- numbers, money and time, as the rules read them

_WORD_NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                 "eight": 8, "nine": 9, "ten": 10, "twelve": 12}  # fmt: skip
_SCALES = {"thousand": 1e3, "k": 1e3, "million": 1e6, "mn": 1e6, "m": 1e6, "billion": 1e9,
           "bn": 1e9, "b": 1e9, "trillion": 1e12, "tn": 1e12, "t": 1e12}  # fmt: skip
_HOURS = {"m": 1 / 60, "h": 1.0, "d": 24.0, "w": 168.0}  # by the unit's first letter
_PER_MONTH = {"month": 1.0, "week": 52 / 12, "day": 365 / 12}


def _num(tag: str = "n") -> str:
    """A number (``1,281,167``, ``1.5``, ``1e9``, ``-3``, ``two``) and its scale (``k``,
    ``million``, ``B``), as groups ``tag`` and ``tag``x."""
    words = "|".join(_WORD_NUMBERS)
    return (rf"(?<![\w.])(?P<{tag}>-?(?:\d{{1,3}}(?:,\d{{3}})+|\d+)(?:\.\d+)?(?:e[+-]?\d+)?"
            rf"|-?\.\d+|(?:{words})\b)(?:\s*(?P<{tag}x>{'|'.join(_SCALES)})\b)?")  # fmt: skip


def _value(m: re.Match[str]) -> float:
    """The number a match read, from group n or else b (``1e400`` is :data:`BIG`:
    Python's int() would refuse it)."""
    groups = m.groupdict()
    tag = "n" if groups.get("n") is not None else "b"
    text, scale = groups[tag], groups.get(tag + "x")
    number = float(_WORD_NUMBERS[text] if text in _WORD_NUMBERS else text.replace(",", ""))
    number *= _SCALES[scale] if scale else 1.0
    return max(-BIG, min(BIG, number))


def _whole(number: float) -> int:
    return round(number) if abs(number) < BIG else round(number / BIG) * 10**30


N, N2 = _num(), _num("b")  # a pattern's second number: group names cannot repeat
LIMIT = (r"(?:(?:under|below|at\s+most|up\s+to|max(?:imum)?|less\s+than|no\s+more\s+than|"
         r"within|about|around|of|for|<=?|~)\s*){0,2}")  # "for under $50"  # fmt: skip
MONEY = rf"(?:(?:\$|usd\s*|us\$)\s*{N}|{N2}\s*(?:\$|usd\b|dollars?\b|bucks\b))"
SET = r"\s*(?:of\s+|=\s*|:\s*|is\s+)?"  # "batch 32", "batch of 32", "batch=32", "batch: 32"
TIME = r"[\s-]*(?P<u>h|hrs?|hours?|d|days?|w|wks?|weeks?|mins?|minutes?)\b"

Facts = dict[str, Any]
Reader = Callable[[re.Match[str]], Facts]


def _number(key: str, kind: Callable[[float], Any] = float) -> Reader:
    return lambda m: {key: kind(_value(m))}


def _fixed(**facts: Any) -> Reader:
    return lambda _: dict(facts)


def _named(key: str, **values: Any) -> Reader:
    """The value of the named group that matched (``m.lastgroup``)."""
    return lambda m: {key: values[str(m.lastgroup)]}


def _deadline(m: re.Match[str]) -> Facts:
    return {"deadline_hours": _value(m) * _HOURS[m.group("u")[0]]}


def _runs(m: re.Match[str]) -> Facts:
    return {"runs_per_month": _value(m) * _PER_MONTH[m.group("per")]}


def _often(m: re.Match[str]) -> Facts:
    per = m.group("per") or {"daily": "day", "nightly": "day", "weekly": "week"}.get(
        m.group("adverb"), "month"
    )
    return {"runs_per_month": (2.0 if m.group("twice") else 1.0) * _PER_MONTH[per]}


def _horizon(m: re.Match[str]) -> Facts:
    return {"horizon_months": _whole(_value(m) * (12 if m.group("u")[0] == "y" else 1))}


def _context(m: re.Match[str]) -> Facts:
    """Context lengths in k are binary where they are powers of two: 4k is 4,096."""
    value = _value(m)
    thousands = value / 1000
    binary = "k" in (m.groupdict().get("nx"), m.groupdict().get("bx"))
    binary = binary and thousands.is_integer() and thousands >= 1
    if binary and int(thousands) & (int(thousands) - 1) == 0:
        value = thousands * 1024
    return {"seq_len": _whole(value)}


def _rank(m: re.Match[str]) -> Facts:
    rank = {"lora_rank": _whole(_value(m))}
    return {**rank, "method": "lora"} if m.group("lora") else rank


def _capital(m: re.Match[str]) -> Facts:
    out = _number("budget_capital_usd")(m)
    return {**out, "deployment": "on-premise"} if m.groupdict().get("verb") else out


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str]
    read: Reader


def _rule(pattern: str, read: Reader) -> Rule:
    return Rule(re.compile(pattern), read)


RULES: tuple[Rule, ...] = (
    # money: what it buys, a month, then a budget with no period (a job's)
    _rule(rf"\b(?:capital|capex|up-?front|hardware)(?:\s+(?:budget|spend|cost))?{SET}{LIMIT}"
          rf"{MONEY}", _capital),
    _rule(rf"\b(?P<verb>buy(?:ing)?|purchas(?:e|ing))(?:\s+(?:it|them|gpus?|servers?))?\s+"
          rf"{LIMIT}{MONEY}", _capital),
    _rule(rf"\b(?:monthly\s+(?:budget|spend|cost)|budget\s+(?:per|a)\s+month){SET}{LIMIT}"
          rf"{MONEY}", _number("budget_monthly_usd")),
    _rule(rf"(?:\b(?:budget|spend|cost|pay){SET})?{LIMIT}{MONEY}\s*(?:(?:a|per|/|each|every)"
          r"\s*(?:month|mo)\b|monthly\b)", _number("budget_monthly_usd")),
    # usage
    _rule(rf"{N}\s*gpu[- ]?(?:hours?|hrs?|h)\b(?:\s*(?:(?:a|per|/|each|every)\s*month|"
          r"monthly)\b)?", _number("gpu_hours_per_month")),
    _rule(rf"{N}\s*(?:training\s+)?(?:runs?|jobs?|times|trainings?)\s*(?:a|per|/|each|every)\s*"
          r"(?P<per>month|week|day)\b", _runs),
    _rule(r"\b(?:(?:once|(?P<twice>twice))\s+(?:a|per|every)\s+(?P<per>month|week|day)|"
          r"(?P<adverb>daily|nightly|weekly|monthly))\b", _often),
    _rule(rf"\b(?:for|over|horizon(?:\s+of)?|amorti[sz]ed\s+over)\s+(?:the\s+next\s+)?{N}\s*"
          r"(?P<u>years?|yrs?|months?)\b", _horizon),
    _rule(r"\b(?:spot|interruptible|pre-?emptible)(?:\s+(?:instances?|vms?|capacity))?\b",
          _fixed(interruptible=True)),
    _rule(r"\b(?:bursty|spiky)\b", _fixed(pattern="bursty")),
    _rule(rf"(?:\b(?:budget|spend|cost|pay(?:ing)?){SET})?{LIMIT}{MONEY}(?:\s*(?:per|a|each)\s*"
          r"(?:job|run)\b)?", _number("budget_usd")),
    # time
    _rule(rf"\b(?:deadline|by|before|within|in|under|less\s+than|at\s+most|done\s+in|"
          rf"ready\s+in){SET}{N}{TIME}", _deadline),
    _rule(rf"{N}{TIME}\s+deadline\b", _deadline),
    _rule(r"\b(?:by|before|until)\s+tomorrow\b|\b(?:within|in|under)\s+(?:a|one)\s+day\b",
          _fixed(deadline_hours=24.0)),
    _rule(r"\bovernight\b|\bby\s+(?:tonight|(?:the\s+)?morning)\b", _fixed(deadline_hours=12.0)),
    _rule(r"\b(?:within|in|under)\s+(?:an|one)\s+hour\b", _fixed(deadline_hours=1.0)),
    _rule(r"\b(?:(?:within|in|under)\s+(?:a|one)\s+week|by\s+next\s+week)\b",
          _fixed(deadline_hours=168.0)),
    # how many GPUs
    _rule(rf"\bmax[_ ]?gpus?{SET}{N}", _number("max_gpus", _whole)),
    _rule(rf"(?:\b(?:at\s+most|max(?:imum)?(?:\s+of)?|up\s+to|no\s+more\s+than|limit(?:ed)?\s+to)"
          rf"\s+)?{N}\s*(?:x\s*)?gpus?\b(?:\s+(?:max(?:imum)?|at\s+most|or\s+(?:fewer|less)))?",
          _number("max_gpus", _whole)),
    _rule(r"\b(?:a\s+)?single[- ]gpu\b", _fixed(max_gpus=1)),
    # the workload: sequence, serving, batch, image
    _rule(rf"{N}\s*(?:output|generated|new|completion|response)\s+tokens?\b|\b(?:output|"
          rf"generat(?:e|ing)|max[_ ]new[_ ]tokens|completions?|responses?|answers?){SET}"
          rf"(?:up\s+to\s+)?{N2}\s*(?:output\s+)?(?:tokens?)?", _number("output_tokens", _whole)),
    _rule(rf"{N}[\s-]*(?:(?:prompt|input)\s+tokens?|tokens?\s+(?:of\s+)?(?:prompts?|inputs?))"
          rf"\b|\b(?:prompts?|inputs?)(?:\s+length)?{SET}(?:up\s+to\s+)?{N2}\s*(?:tokens?)?",
          _number("prompt_tokens", _whole)),
    _rule(rf"{N}[\s-]*(?:tokens?\s+)?(?:context(?:\s+(?:length|window))?|ctx|sequence\s+"
          rf"length|seq(?:uence)?s?(?:\s+len(?:gth)?)?)\b|\b(?:seq(?:uence)?(?:[ _-]?len(?:gth)?)?"
          rf"|context(?:\s+(?:length|window))?|ctx|max[_ ]len(?:gth)?){SET}{N2}\s*(?:tokens?)?",
          _context),
    _rule(rf"{N}\s*tokens?\s*(?:per|each|/|a)\s*(?:sample|sequence|example|row|document|doc|"
          r"input)\b", _context),
    _rule(rf"\b(?:concurrency|concurrent\s+(?:users|requests)){SET}{N}|{N2}\s*(?:concurrent|"
          r"simultaneous|parallel)(?:\s+(?:users?|requests?|sessions?|streams?|sequences?|"
          r"chats?|conversations?))?", _number("concurrency", _whole)),
    _rule(rf"\bglobal[ _-]?batch(?:[ _-]?size)?{SET}{N}", _number("global_batch_size", _whole)),
    _rule(rf"\b(?:micro[ _-]?)?(?:batch(?:es|[ _-]?size)?|bs){SET}{N}|{N2}\s*(?:samples?\s+|"
          r"images?\s+)?per\s+(?:batch|step|gpu)\b", _number("batch_size", _whole)),
    _rule(rf"\b(?:image[ _-]?size|resolution|img[ _-]?size){SET}{N}|{N2}\s*(?:x\s*\d+\s*)?"
          r"(?:px|pixels?)\b", _number("image_size", _whole)),
    # the dataset: named, in tokens, in samples; epochs
    _rule(r"\bimagenet(?:[- ]?1k)?\b(?![- ]?2[12]k)|\bilsvrc(?:[- ]?2012)?\b",
          _fixed(dataset_samples=1_281_167)),  # ILSVRC-2012 train (Russakovsky et al. 2015)
    _rule(r"\b(?:ms[- ]?)?coco\b", _fixed(dataset_samples=118_287)),  # COCO train2017
    _rule(r"\bcifar[- ]?(?:10|100)\b", _fixed(dataset_samples=50_000)),  # the training split
    _rule(rf"{N}\s*(?:training\s+|text\s+)?tokens?\b", _number("dataset_tokens", _whole)),
    _rule(rf"{N}\s*(?:training\s+|labell?ed\s+)?(?:samples?|examples?|images?|photos?|rows?|"
          r"sequences?|documents?|docs|records?|pairs?|conversations?|dialogues?|utterances?|"
          r"clips?|sentences?|instructions?)\b", _number("dataset_samples", _whole)),
    _rule(rf"{N}\s*epochs?\b", _number("epochs")),
    _rule(r"\b(?:an?|one|single)\s+(?:single\s+)?epoch\b", _fixed(epochs=1.0)),
    # precision, optimizer, memory savings
    _rule(r"\b(?:(?P<eight>8[- ]?bit\s+adamw?)|(?P<adamw>adamw)|(?P<adam>adam)|(?P<sgdm>sgd\s+"
          r"(?:with\s+)?momentum)|(?P<sgd>sgd)|(?P<adafactor>adafactor))\b",
          _named("optimizer", eight="8-bit adam", adamw="adamw", adam="adam",
                 sgdm="sgd+momentum", sgd="sgd", adafactor="adafactor")),
    _rule(r"\b(?:(?P<bf16>bf16|bfloat-?16)|(?P<fp16>fp16|float16|half[- ]precision)|(?P<fp8>"
          r"fp8|float8)|(?P<fp32>fp32|float32|full[- ]precision|single[- ]precision)|(?P<tf32>"
          r"tf32)|(?P<int8>int8|8[- ]?bit)|(?P<int4>int4|4[- ]?bit))\b",
          _named("precision", bf16="bf16", fp16="fp16", fp8="fp8", fp32="fp32", tf32="tf32",
                 int8="int8", int4="int4")),
    _rule(r"\bselective\s+(?:activation\s+)?(?:checkpointing|recomputation)\b",
          _fixed(checkpointing="selective")),
    _rule(r"\b(?:activation|gradient)\s+checkpointing\b", _fixed(checkpointing="full")),
    # where, and what matters most
    _rule(r"\b(?:(?P<onprem>on[- ]?prem(?:ise|ises)?|on\s+premises?|in[- ]house|self[- ]hosted|"
          r"locally|(?:our|my)\s+own\s+(?:hardware|servers?|gpus?|machines?|data\s*cent(?:er|re))|"
          r"own(?:ed|ing)?\s+(?:the\s+)?(?:hardware|servers?|gpus?|machines?)|buy(?:ing)?|"
          r"purchas(?:e|ing))|(?P<cloud>(?:in\s+the\s+)?cloud(?:[- ]only)?|rent(?:ed|ing|al)?|"
          r"on[- ]demand))\b", _named("deployment", onprem="on-premise", cloud="cloud")),
    _rule(r"\b(?:(?P<fastest>fastest|quickest|as\s+(?:fast|quickly)\s+as\s+possible|asap|"
          r"minimi[sz]e\s+(?:the\s+)?(?:time|latency)|lowest\s+latency|shortest\s+time)|"
          r"(?P<cheapest>cheapest|lowest[- ]cost|least\s+expensive|as\s+cheap(?:ly)?\s+as\s+"
          r"possible|minimi[sz]e\s+(?:the\s+)?cost|lowest\s+price|cheap(?:ly)?)|(?P<value>best\s+"
          r"value|cost[- ]effective(?:ly)?|value\s+for\s+money|bang\s+for\s+(?:the|my|our)\s+"
          r"buck|price[- ]performance))\b",
          _named("objective", fastest="fastest", cheapest="cheapest", value="best_value")),
    # what is done
    _rule(rf"\b(?:(?P<lora>lora)\s+)?rank{SET}{N}", _rank),
    _rule(r"\b(?:(?P<qlora>q-?lora)|(?P<lora>lora|peft|low[- ]rank\s+adapt\w*)|(?P<full>full"
          r"(?:[- ]param(?:eter)?s?)?(?=[\s-]+fine)))\b",
          _named("method", qlora="qlora", lora="lora", full="full")),
    _rule(r"\b(?:(?P<fine>fine[- ]?tun(?:e|es|ed|ing)|sft|instruction[- ]tun(?:e|ed|ing)|"
          r"post[- ]train(?:ing)?)|(?P<train>(?:pre-?|re-?)train(?:ing|ed)?|train(?:ing)?\s+from\s+"
          r"scratch|from\s+scratch|train(?:ing|ed|s)?)|(?P<serve>serv(?:e|es|ed|ing)|inference|"
          r"infer|deploy(?:ing|ed|s)?|host(?:ing|ed|s)?|chat\s*bots?|predict(?:ions?|ing)?|"
          r"generat(?:e|ing|ion)|endpoint|api))\b",
          _named("task", fine="fine-tuning", train="training", serve="inference")),
)  # fmt: skip


@dataclass(frozen=True)
class Scan:
    """What the rules read: ``facts`` (the first of each, every provider and region) and
    the character spans each fact's words took."""

    facts: Facts
    spans: dict[str, list[tuple[int, int]]]


def scan(text: str, rules: Iterable[Rule] = RULES) -> Scan:
    """``text`` (lower case) read by ``rules`` in order, each blanking what it matched."""
    facts: Facts = {}
    spans: dict[str, list[tuple[int, int]]] = {}
    for rule in rules:
        hits = [m for m in rule.pattern.finditer(text) if m.group().strip()]
        for m in hits:
            for key, value in rule.read(m).items():
                if key in _LISTED:
                    listed = facts.setdefault(key, [])
                    listed.extend([value] if value not in listed else [])
                elif key not in facts:
                    facts[key] = value
                elif facts[key] != value:
                    continue  # the first said counts; a contrary one stays unparsed
                spans.setdefault(key, []).append(m.span())
        for m in hits:
            text = text[: m.start()] + " " * (m.end() - m.start()) + text[m.end() :]
    return Scan(facts, spans)


def place_rules(providers: Mapping[str, str], regions: Iterable[str]) -> list[Rule]:
    """Rules for the providers (by id, name, or the name's first word where no other
    provider's begins so: ``aws``, ``amazon``, ``google cloud``, ``vast.ai``) and
    the regions (by id) a knowledge base knows."""
    terms: dict[str, str] = {}
    firsts: dict[str, list[str]] = {}
    for ident, name in providers.items():
        lowered = " ".join(name.lower().split())
        for term in (ident.lower(), lowered, lowered.removesuffix(".ai")):
            terms.setdefault(term, ident)
        first = lowered.split(" ", 1)[0].removesuffix(".ai")
        firsts.setdefault(first, []).append(ident)
    terms.pop("", None)
    for word, owners in firsts.items():
        if len(owners) == 1 and len(word) >= 4:
            terms.setdefault(word, owners[0])
    out = []
    if terms:
        out.append(_rule(_alternatives(terms), lambda m: {"providers": terms[_spaced(m)]}))
    known = {r.lower() for r in regions}
    if known:
        out.append(_rule(_alternatives(known), lambda m: {"regions": _spaced(m)}))
    return out


def stack_rules(names: Mapping[str, str]) -> list[Rule]:
    """A rule for the software stacks (by id or alias: ``torchtune``, ``vllm``, ``nemo``)."""
    if not names:
        return []
    return [_rule(_alternatives(names), lambda m: {"stack": names[_spaced(m)]})]


def _alternatives(terms: Iterable[str]) -> str:
    longest_first = sorted(terms, key=lambda t: (-len(t), t))
    escaped = (r"\s+".join(re.escape(w) for w in t.split()) for t in longest_first)
    return rf"(?<![\w.-])(?:{'|'.join(escaped)})(?![\w-])"


def _spaced(m: re.Match[str]) -> str:
    return " ".join(m.group().split())

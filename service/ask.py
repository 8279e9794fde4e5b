"""A one-line question read into a ``POST /v1/recommendations`` body, deterministically.

:func:`read_question` finds the catalog model the question names (the longest name or
alias, matched from the catalog as it is, case, spaces, hyphens and dots ignored), then
reads the rest with the phrase rules of :mod:`service.ask_phrases`: regular expressions
and word lists, each consuming the words it used (a later rule never sees them), and
assembles the request, with defaults for what was not said. What no rule used, less stop
words, is ``unparsed``; a question naming no catalog model is :class:`NoModelNamed`.
Numbers are not range-checked here: the API validates what was read, so an absurd number
is a 422 naming the question, never a guess. No network, no learning: the same question
and catalog always read the same.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from profiles.model_catalog import Catalog, CatalogEntry, fold
from service.ask_phrases import RULES, Scan, place_rules, scan, stack_rules
from service.engine.errors import InvalidRequest

if TYPE_CHECKING:
    from knowledge import Knowledge

WORD = re.compile(r"[^\W_]+(?:\.[^\W_]+)*")
ORG = re.compile(r"(?<![\w./-])[\w.-]+/\s*$")
REGION_ID = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*\d?")
LONGEST_NAME_WORDS = 8  # "deepseek r1 distill qwen 1.5b" is 5
PRETRAINING_TOKENS = 1_000_000_000  # at or beyond, a transformer is trained, not fine-tuned
TOKENS_PER_STEP = 8192  # a transformer's default batch: about this many tokens per GPU
SEQ_LEN = {"decoder": 2048, "encoder": 512, "encoder-decoder": 512}
PROMPT_TOKENS, OUTPUT_TOKENS = 512, 256
BATCH = 32  # per GPU: vision and other models, training and batched serving
SHOWN = 8  # suggestions when no model is named
STOP_WORDS = frozenset({
    "a", "about", "am", "an", "and", "any", "approx", "are", "around", "as", "at", "be", "best",
    "but", "by", "can", "card", "cards", "could", "do", "does", "doing", "for", "from", "get",
    "go", "good", "gpu", "gpus", "hardware", "have", "help", "how", "i", "in", "into", "is", "it",
    "its", "job", "jobs", "just", "let", "like", "me", "model",
    "models", "my", "need", "needed", "needs", "of", "on", "or", "our", "please", "recommend",
    "recommendation", "right", "run", "running", "setup", "should", "so", "some", "that", "the",
    "them", "then", "there", "this", "to", "us", "use", "using", "want", "wants", "we", "what",
    "when", "where", "which", "will", "with", "work", "workload", "would", "you", "your",
    "m", "s", "t", "d", "ll", "ve", "re",  # the tails of i'm, it's, don't, i'd, we'll, ...
})  # fmt: skip
_IMAGE_FAMILIES = frozenset({"resnet", "efficientnet", "unet", "cnn"})
_TRAINING_FACTS = ("dataset_tokens", "dataset_samples", "epochs", "optimizer", "checkpointing")
_SERVING_FACTS = ("prompt_tokens", "output_tokens", "concurrency")

# ---- the question read


class NoModelNamed(InvalidRequest):
    """The question names no catalog model; keeps the question and close catalog names."""

    def __init__(self, question: str, suggestions: Sequence[str], example: str) -> None:
        hint = f"; close catalog names: {', '.join(suggestions)}" if suggestions else ""
        super().__init__(
            "question",
            f"no model named: say one from /v1/models, e.g. '{example}'{hint}",
            question,
        )
        self.suggestions = list(suggestions)


@dataclass(frozen=True)
class Reading:
    """``request``: a body for ``RecommendationRequestSchema``; ``unparsed``: the words no
    rule used, in the order they came, each once."""

    request: dict[str, Any]
    unparsed: list[str]


@dataclass(frozen=True)
class Clouds:
    """The cloud providers (id: name), regions and software stacks (name: id) a question
    may name."""

    providers: Mapping[str, str] = field(default_factory=dict)
    regions: tuple[str, ...] = ()
    stacks: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, knowledge: Knowledge, not_providers: Iterable[str] = ("on-premise",)) -> Clouds:
        skip = set(not_providers)
        names = {p.id: p.name for p in knowledge.providers.values() if p.id not in skip}
        found = {price.region for offer in knowledge.offers for price in offer.prices}
        regions = tuple(sorted(r for r in found if REGION_ID.fullmatch(r)))
        return cls(names, regions, stack_names(knowledge))


# the names of a stack a question is read for: its id, and those of its aliases that are no
# everyday word (a question says "zero", "tune" or "optimized" for other things)
EVERYDAY = frozenset(
    {"zero", "tune", "optimized", "eager", "hf", "te", "generate", "sgl", "titan", "mosaic",
     "v-llm", "stock-pytorch", "transformer-engine"}
)  # fmt: skip


def stack_names(knowledge: Knowledge) -> dict[str, str]:
    """Name -> stack id for every stack a question may name (see :data:`EVERYDAY`)."""
    out: dict[str, str] = {}
    for stack in knowledge.stacks.values():
        for name in (stack.id, *stack.aliases):
            if name not in EVERYDAY:
                out.setdefault(name.lower(), stack.id)
    return out


def read_question(text: str, catalog: Catalog, clouds: Clouds | None = None) -> Reading:
    """``text`` read into a recommendation request for ``catalog``'s models (and the
    ``clouds`` it may name), or :class:`NoModelNamed`."""
    clouds = clouds or Clouds()
    question = unicodedata.normalize("NFKC", text).lower()
    words = list(WORD.finditer(question))
    direct, partial = _names(catalog)
    found = _longest(words, direct)
    used = [False] * len(question)
    if found is not None:
        start, end, _ = found
        org = ORG.search(question, max(0, start - 100), start)  # meta-llama/Llama-3-8B
        start = org.start() if org is not None else start
        used[start:end] = [True] * (end - start)
        question = question[:start] + " " * (end - start) + question[end:]
    rules = [*place_rules(clouds.providers, clouds.regions), *stack_rules(clouds.stacks)]
    read = scan(question, [*rules, *RULES])
    if found is None:
        suggestions = _suggestions(words, partial, catalog, read, used)
        example = "llama-3-8b" if "llama-3-8b" in catalog.entries else min(catalog.entries)
        raise NoModelNamed(text, suggestions, example)
    draft = _Draft(read)
    request = draft.request(catalog.entries[found[2]])
    for key in draft.used:
        for start, end in read.spans.get(key, ()):
            used[start:end] = [True] * (end - start)
    return Reading(request, _unparsed(words, used))


def _names(catalog: Catalog) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Folded names and aliases to entry names; and leading parts of them (``llama3``,
    ``stablediffusion1.5``) to the entries they begin. A leading part of four characters
    or more, with a digit, that begins one entry's names only and is no entry's full name
    finds that entry (``3d`` alone does not find ``unet3d``)."""
    direct: dict[str, str] = {}
    partial: dict[str, set[str]] = {}
    for entry in catalog.entries.values():
        for alias in (entry.name, *entry.aliases):
            direct.setdefault(fold(alias), entry.name)
            parts = [p for p in re.split(r"[-_\s]+", alias.rsplit("/", 1)[-1]) if p]
            for n in range(1, len(parts)):
                partial.setdefault(fold("".join(parts[:n])), set()).add(entry.name)
    for key, owners in partial.items():
        if len(owners) == 1 and key not in direct and len(key) > 3 and any(map(str.isdigit, key)):
            direct[key] = next(iter(owners))
    return direct, {k: sorted(v) for k, v in partial.items()}


def _longest(
    words: Sequence[re.Match[str]], names: Mapping[str, Any]
) -> tuple[int, int, Any] | None:
    """The longest run of up to :data:`LONGEST_NAME_WORDS` words that folds to a key of
    ``names`` (the first of equals): where it starts and ends, and its value."""
    best: tuple[int, int, Any] | None = None
    size = 0
    for i in range(len(words)):
        key = ""
        for j in range(i, min(i + LONGEST_NAME_WORDS, len(words))):
            key += fold(words[j].group())
            if len(key) > size and key in names:
                best, size = (words[i].start(), words[j].end(), names[key]), len(key)
    return best


def _suggestions(
    words: Sequence[re.Match[str]],
    partial: Mapping[str, list[str]],
    catalog: Catalog,
    read: Scan,
    used: list[bool],
) -> list[str]:
    """Catalog names close to what the question says: the entries a named beginning
    (``llama 3``) begins, else those close to the words no rule used."""
    begun = _longest(words, partial)
    if begun is not None:
        return list(begun[2][:SHOWN])
    for spans in read.spans.values():
        for start, end in spans:
            used[start:end] = [True] * (end - start)
    found: list[str] = []
    for word in _unparsed(words, used):
        if len(word) >= 3 and any(c.isalpha() for c in word):
            found.extend(catalog.suggest(word, 3))
    return list(dict.fromkeys(found))[:SHOWN]


def _unparsed(words: Sequence[re.Match[str]], used: list[bool]) -> list[str]:
    out = (w.group() for w in words if not all(used[w.start() : w.end()]))
    return list(dict.fromkeys(w for w in out if w not in STOP_WORDS))


class _Draft:
    """The request assembled from a scan's facts, with a default for what the question
    did not say; ``used``: the facts it took (the others' words are unparsed)."""

    def __init__(self, read: Scan) -> None:
        self.facts = read.facts
        self.used: set[str] = set()

    def has(self, key: str) -> bool:
        return key in self.facts

    def take(self, key: str, default: Any = None) -> Any:
        if key not in self.facts:
            return default
        self.used.add(key)
        return self.facts[key]

    def some(self, *keys: str) -> dict[str, Any]:
        return {k: self.take(k) for k in keys if self.has(k)}

    def request(self, entry: CatalogEntry) -> dict[str, Any]:
        task = self._task(entry)
        out: dict[str, Any] = {
            "model": {"name": entry.name},
            "workload": self._workload(entry, task),
            "objective": self.take("objective", "best_value"),
        }
        usage = self.some("runs_per_month", "gpu_hours_per_month", "horizon_months",
                          "interruptible", "pattern")  # fmt: skip
        constraints = self._constraints(usage)
        if constraints:
            out["constraints"] = constraints
        if usage:
            out["usage"] = usage
        if task != "inference":
            out.update(self.some("global_batch_size"))
        elif _generates(entry):
            out.update(self.some("concurrency"))
        out.update(self.some("stack"))
        return out

    def _task(self, entry: CatalogEntry) -> str:
        """As said (training with LoRA is fine-tuning); else fine-tuning where a method is
        named; else training where a dataset, epochs or an optimizer is (fine-tuning for a
        transformer on under :data:`PRETRAINING_TOKENS`); else inference where prompt,
        output, concurrency or int8/int4 is; else :func:`_default_task`."""
        said, method = self.take("task"), self.facts.get("method")
        if said == "training" and method in ("lora", "qlora"):
            return "fine-tuning"
        if said is not None:
            return str(said)
        if method is not None:
            return "fine-tuning"
        if any(self.has(k) for k in _TRAINING_FACTS):
            text = entry.model.family == "transformer"
            big = self.facts.get("dataset_tokens", 0) >= PRETRAINING_TOKENS
            return "fine-tuning" if text and not big else "training"
        quantised = self.facts.get("precision") in ("int8", "int4")
        if quantised or any(self.has(k) for k in _SERVING_FACTS):
            return "inference"
        return _default_task(entry)

    def _workload(self, entry: CatalogEntry, task: str) -> dict[str, Any]:
        out: dict[str, Any] = {"task": task}
        if task == "fine-tuning":
            out["method"] = self.take("method", "full")
            if out["method"] != "full":
                out.update(self.some("lora_rank"))
        if entry.model.family == "transformer":
            out.update(self._tokens(entry, task))
        else:
            serving_one = task == "inference" and _generates(entry)
            out["batch_size"] = self.take("batch_size", 1 if serving_one else BATCH)
            size = self.facts.get("image_size")
            if entry.model.family in _IMAGE_FAMILIES or size == _spec(entry, "image_size"):
                out.update(self.some("image_size"))
        if task != "inference":
            out.update(self.some("dataset_tokens" if self.has("dataset_tokens")
                                 else "dataset_samples", "epochs", "optimizer"))  # fmt: skip
            if self.has("checkpointing"):
                out["activation_checkpointing"] = self.take("checkpointing")
        if task == "inference" or self.facts.get("precision") not in ("int8", "int4"):
            out.update(self.some("precision"))
        return out

    def _tokens(self, entry: CatalogEntry, task: str) -> dict[str, Any]:
        """A transformer's sequence, each length defaulted within a learned position
        table: training, seq_len (:data:`SEQ_LEN`) and a batch of about
        :data:`TOKENS_PER_STEP` tokens; serving, prompt and output tokens, batch 1 for
        a generative model (its concurrency is the batch), else :data:`BATCH`."""
        learned = _spec(entry, "position") == "learned"
        limit = int(_spec(entry, "max_positions") or 0) if learned else 0
        if task != "inference":
            seq = self.take("seq_len", _within(SEQ_LEN.get(_spec(entry, "arch"), 2048), limit))
            per_step = TOKENS_PER_STEP // seq if isinstance(seq, int) and seq > 0 else 1
            return {"seq_len": seq, "batch_size": self.take("batch_size", max(1, per_step))}
        generates = _generates(entry)
        out: dict[str, Any] = {"batch_size": self.take("batch_size", 1 if generates else BATCH)}
        if generates:
            out["output_tokens"] = self.take("output_tokens", _within(OUTPUT_TOKENS, limit // 2))
        room = limit - out.get("output_tokens", 0) if limit else 0
        key = "prompt_tokens" if self.has("prompt_tokens") else "seq_len"
        out["prompt_tokens"] = self.take(key, _within(PROMPT_TOKENS, room))
        return out

    def _constraints(self, usage: dict[str, Any]) -> dict[str, Any]:
        """A budget with no period is a job's: the monthly budget is it times the runs a
        month (one unless said, and then stated in ``usage``; with GPU-hours a month, the
        budget as is). Naming a provider or region means the cloud, unless said."""
        out = self.some("budget_capital_usd", "budget_monthly_usd", "deadline_hours",
                        "max_gpus", "providers", "regions")  # fmt: skip
        if "budget_monthly_usd" not in out and self.has("budget_usd"):
            if "gpu_hours_per_month" not in usage:
                usage.setdefault("runs_per_month", 1)
            out["budget_monthly_usd"] = self.take("budget_usd") * usage.get("runs_per_month", 1)
        named = "cloud" if out.get("providers") or out.get("regions") else None
        deployment = self.take("deployment", named)
        if deployment is not None:
            out["deployment"] = deployment
        return out


def _spec(entry: CatalogEntry, name: str) -> Any:
    return getattr(entry.model.spec, name, None)


def _generates(entry: CatalogEntry) -> bool:
    """A language-model head or a diffusion UNet: served a request at a time."""
    return _spec(entry, "head") == "lm" or entry.model.family == "unet"


def _default_task(entry: CatalogEntry) -> str:
    """What a question that says neither asks of a model: generative models are served,
    encoders (BERT) fine-tuned, everything else (vision, MLPerf models) trained."""
    if _generates(entry):
        return "inference"
    return "fine-tuning" if entry.model.family == "transformer" else "training"


def _within(value: int, limit: int) -> int:
    return min(value, limit) if limit > 0 else value

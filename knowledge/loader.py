"""Load and validate every knowledge file; build the :class:`~knowledge.base.Knowledge`.

All problems are collected before failing, so one run names every bad file, row and
field. A loaded knowledge base is memoised by its content hash: loading the same files
again (a second app in the same process) costs one pass over their bytes.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from marshmallow import Schema, ValidationError

from knowledge import crosschecks, records
from knowledge.aliases import AliasConflict, AliasIndex
from knowledge.base import Knowledge
from knowledge.benchmark_schemas import BENCHMARK_TABLES
from knowledge.deployment_schemas import (
    GridIntensitySchema,
    InputRateSchema,
    InstanceNetworkSchema,
    ProviderSchema,
    ServerDesignSchema,
)
from knowledge.errors import KnowledgeFileError, KnowledgeInvalid
from knowledge.files import FileFormatError, csv_records, yaml_records
from knowledge.schemas import (
    GpuSchema,
    InterconnectSchema,
    OfferPriceSchema,
    OfferSchema,
    OnpremParameterSchema,
    WorkloadSchema,
)
from knowledge.stack_schemas import (
    ARCHITECTURE_FILE,
    STACKS_FILE,
    ArchitectureEfficiencySchema,
    StackSchema,
)

REQUIRED_FILES = (
    "interconnects.yaml",
    "offers.csv",
    "offer_prices.csv",
    "onprem.yaml",
    "workloads.yaml",
    crosschecks.NETWORKS_FILE,
    crosschecks.PROVIDERS_FILE,
    crosschecks.GRID_FILE,
    crosschecks.INPUT_RATES_FILE,
    crosschecks.SERVER_DESIGNS_FILE,
    STACKS_FILE,
    *BENCHMARK_TABLES,
)


def default_root() -> Path:
    """The data folder shipped inside the package."""
    return Path(str(importlib.resources.files("knowledge") / "data"))


def data_files(root: Path) -> list[Path]:
    """Every data file under ``root``, in a stable order."""
    return sorted(p for p in root.rglob("*") if p.suffix in (".yaml", ".csv") and p.is_file())


def knowledge_version(root: Path) -> str:
    """Content hash of all data files (paths and bytes): changes whenever any figure does."""
    digest = hashlib.sha256()
    for path in data_files(root):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def load_knowledge(root: Path | str | None = None) -> Knowledge:
    """Load, validate and cross-check the knowledge under ``root`` (default: the package's).

    Raises :class:`KnowledgeInvalid` naming every file, row and field at fault.
    """
    path = Path(root) if root is not None else default_root()
    if not path.is_dir():
        raise KnowledgeInvalid([KnowledgeFileError(str(path), None, None, "no such folder")])
    return _load(path.resolve(), knowledge_version(path))


@functools.lru_cache(maxsize=8)
def _load(root: Path, version: str) -> Knowledge:
    return _Build(root, version).run()


Rows = list[tuple[str, Any]]  # (position label, validated record)


@dataclass
class _Parsed:
    """Every file's validated records, each with its position label, before linking."""

    gpus: list[tuple[str, str, records.Gpu]] = field(default_factory=list)  # (file, row, gpu)
    interconnects: Rows = field(default_factory=list)
    offers: Rows = field(default_factory=list)
    prices: Rows = field(default_factory=list)
    onprem: Rows = field(default_factory=list)
    workloads: Rows = field(default_factory=list)
    benchmarks: list[tuple[str, str, records.Benchmark]] = field(default_factory=list)
    networks: Rows = field(default_factory=list)
    providers: Rows = field(default_factory=list)
    grid: Rows = field(default_factory=list)
    input_rates: Rows = field(default_factory=list)
    server_designs: Rows = field(default_factory=list)
    stacks: Rows = field(default_factory=list)


class _Build:
    """One loading pass: parse each file, collect errors, then cross-check references."""

    def __init__(self, root: Path, version: str) -> None:
        self.root = root
        self.version = version
        self.errors: list[KnowledgeFileError] = []

    def fail(self, file: str, row: str | None, field: str | None, message: str) -> None:
        self.errors.append(KnowledgeFileError(file, row, field, message))

    def check(self) -> None:
        if self.errors:
            raise KnowledgeInvalid(self.errors)

    def run(self) -> Knowledge:
        parsed = self._parse()
        self.check()
        gpus, gpu_index = self._link_gpus(parsed)
        links = {i.id: i for _, i in parsed.interconnects}
        workload_index = self._link_workloads(parsed)
        offers = self._link_offers(parsed, gpus, links)
        benchmarks, unresolved = self._link_benchmarks(parsed, gpu_index, workload_index)
        self._unique("onprem.yaml", parsed.onprem, lambda p: p.id)
        onprem = {p.id: p for _, p in parsed.onprem}
        providers = crosschecks.providers(parsed.providers, offers, onprem, self.fail)
        grid = crosschecks.grid(parsed.grid, providers, offers, self.fail)
        networks = crosschecks.networks(parsed.networks, offers, self.fail)
        input_rates = crosschecks.input_rates(parsed.input_rates, self.fail)
        designs = crosschecks.server_designs(parsed.server_designs, links, onprem, self.fail)
        stacks, stack_index = self._link_stacks(parsed)
        factors, factors_fit = self._architecture_factors()
        self.check()
        return Knowledge(
            version=self.version,
            root=self.root,
            gpus=gpus,
            gpu_index=gpu_index,
            interconnects=links,
            offers=offers,
            onprem=onprem,
            workloads={w.id: w for _, w in parsed.workloads},
            benchmarks=benchmarks,
            networks=networks,
            providers=providers,
            grid=grid,
            input_rates=input_rates,
            server_designs=designs,
            stacks=stacks,
            stack_index=stack_index,
            architecture_factors=factors,
            architecture_fit=factors_fit,
            unresolved=unresolved,
        )

    def _parse(self) -> _Parsed:
        gpu_files = sorted((self.root / "gpus").glob("*.yaml"))
        if not gpu_files:
            self.fail("gpus/", None, None, "no GPU files (gpus/*.yaml)")
        for name in REQUIRED_FILES:
            if not (self.root / name).is_file():
                self.fail(name, None, None, "required file is missing")
        return _Parsed(
            gpus=[
                (self._rel(f), row, g)
                for f in gpu_files
                for row, g in self._records(f, GpuSchema())
            ],
            interconnects=self._records(self.root / "interconnects.yaml", InterconnectSchema()),
            offers=self._records(self.root / "offers.csv", OfferSchema()),
            prices=self._records(self.root / "offer_prices.csv", OfferPriceSchema()),
            onprem=self._records(self.root / "onprem.yaml", OnpremParameterSchema()),
            workloads=self._records(self.root / "workloads.yaml", WorkloadSchema()),
            benchmarks=[
                (name, row, b)
                for name, schema in BENCHMARK_TABLES.items()
                for row, b in self._records(self.root / name, schema())
            ],
            networks=self._records(self.root / crosschecks.NETWORKS_FILE, InstanceNetworkSchema()),
            providers=self._records(self.root / crosschecks.PROVIDERS_FILE, ProviderSchema()),
            grid=self._records(self.root / crosschecks.GRID_FILE, GridIntensitySchema()),
            input_rates=self._records(self.root / crosschecks.INPUT_RATES_FILE, InputRateSchema()),
            server_designs=self._records(
                self.root / crosschecks.SERVER_DESIGNS_FILE, ServerDesignSchema()
            ),
            stacks=self._records(self.root / STACKS_FILE, StackSchema()),
        )

    def _rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def _records(self, path: Path, schema: Schema) -> Rows:
        """Validate each record of one file; failures are collected, not raised."""
        if not path.is_file():
            return []
        name = self._rel(path)
        reader: Callable[[str], Iterable[tuple[str, Any]]]
        reader = yaml_records if path.suffix == ".yaml" else csv_records
        out = []
        try:
            for row, raw in reader(path.read_text(encoding="utf-8")):
                label = _label(row, raw)
                if not isinstance(raw, dict):
                    self.fail(name, label, None, "expected a mapping of fields")
                    continue
                try:
                    out.append((label, schema.load(raw)))
                except ValidationError as exc:
                    for field_name, message in flatten_messages(exc.messages):
                        self.fail(name, label, field_name, message)
        except FileFormatError as exc:
            self.fail(name, None, None, str(exc))
        return out

    def _unique(self, file: str, items: Rows, key: Callable[[Any], Any]) -> None:
        seen: dict[Any, str] = {}
        for row, item in items:
            k = key(item)
            if k in seen:
                self.fail(file, row, "id", f"duplicate {k!r} (first at {seen[k]})")
            seen.setdefault(k, row)

    def _link_gpus(self, parsed: _Parsed) -> tuple[dict[str, records.Gpu], AliasIndex]:
        """Index GPUs by id and alias; check ids, aliases and GPU links are sound."""
        self._unique("interconnects.yaml", parsed.interconnects, lambda i: i.id)
        links = {i.id for _, i in parsed.interconnects}
        networks: dict[str, str] = {}  # architecture -> the network its servers have
        for row, link in parsed.interconnects:
            for arch in link.servers_of:
                if arch in networks:
                    self.fail("interconnects.yaml", row, "servers_of",
                              f"{arch!r} is already served by {networks[arch]!r}")  # fmt: skip
                networks.setdefault(arch, link.id)
        index = AliasIndex()
        gpus: dict[str, records.Gpu] = {}
        for file, row, gpu in parsed.gpus:
            if gpu.id in gpus:
                self.fail(file, row, "id", f"duplicate GPU id '{gpu.id}'")
                continue
            gpus[gpu.id] = gpu
            try:
                index.add(gpu.id, (gpu.name, *gpu.aliases))
            except AliasConflict as exc:
                self.fail(file, row, "aliases", str(exc))
            if gpu.gpu_link is not None and gpu.gpu_link not in links:
                self.fail(file, row, "gpu_link", f"unknown interconnect '{gpu.gpu_link}'")
        return gpus, index

    def _architecture_factors(self) -> tuple[dict[str, float], str]:
        """The architectures' factors on the stacks' GEMM efficiency (none: all 1)."""
        path = self.root / ARCHITECTURE_FILE
        if not path.is_file():
            return {}, ""
        try:
            data = ArchitectureEfficiencySchema().load(yaml.safe_load(path.read_text()))
        except ValidationError as exc:
            for name, message in exc.normalized_messages().items():
                self.fail(ARCHITECTURE_FILE, None, str(name), str(message))
            return {}, ""
        except yaml.YAMLError as exc:
            self.fail(ARCHITECTURE_FILE, None, None, str(exc))
            return {}, ""
        reference = data["reference"]
        return {**data["factors"], reference: 1.0, f"fused:{reference}": 1.0}, data["fit"]

    def _link_stacks(self, parsed: _Parsed) -> tuple[dict[str, records.Stack], AliasIndex]:
        """Stacks by id and alias; each task, method and kind of model has one default."""
        self._unique(STACKS_FILE, parsed.stacks, lambda s: s.id)
        index = AliasIndex()
        defaults: dict[str, str] = {}
        for row, stack in parsed.stacks:
            try:
                index.add(stack.id, stack.aliases)
            except AliasConflict as exc:
                self.fail(STACKS_FILE, row, "aliases", str(exc))
            for what in stack.default_for:
                if what in defaults:
                    self.fail(STACKS_FILE, row, "default_for",
                              f"{what!r} already defaults to {defaults[what]!r}")  # fmt: skip
                defaults[what] = stack.id
        for what in ("training", "fine-tuning", "inference"):
            if parsed.stacks and what not in defaults and what != "fine-tuning":
                self.fail(STACKS_FILE, None, "default_for", f"no stack is the default for {what}")
        return {s.id: s for _, s in parsed.stacks}, index

    def _link_workloads(self, parsed: _Parsed) -> dict[str, AliasIndex]:
        """One alias index per benchmark kind (a name may mean training or inference)."""
        self._unique("workloads.yaml", parsed.workloads, lambda w: w.id)
        by_kind: dict[str, AliasIndex] = defaultdict(AliasIndex)
        for row, w in parsed.workloads:
            try:
                by_kind[w.kind].add(w.id, w.aliases)
            except AliasConflict as exc:
                self.fail("workloads.yaml", row, "aliases", str(exc))
        return by_kind

    def _link_offers(
        self, parsed: _Parsed, gpus: dict[str, records.Gpu], links: dict[str, Any]
    ) -> list[records.Offer]:
        """Attach prices to offers; every reference must resolve."""
        self._unique("offers.csv", parsed.offers, lambda o: o.id)
        self._unique(
            "offer_prices.csv",
            parsed.prices,
            lambda p: (p["provider"], p["instance_type"], p["region"]),
        )
        known = {o.id for _, o in parsed.offers}
        prices: dict[str, list[records.OfferPrice]] = defaultdict(list)
        for row, p in parsed.prices:
            key = f"{p.pop('provider')}:{p.pop('instance_type')}"
            if key not in known:
                self.fail(
                    "offer_prices.csv", row, "instance_type", f"no offer '{key}' in offers.csv"
                )
                continue
            prices[key].append(records.OfferPrice(**p))
        out = []
        for row, offer in parsed.offers:
            if offer.gpu_id not in gpus:
                self.fail("offers.csv", row, "gpu_id", f"unknown GPU id '{offer.gpu_id}'")
            if offer.interconnect is not None and offer.interconnect not in links:
                self.fail(
                    "offers.csv",
                    row,
                    "interconnect",
                    f"unknown interconnect '{offer.interconnect}'",
                )
            if not prices.get(offer.id):
                self.fail("offers.csv", row, "instance_type", f"offer '{offer.id}' has no prices")
            ordered = tuple(sorted(prices[offer.id], key=lambda p: p.region))
            out.append(replace(offer, prices=ordered))
        return out

    def _link_benchmarks(
        self, parsed: _Parsed, gpu_index: AliasIndex, workload_index: dict[str, AliasIndex]
    ) -> tuple[list[records.Benchmark], list[str]]:
        """Resolve each row's GPU and workload; rows that do not resolve are reported."""
        models = {w.id: w.model for _, w in parsed.workloads}
        out: list[records.Benchmark] = []
        unresolved: list[str] = []
        for name, row, bench in parsed.benchmarks:
            gpu_id = gpu_index.resolve(bench.gpu)
            workload_id = workload_index[bench.kind].resolve(bench.workload)
            if gpu_id is None:
                unresolved.append(f"{name}, {row}: GPU '{bench.gpu}' resolves to no GPU id")
            if workload_id is None:
                unresolved.append(
                    f"{name}, {row}: workload '{bench.workload}' is not in workloads.yaml"
                )
                workload_id = bench.workload
            out.append(
                replace(bench, gpu_id=gpu_id, workload=workload_id, model=models.get(workload_id))
            )
        return out, unresolved


def _label(row: str, raw: Any) -> str:
    if isinstance(raw, dict) and isinstance(raw.get("id"), str):
        return f"{row}, id '{raw['id']}'"
    return row


def flatten_messages(messages: Any, prefix: str = "") -> list[tuple[str, str]]:
    """marshmallow's nested error dict as (field, message) pairs."""
    if isinstance(messages, dict):
        pairs: list[tuple[str, str]] = []
        for key, value in messages.items():
            name = prefix if key == "_schema" else f"{prefix}.{key}" if prefix else str(key)
            pairs += flatten_messages(value, name)
        return pairs
    if isinstance(messages, list):
        return [
            (prefix or "(record)", str(m)) for m in messages if not isinstance(m, (dict, list))
        ] + [
            p for m in messages if isinstance(m, (dict, list)) for p in flatten_messages(m, prefix)
        ]
    return [(prefix or "(record)", str(messages))]

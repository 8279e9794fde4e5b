"""The loaded knowledge base: typed records, indexes, and the lookups the engine and API use."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from knowledge import records
from knowledge.aliases import AliasIndex, normalise_name
from knowledge.errors import UnknownId


@dataclass(frozen=True)
class Knowledge:
    """Everything :func:`knowledge.load_knowledge` read, validated and cross-checked.

    ``version`` is the content hash of the data files; ``unresolved`` lists the stored
    benchmark rows whose GPU or workload name resolves to nothing in the catalog.
    ``networks`` is keyed by offer id (``provider:instance_type``), ``grid`` by
    (provider, region) with ``*`` rows as fallbacks (see :meth:`grid_intensity`).
    """

    version: str
    root: Path
    gpus: dict[str, records.Gpu]
    gpu_index: AliasIndex
    interconnects: dict[str, records.Interconnect]
    offers: list[records.Offer]
    onprem: dict[str, records.OnpremParameter]
    workloads: dict[str, records.Workload]
    benchmarks: list[records.Benchmark]
    networks: dict[str, records.InstanceNetwork]
    providers: dict[str, records.Provider]
    grid: dict[tuple[str, str], records.GridIntensity]
    input_rates: dict[str, records.InputRate]
    server_designs: dict[str, records.ServerDesign]
    stacks: dict[str, records.Stack] = field(default_factory=dict)
    stack_index: AliasIndex = field(default_factory=AliasIndex)
    # GPU architecture -> factor on a named stack's GEMM efficiency (Hopper: 1), with its fit
    architecture_factors: dict[str, float] = field(default_factory=dict)
    architecture_fit: str = ""
    unresolved: list[str] = field(default_factory=list)

    @cached_property
    def offers_by_gpu(self) -> dict[str, list[records.Offer]]:
        """The cloud offers of each GPU id, in catalog order."""
        out: dict[str, list[records.Offer]] = {}
        for offer in self.offers:
            out.setdefault(offer.gpu_id, []).append(offer)
        return out

    @cached_property
    def derived(self) -> dict[Any, Any]:
        """Tables callers derive from this knowledge, kept as long as it is (each caller
        keys its own by a tuple naming it, e.g. service.engine.deciding.cost's cheapest offers)."""
        return {}

    def resolve_gpu(self, name: str) -> str | None:
        """The GPU id that ``name`` (an id, a product name or an alias) stands for, or None."""
        return self.gpu_index.resolve(name)

    def gpu(self, name: str) -> records.Gpu:
        """The GPU named ``name``; raise :class:`UnknownId` with close matches otherwise."""
        ident = self.resolve_gpu(name)
        if ident is None:
            raise UnknownId("GPU", name, self.gpu_index.suggest(name))
        return self.gpus[ident]

    def interconnect(self, ident: str) -> records.Interconnect:
        try:
            return self.interconnects[ident]
        except KeyError:
            raise UnknownId("interconnect", ident, _close(ident, self.interconnects)) from None

    def provider(self, ident: str) -> records.Provider:
        try:
            return self.providers[ident]
        except KeyError:
            raise UnknownId("provider", ident, _close(ident, self.providers)) from None

    def grid_intensity(self, provider: str, region: str) -> records.GridIntensity:
        """The grid figure of ``region`` of ``provider``; else the provider's ``*`` row; else
        the ``*,*`` world average (the loader makes sure it is there)."""
        for key in ((provider, region), (provider, records.ANY), (records.ANY, records.ANY)):
            if key in self.grid:
                return self.grid[key]
        raise UnknownId("grid region", f"{provider}:{region}", [])

    def workload(self, name: str) -> records.Workload:
        """A workload by id, alias or model catalog name."""
        key = normalise_name(name)
        for w in self.workloads.values():
            if key in {normalise_name(n) for n in (w.id, w.model, *w.aliases)}:
                return w
        raise UnknownId("workload", name, _close(name, self.workloads))

    def workloads_matching(self, name: str) -> set[str]:
        """Ids of every workload whose id, model name or alias is ``name``."""
        key = normalise_name(name)
        return {
            w.id
            for w in self.workloads.values()
            if key in {normalise_name(n) for n in (w.id, w.model, *w.aliases)}
        }

    def suggest_workloads(self, name: str) -> list[str]:
        return _close(name, self.workloads)

    def stats(self) -> dict[str, int]:
        """Record counts by kind, for ``/readyz`` and the CLI."""
        return {
            "gpus": len(self.gpus),
            "interconnects": len(self.interconnects),
            "offers": len(self.offers),
            "offer_prices": sum(len(o.prices) for o in self.offers),
            "onprem_parameters": len(self.onprem),
            "workloads": len(self.workloads),
            "benchmarks": len(self.benchmarks),
            "unresolved_benchmark_rows": len(self.unresolved),
            "instance_networks": len(self.networks),
            "providers": len(self.providers),
            "grid_intensities": len(self.grid),
            "input_rates": len(self.input_rates),
            "server_designs": len(self.server_designs),
        }


def _close(name: str, ids: Iterable[str]) -> list[str]:
    index = AliasIndex()
    for ident in ids:
        index.add(ident, ())
    return index.suggest(name)

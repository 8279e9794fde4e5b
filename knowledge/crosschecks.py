"""Cross-references of the deployment files, checked at load.

Each function takes one file's validated rows (each with its position label) and what it
refers to, reports every problem through ``fail(file, row, field, message)`` and returns
the records indexed as :class:`~knowledge.base.Knowledge` keeps them.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from knowledge import records
from knowledge.deployment_schemas import SERVER_NETWORKS
from knowledge.records import ANY

Fail = Callable[[str, str | None, str | None, str], None]
Rows = list[tuple[str, Any]]
K = TypeVar("K")

NETWORKS_FILE = "instance_networks.csv"
PROVIDERS_FILE = "providers.yaml"
GRID_FILE = "grid_intensity.csv"
INPUT_RATES_FILE = "input_rates.yaml"
SERVER_DESIGNS_FILE = "server_designs.yaml"
ON_PREMISE = "on-premise"
ONPREM_PUE = "pue.average"  # the on-premise provider's PUE is this onprem.yaml figure
SERVER_COST = "server_cost_usd_per_gpu_slot."  # + a server design id, in onprem.yaml


def index(
    file: str, rows: Rows, key: Callable[[Any], K], fail: Fail, field: str = "id"
) -> dict[K, Any]:
    """The rows' records by ``key``; a repeated key is reported and the first kept."""
    out: dict[K, Any] = {}
    first: dict[K, str] = {}
    for row, item in rows:
        k = key(item)
        if k in out:
            fail(file, row, field, f"duplicate {k!r} (first at {first[k]})")
            continue
        out[k], first[k] = item, row
    return out


def networks(
    rows: Rows, offers: Sequence[records.Offer], fail: Fail
) -> dict[str, records.InstanceNetwork]:
    """One network row per offer, and no row without its offer."""
    out = index(NETWORKS_FILE, rows, lambda n: n.id, fail, "instance_type")
    known = {o.id for o in offers}
    for row, net in rows:
        if net.id not in known:
            fail(NETWORKS_FILE, row, "instance_type", f"no offer '{net.id}' in offers.csv")
    for offer in offers:
        if offer.id not in out:
            fail(
                NETWORKS_FILE,
                None,
                "instance_type",
                f"offer '{offer.id}' of offers.csv has no network row "
                "(run python -m knowledge.derive)",
            )
    return {k: v for k, v in out.items() if k in known}


def providers(
    rows: Rows,
    offers: Sequence[records.Offer],
    onprem: dict[str, records.OnpremParameter],
    fail: Fail,
) -> dict[str, records.Provider]:
    """A record for every provider offers.csv names, and one for on-premise servers."""
    out = index(PROVIDERS_FILE, rows, lambda p: p.id, fail)
    for name in sorted({o.provider for o in offers} | {ON_PREMISE}):
        if name not in out:
            used = "on-premise servers" if name == ON_PREMISE else "offers.csv"
            fail(PROVIDERS_FILE, None, "id", f"no record for provider '{name}' ({used} needs one)")
    pue = onprem.get(ONPREM_PUE)
    row = next((r for r, p in rows if p.id == ON_PREMISE), None)
    if pue is not None and row is not None and out[ON_PREMISE].pue.value != pue.value:
        fail(
            PROVIDERS_FILE,
            row,
            "pue.value",
            f"{out[ON_PREMISE].pue.value:g} differs from onprem.yaml's {ONPREM_PUE} "
            f"({pue.value:g}): the on-premise PUE is that figure",
        )
    return out


def grid(
    rows: Rows,
    provider_ids: Iterable[str],
    offers: Sequence[records.Offer],
    fail: Fail,
) -> dict[tuple[str, str], records.GridIntensity]:
    """Rows name known providers and regions their offers are priced in; ``*,*`` exists."""
    out = index(GRID_FILE, rows, lambda g: (g.provider, g.region), fail, "region")
    known = set(provider_ids)
    regions: dict[str, set[str]] = {}
    for offer in offers:
        regions.setdefault(offer.provider, set()).update(p.region for p in offer.prices)
    for row, g in rows:
        if g.provider != ANY and g.provider not in known:
            fail(
                GRID_FILE,
                row,
                "provider",
                f"unknown provider '{g.provider}'{_hint(g.provider, known)}",
            )
        elif g.region != ANY and g.provider in regions and g.region not in regions[g.provider]:
            fail(
                GRID_FILE,
                row,
                "region",
                f"no offer of '{g.provider}' is priced in region '{g.region}' in "
                f"offer_prices.csv{_hint(g.region, regions[g.provider])}",
            )
    if (ANY, ANY) not in out:
        fail(GRID_FILE, None, "provider", "no fallback row '*,*' (the world average)")
    return out


def input_rates(rows: Rows, fail: Fail) -> dict[str, records.InputRate]:
    """Input kinds by id; the ``reserved`` record must be there."""
    out = index(INPUT_RATES_FILE, rows, lambda r: r.id, fail)
    if rows and "reserved" not in out:
        fail(
            INPUT_RATES_FILE, None, "id", "no 'reserved' record (vCPUs the training takes per GPU)"
        )
    return out


def server_designs(
    rows: Rows,
    interconnects: dict[str, records.Interconnect],
    onprem: dict[str, records.OnpremParameter],
    fail: Fail,
) -> dict[str, records.ServerDesign]:
    """Each design's network exists between servers, and its cost is in onprem.yaml."""
    out = index(SERVER_DESIGNS_FILE, rows, lambda d: d.id, fail)
    between = {i for i, link in interconnects.items() if link.scope == "inter-node"}
    for row, design in rows:
        net = design.network
        if net in SERVER_NETWORKS:
            pass
        elif net not in interconnects:
            choices = [*SERVER_NETWORKS, *sorted(between)]
            fail(
                SERVER_DESIGNS_FILE,
                row,
                "network",
                f"unknown network '{net}': expected none, reference or an inter-node "
                f"interconnect id of interconnects.yaml{_hint(net, choices)}",
            )
        elif net not in between:
            fail(
                SERVER_DESIGNS_FILE,
                row,
                "network",
                f"interconnect '{net}' is {interconnects[net].scope}, not inter-node",
            )
        elif design.network_ports_per_server is None:
            fail(
                SERVER_DESIGNS_FILE,
                row,
                "network_ports_per_server",
                f"a server on '{net}' needs its number of ports",
            )
        if SERVER_COST + design.id not in onprem:
            fail(
                SERVER_DESIGNS_FILE,
                row,
                "id",
                f"onprem.yaml has no '{SERVER_COST}{design.id}' for this design",
            )
    for ident in sorted(onprem):
        if ident.startswith(SERVER_COST) and ident.removeprefix(SERVER_COST) not in out:
            fail(
                SERVER_DESIGNS_FILE,
                None,
                "id",
                f"no design '{ident.removeprefix(SERVER_COST)}' for onprem.yaml's '{ident}'",
            )
    return out


def _hint(value: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(value, list(choices), n=3, cutoff=0.6)
    return f"; did you mean {', '.join(close)}?" if close else ""

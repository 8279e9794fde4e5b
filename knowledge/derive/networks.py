"""Each offer's network to the other instances of its job: ``instance_networks.csv``.

One row per offer the offer derivation yields (so the two tables cannot drift apart),
in Gb/s per direction with all the instance's NICs together. AWS rows parse the ``network``
column of the AWS source the offers come from (:mod:`knowledge.derive.offers_aws`); the
other providers' rows come from the per-family rules of :mod:`knowledge.derive.network_rules`,
each citing the provider's page it transcribes. An offer no rule covers gets the
conservative case (ethernet, 10 Gb/s, not clustered) with a note saying so.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from knowledge.derive import Derived, offers, offers_aws
from knowledge.derive.network_rules import FALLBACK, RULES, Network, Rule
from knowledge.derive.offers_common import csv_rows

COLUMNS = [
    "provider",
    "instance_type",
    "network_gbps",
    "network_kind",
    "rdma",
    "cluster",
    "source",
    "as_of",
    "notes",
]
# Families whose instances carry EFA even where the source's text does not say so
EFA_FAMILY = re.compile(r"p4de?|p5(en?)?|(u-)?p6(e)?-.+")
BURST_NOTE = "burst figure; sustained is lower"
# Old generations that AWS rates only as a class: conservative figures, in Gb/s
CLASSES = {"High": 1.0, "Moderate": 0.3}
CLASS_NOTE = (
    "AWS states only the class '{0}' for this old generation; {1:g} Gb/s is a conservative "
    "assumption (the sustained rate may be several times higher)"
)
CLUSTER_NOTE = "cluster placement group"


def derive(shared: Path) -> Derived:
    """One network row per offer, sorted by provider and instance type."""
    offer_rows = offers.derive(shared).tables["offers.csv"][1]
    aws = aws_networks(shared)
    rows = []
    for offer in offer_rows:
        provider, instance_type = str(offer["provider"]), str(offer["instance_type"])
        if provider == "aws":
            net = aws_network(aws[instance_type], instance_type)
            rows.append(_row(offer, net, offers_aws.SOURCE, offers_aws.CATALOG_DATE))
        else:
            vcpus = int(str(offer["vcpus"]))
            rule = rule_for(provider, instance_type, vcpus)
            rows.append(_row(offer, rule.network(instance_type, vcpus), rule.source, rule.as_of))
    derived = Derived()
    derived.add_table(
        "instance_networks.csv",
        COLUMNS,
        sorted(rows, key=lambda r: (str(r["provider"]), str(r["instance_type"]))),
    )
    return derived


def _row(offer: dict[str, object], net: Network, source: str, as_of: str) -> dict[str, object]:
    return {
        "provider": offer["provider"],
        "instance_type": offer["instance_type"],
        "network_gbps": float(net.gbps),
        "network_kind": net.kind,
        "rdma": _flag(net.rdma),
        "cluster": _flag(net.cluster),
        "source": source,
        "as_of": as_of,
        "notes": "; ".join(net.notes) or None,
    }


def _flag(value: bool) -> str:
    return "true" if value else "false"


def rule_for(provider: str, instance_type: str, vcpus: int) -> Rule:
    """The first rule of ``provider`` that names the instance type and states its figure;
    :data:`~knowledge.derive.network_rules.FALLBACK` where none does."""
    for rule in RULES:
        if rule.provider == provider and rule.covers(instance_type, vcpus):
            return rule
    return FALLBACK


def aws_networks(shared: Path) -> dict[str, str]:
    """The source's ``network`` text of each AWS instance type (the lowest, where its
    regions disagree: :func:`aws_network` then reads every figure the rows give)."""
    texts: dict[str, set[str]] = defaultdict(set)
    for row in csv_rows(shared / "cloud-prices-aws-vantage" / offers_aws.FILE):
        texts[row["name"]].add(row["network"].strip())
    return {name: " | ".join(sorted(found)) for name, found in texts.items()}


def aws_network(text: str, instance_type: str) -> Network:
    """An AWS ``network`` cell (``"Up to 25 Gigabit"``, ``"3200 Gbps EFAv2"``,
    ``"16x 100 Gigabit"``, ``"High"``) as a :class:`Network`; several cells joined by
    ``" | "`` (regions that disagree) give the lowest figure."""
    parts = [_aws_part(part.strip()) for part in text.split(" | ")]
    gbps, notes, efa_text = min(parts, key=lambda p: p[0])
    efa = efa_text or bool(EFA_FAMILY.fullmatch(instance_type.split(".", maxsplit=1)[0]))
    out = [f"the source states '{text}'", *notes]
    if len(parts) > 1:
        out.append("its regions disagree: the lowest figure kept")
    if efa and not efa_text:
        out.append("EFA-capable family; the source's text names no EFA")
    out.append(CLUSTER_NOTE + (" (UltraCluster)" if efa else ""))
    return Network(gbps, "efa" if efa else "ethernet", efa, True, tuple(out))


def _aws_part(text: str) -> tuple[float, tuple[str, ...], bool]:
    """(Gb/s, notes, whether the text names EFA) of one AWS network cell."""
    if text in CLASSES:
        return CLASSES[text], (CLASS_NOTE.format(text, CLASSES[text]),), False
    if found := re.fullmatch(r"Up to ([0-9.]+) Gigabit", text):
        return float(found.group(1)), (BURST_NOTE,), False
    if found := re.fullmatch(r"(\d+)x ([0-9.]+) Gigabit", text):
        return int(found.group(1)) * float(found.group(2)), (), False
    if found := re.fullmatch(r"([0-9.]+) Gbps EFA(v\d+)?", text):
        return float(found.group(1)), (), True
    if found := re.fullmatch(r"([0-9.]+) Gigabit", text):
        return float(found.group(1)), (), False
    raise ValueError(f"unreadable AWS network {text!r}")

"""Schemas of the files that describe where a job runs, besides its GPUs.

``instance_networks.csv`` (derived), ``providers.yaml``, ``grid_intensity.csv``,
``input_rates.yaml`` and ``server_designs.yaml`` (curated). As in :mod:`knowledge.schemas`,
unknown fields are errors and every figure is range-checked; a curated figure is a
:class:`~knowledge.records.Fact` (``value``, ``source``, ``as_of``, ``notes``), its range
set by the field that holds it.
"""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, ValidationError, fields, post_load, validate, validates_schema

from knowledge import records
from knowledge.records import ANY
from knowledge.schemas import FORM_FACTORS, ID, ID_PATTERN, number

NETWORK_KINDS = (
    "infiniband",
    "efa",
    "roce",
    "gpudirect-tcpx",
    "gpudirect-tcpxo",
    "ethernet",
    "internet",
)
SERVER_NETWORKS = ("none", "reference")  # besides an inter-node interconnect id
DESIGN_ID = validate.Regexp(r"^[a-z0-9][a-z0-9_]*$", error="must be lowercase with underscores")
SOURCE = validate.Length(min=3)


class FactSchema(Schema):
    """A sourced figure; subclasses made by :func:`_fact` set the range of ``value``."""

    value = fields.Float(required=True)
    source = fields.String(required=True, validate=SOURCE)
    as_of = fields.Date(required=True)
    notes = fields.String(load_default=None)

    @post_load
    def _make(self, data: dict[str, Any], **_: Any) -> records.Fact:
        return records.Fact(**data)


def _fact(low: float, high: float, *, low_inclusive: bool = True, **kw: Any) -> fields.Nested:
    """A required (unless ``kw`` says otherwise) Fact whose value lies in [low, high]."""
    ranged = type(
        "RangedFactSchema",
        (FactSchema,),
        {"value": number(low, high, low_inclusive=low_inclusive, required=True)},
    )
    kw.setdefault("required", True)
    return fields.Nested(ranged, **kw)


def _optional_fact(low: float, high: float, *, low_inclusive: bool = True) -> fields.Nested:
    return _fact(low, high, low_inclusive=low_inclusive, required=False, load_default=None)


class InstanceNetworkSchema(Schema):
    provider = fields.String(required=True, validate=ID)
    instance_type = fields.String(required=True, validate=validate.Length(min=1))
    network_gbps = number(0, 100_000, low_inclusive=False, required=True)
    network_kind = fields.String(required=True, validate=validate.OneOf(NETWORK_KINDS))
    rdma = fields.Boolean(required=True)
    cluster = fields.Boolean(required=True)
    source = fields.String(required=True, validate=SOURCE)
    as_of = fields.Date(required=True)
    notes = fields.String(required=True, allow_none=True)

    @validates_schema
    def _consistent(self, data: dict[str, Any], **_: Any) -> None:
        kind = data["network_kind"]
        if kind in ("ethernet", "internet") and data["rdma"]:
            raise ValidationError(f"must be false on a network of kind {kind!r}", "rdma")
        if kind not in ("ethernet", "internet") and not data["rdma"]:
            raise ValidationError(f"must be true on a network of kind {kind!r}", "rdma")
        if kind == "internet" and data["cluster"]:
            raise ValidationError("must be false: hosts on the internet share no fabric", "cluster")

    @post_load
    def _make(self, data: dict[str, Any], **_: Any) -> records.InstanceNetwork:
        return records.InstanceNetwork(**data)


class ProviderSchema(Schema):
    id = fields.String(required=True, validate=ID)
    name = fields.String(required=True, validate=validate.Length(min=2))
    marketplace = fields.Boolean(required=True)
    start_up_s = _fact(0, 86_400)
    billing_increment_s = _fact(0, 86_400)
    billing_minimum_s = _fact(0, 86_400)
    on_demand_interruptions_per_hour = _fact(0, 10)
    spot_interruptions_per_hour = _fact(0, 10)
    pue = _fact(1, 3)
    storage_gb_per_s = _fact(0, 1_000, low_inclusive=False)
    internet_gbps = _fact(0, 10_000, low_inclusive=False)
    notes = fields.String(load_default=None)

    @post_load
    def _make(self, data: dict[str, Any], **_: Any) -> records.Provider:
        return records.Provider(**data)


class GridIntensitySchema(Schema):
    provider = fields.String(
        required=True,
        validate=validate.Regexp(rf"^(\*|{ID_PATTERN})$", error="must be '*' or a provider id"),
    )
    region = fields.String(required=True, validate=validate.Length(min=1))
    g_co2e_per_kwh = number(0, 2_000, required=True)
    source = fields.String(required=True, validate=SOURCE)
    as_of = fields.Date(required=True)
    notes = fields.String(required=True, allow_none=True)

    @validates_schema
    def _fallbacks(self, data: dict[str, Any], **_: Any) -> None:
        if data["provider"] == ANY and data["region"] != ANY:
            raise ValidationError("a row for any provider ('*') is for any region ('*')", "region")

    @post_load
    def _make(self, data: dict[str, Any], **_: Any) -> records.GridIntensity:
        return records.GridIntensity(**data)


class InputRateSchema(Schema):
    id = fields.String(required=True, validate=ID)
    description = fields.String(load_default=None)
    samples_per_s_per_vcpu = _optional_fact(0, 10_000_000, low_inclusive=False)
    bytes_per_sample = _optional_fact(0, 1e10, low_inclusive=False)
    bytes_per_token = _optional_fact(1, 8)
    vcpus_per_gpu = _optional_fact(0, 64, low_inclusive=False)
    notes = fields.String(load_default=None)

    @validates_schema
    def _shape(self, data: dict[str, Any], **_: Any) -> None:
        rate_fields = ("samples_per_s_per_vcpu", "bytes_per_sample", "bytes_per_token")
        if data["id"] == "reserved":
            if data.get("vcpus_per_gpu") is None:
                raise ValidationError("the 'reserved' record needs vcpus_per_gpu", "vcpus_per_gpu")
            for name in rate_fields:
                if data.get(name) is not None:
                    raise ValidationError("not on the 'reserved' record (vcpus_per_gpu only)", name)
            return
        if data.get("vcpus_per_gpu") is not None:
            raise ValidationError("only on the 'reserved' record", "vcpus_per_gpu")
        if data.get("description") is None:
            raise ValidationError("an input kind needs its description", "description")
        if data.get("samples_per_s_per_vcpu") is None:
            raise ValidationError("an input kind needs its rate", "samples_per_s_per_vcpu")
        sizes = [n for n in ("bytes_per_sample", "bytes_per_token") if data.get(n) is not None]
        if len(sizes) != 1:
            raise ValidationError(
                "give exactly one of bytes_per_sample and bytes_per_token", "bytes_per_sample"
            )

    @post_load
    def _make(self, data: dict[str, Any], **_: Any) -> records.InputRate:
        return records.InputRate(**data)


class PortCount(fields.Field):
    """A whole number of ports, written plainly or as a Fact (whose value is kept)."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kw: Any) -> int:
        if isinstance(value, dict):
            value = _fact(1, 1_000)._deserialize(value, attr, data, **kw).value
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
            raise ValidationError("must be a whole number of ports (or a fact with one)")
        if not 1 <= value <= 1_000:
            raise ValidationError("must be between 1 and 1000")
        return int(value)


class ServerDesignSchema(Schema):
    id = fields.String(required=True, validate=DESIGN_ID)
    name = fields.String(required=True, validate=validate.Length(min=2))
    max_gpus = fields.Integer(required=True, validate=validate.Range(1, 64))
    form_factors = fields.List(
        fields.String(validate=validate.OneOf(FORM_FACTORS)),
        required=True,
        validate=validate.Length(min=1),
    )
    vcpus = _fact(1, 10_000)
    memory_gib = _fact(0, 1_000_000, low_inclusive=False)
    network = fields.String(required=True, validate=validate.Length(min=1))
    network_ports_per_server = PortCount(load_default=None)
    notes = fields.String(load_default=None)

    @post_load
    def _make(self, data: dict[str, Any], **_: Any) -> records.ServerDesign:
        data["form_factors"] = tuple(data["form_factors"])
        return records.ServerDesign(**data)

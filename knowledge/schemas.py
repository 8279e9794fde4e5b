"""Marshmallow schemas that validate each knowledge data file, record by record.

Unknown fields are errors (marshmallow's default ``RAISE``); numbers carry their units
in their names and are range-checked so that a negative or impossible value fails.
"""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, ValidationError, fields, post_load, validate, validates_schema

from knowledge import records

ID_PATTERN = r"[a-z0-9][a-z0-9.]*(-[a-z0-9.]+)*"
ID = validate.Regexp(rf"^{ID_PATTERN}$", error="must be lowercase and hyphenated")
ARCHITECTURES = (
    "kepler",
    "maxwell",
    "pascal",
    "volta",
    "turing",
    "ampere",
    "ada",
    "hopper",
    "blackwell",
    "vega",
    "rdna1",
    "rdna2",
    "rdna3",
    "rdna4",
    "cdna1",
    "cdna2",
    "cdna3",
    "cdna4",
)
MEMORY_TYPES = ("GDDR5", "GDDR5X", "GDDR6", "GDDR6X", "GDDR7", "HBM2", "HBM2e", "HBM3", "HBM3e")
VENDORS = ("nvidia", "amd", "intel")
SEGMENTS = ("datacenter", "workstation", "consumer")
FORM_FACTORS = ("sxm", "pcie", "oam", "superchip", "mobile")
INTERCONNECT_KINDS = (
    "pcie",
    "nvlink",
    "nvlink-bridge",
    "nvswitch",
    "infinity-fabric",
    "nvlink-c2c",
    "infiniband",
    "ethernet",
)
SCOPES = ("intra-node", "inter-node", "host")
BENCHMARK_KINDS = (
    "training-throughput",
    "time-to-train",
    "inference-throughput",
    "operator-timing",
)


def number(low: float, high: float, *, low_inclusive: bool = True, **kw: Any) -> fields.Float:
    """A float field that must lie in [low, high] (low excluded where ``low_inclusive`` is off)."""
    return fields.Float(
        validate=validate.Range(min=low, max=high, min_inclusive=low_inclusive), **kw
    )


def _rate(**kw: Any) -> fields.Float:
    """A dense peak rate in TFLOPS (TOPS): positive, or null where unsupported."""
    return number(0, 20000, low_inclusive=False, allow_none=True, required=True, **kw)


def _sources() -> fields.List:
    return fields.List(
        fields.String(validate=validate.Length(min=3)),
        required=True,
        validate=validate.Length(min=1),
    )


class GpuSchema(Schema):
    id = fields.String(required=True, validate=ID)
    vendor = fields.String(required=True, validate=validate.OneOf(VENDORS))
    name = fields.String(required=True, validate=validate.Length(min=2))
    architecture = fields.String(required=True, validate=validate.OneOf(ARCHITECTURES))
    compute_capability = fields.String(
        required=True, allow_none=True, validate=validate.Regexp(r"^\d+\.\d+$")
    )
    release_year = fields.Integer(required=True, validate=validate.Range(2010, 2030))
    segment = fields.String(required=True, validate=validate.OneOf(SEGMENTS))
    form_factor = fields.String(required=True, validate=validate.OneOf(FORM_FACTORS))
    memory_gb = number(1, 1024, required=True)
    memory_type = fields.String(required=True, validate=validate.OneOf(MEMORY_TYPES))
    memory_bandwidth_gb_per_s = number(10, 50000, required=True)
    fp64_tflops = _rate()
    fp32_tflops = number(0, 20000, low_inclusive=False, required=True)
    tf32_tflops = _rate()
    bf16_tflops = _rate()
    fp16_tflops = _rate()
    fp16_fp16acc_tflops = _rate()
    fp8_tflops = _rate()
    int8_tops = _rate()
    tensor_cores = fields.Integer(required=True, validate=validate.Range(0, 10000))
    sm_count = fields.Integer(required=True, validate=validate.Range(1, 1000))
    boost_clock_mhz = number(100, 5000, required=True)
    l2_cache_mb = number(0, 1024, required=True)
    ecc = fields.Boolean(required=True)
    tdp_w = number(5, 3000, required=True)
    nvlink_bandwidth_gb_per_s = number(0, 10000, required=True)
    gpu_link = fields.String(required=True, allow_none=True, validate=ID)
    pcie_generation = fields.Integer(required=True, validate=validate.Range(1, 6))
    pcie_lanes = fields.Integer(required=True, validate=validate.OneOf([1, 2, 4, 8, 16]))
    p2p_supported = fields.Boolean(required=True)
    cooling = fields.String(
        required=True, validate=validate.OneOf(["passive", "blower", "open-air", "liquid"])
    )
    datacenter_use_allowed = fields.Boolean(required=True)
    price_usd = number(0, 1_000_000, low_inclusive=False, required=True, allow_none=True)
    price_kind = fields.String(
        required=True,
        allow_none=True,
        validate=validate.OneOf(["msrp", "list", "street", "estimate"]),
    )
    price_as_of = fields.Date(required=True, allow_none=True)
    sources = _sources()
    as_of = fields.Date(required=True)
    aliases = fields.List(fields.String(validate=validate.Length(min=1)), required=True)
    notes = fields.String(load_default=None)
    nvlink_domain = fields.Integer(load_default=None, validate=validate.Range(9, 576))

    @validates_schema
    def _consistent(self, data: dict[str, Any], **_: Any) -> None:
        if data.get("nvlink_domain") and data["gpu_link"] is None:
            raise ValidationError("an NVLink domain needs the GPU's NVLink", "nvlink_domain")
        if (data["nvlink_bandwidth_gb_per_s"] > 0) != (data["gpu_link"] is not None):
            raise ValidationError(
                "gpu_link must name the link exactly when nvlink_bandwidth_gb_per_s > 0",
                "gpu_link",
            )
        if data["tensor_cores"] == 0:
            for name in ("tf32_tflops", "bf16_tflops", "fp16_fp16acc_tflops", "fp8_tflops"):
                if data[name] is not None:
                    raise ValidationError("must be null on a GPU without tensor cores", name)
        if (data["price_usd"] is None) != (data["price_as_of"] is None):
            raise ValidationError("a price needs its date, and a date its price", "price_as_of")
        if data["price_usd"] is not None and data["price_kind"] is None:
            raise ValidationError("a price needs its kind", "price_kind")
        for low, high in (("tf32_tflops", "bf16_tflops"), ("bf16_tflops", "fp8_tflops")):
            if None not in (data[low], data[high]) and data[low] > data[high]:
                raise ValidationError(f"{low} exceeds {high}: a sparse or swapped figure?", low)
        _check_fp16_accumulate(data["fp16_tflops"], data["fp16_fp16acc_tflops"])

    @post_load
    def _make(self, data: dict[str, Any], **_: Any) -> records.Gpu:
        data["sources"] = tuple(data["sources"])
        data["aliases"] = tuple(data["aliases"])
        return records.Gpu(**data)


def _check_fp16_accumulate(fp32_acc: float | None, fp16_acc: float | None) -> None:
    """FP16 accumulate runs at the FP32-accumulate rate (full-rate parts) or twice it (GeForce)."""
    if fp16_acc is None:
        return
    if fp32_acc is None:
        raise ValidationError("needs fp16_tflops (the FP32-accumulate rate)", "fp16_fp16acc_tflops")
    # 1% slack: the two figures are rounded separately (RTX 5070: 61.7 and 123.5).
    if not fp32_acc * 0.99 <= fp16_acc <= 2 * fp32_acc * 1.01:
        raise ValidationError(
            f"must lie between fp16_tflops ({fp32_acc}) and twice it: "
            "a sparse figure, or fp16_tflops is not the FP32-accumulate rate?",
            "fp16_fp16acc_tflops",
        )


class InterconnectSchema(Schema):
    id = fields.String(required=True, validate=ID)
    kind = fields.String(
        required=True,
        validate=validate.OneOf(INTERCONNECT_KINDS),
    )
    name = fields.String(required=True)
    scope = fields.String(required=True, validate=validate.OneOf(SCOPES))
    bandwidth_gb_per_s_per_direction = number(0, 10000, low_inclusive=False, required=True)
    latency_us = number(0, 1000, low_inclusive=False, required=True)
    sources = _sources()
    as_of = fields.Date(required=True)
    notes = fields.String(load_default=None)
    servers_of = fields.List(
        fields.String(validate=validate.OneOf(ARCHITECTURES)), load_default=list
    )

    @post_load
    def _make(self, data: dict[str, Any], **_: Any) -> records.Interconnect:
        data["sources"] = tuple(data["sources"])
        data["servers_of"] = tuple(data["servers_of"])
        return records.Interconnect(**data)


class OfferSchema(Schema):
    provider = fields.String(required=True, validate=ID)
    instance_type = fields.String(required=True, validate=validate.Length(min=1))
    gpu_id = fields.String(required=True, validate=ID)
    gpu_count = number(0, 1024, low_inclusive=False, required=True)
    vcpus = fields.Integer(required=True, validate=validate.Range(1, 10000))
    memory_gib = number(0, 100000, low_inclusive=False, required=True)
    interconnect = fields.String(required=True, allow_none=True, validate=ID)
    catalog_date = fields.Date(required=True)
    source = fields.String(required=True, validate=validate.Length(min=3))
    notes = fields.String(required=True, allow_none=True)

    @post_load
    def _make(self, data: dict[str, Any], **_: Any) -> records.Offer:
        return records.Offer(**data)


class OfferPriceSchema(Schema):
    provider = fields.String(required=True, validate=ID)
    instance_type = fields.String(required=True, validate=validate.Length(min=1))
    region = fields.String(required=True, validate=validate.Length(min=1))
    on_demand_usd_per_hour = number(0, 10000, low_inclusive=False, required=True)
    spot_usd_per_hour = number(0, 10000, low_inclusive=False, required=True, allow_none=True)
    reserved_usd_per_hour = number(0, 10000, low_inclusive=False, required=True, allow_none=True)
    catalog_date = fields.Date(required=True)
    source = fields.String(required=True, validate=validate.Length(min=3))


class OnpremParameterSchema(Schema):
    id = fields.String(required=True, validate=validate.Regexp(r"^[a-z0-9_.]+$"))
    value = number(0, 1e9, required=True)
    unit = fields.String(required=True, validate=validate.Length(min=1))
    description = fields.String(required=True)
    source = fields.String(required=True, validate=validate.Length(min=3))
    as_of = fields.Date(required=True)
    notes = fields.String(load_default=None)

    @post_load
    def _make(self, data: dict[str, Any], **_: Any) -> records.OnpremParameter:
        return records.OnpremParameter(**data)


class ProfileShapeSchema(Schema):
    """The step the profiler counts for a benchmark row (batch size comes from the row)."""

    seq_len = fields.Integer(validate=validate.Range(1, 1_000_000), load_default=None)
    image_size = fields.Integer(validate=validate.Range(1, 100_000), load_default=None)
    optimizer = fields.String(required=True, validate=validate.Length(min=1))
    items_per_sample = fields.Raw(required=True)
    attention = fields.String(validate=validate.OneOf(["flash", "materialized"]), load_default=None)

    @validates_schema
    def _items(self, data: dict[str, Any], **_: Any) -> None:
        items = data["items_per_sample"]
        if items != "tokens" and not (
            isinstance(items, int | float) and not isinstance(items, bool) and items > 0
        ):
            raise ValidationError("must be a positive number or 'tokens'", "items_per_sample")

    @post_load
    def _make(self, data: dict[str, Any], **_: Any) -> records.ProfileShape:
        return records.ProfileShape(**data)


class WorkloadSchema(Schema):
    id = fields.String(required=True, validate=ID)
    name = fields.String(required=True)
    kind = fields.String(
        required=True,
        validate=validate.OneOf(BENCHMARK_KINDS),
    )
    task = fields.String(
        required=True, validate=validate.OneOf(["training", "fine-tuning", "inference"])
    )
    model = fields.String(required=True, validate=ID)
    dataset = fields.String(required=True)
    unit = fields.String(required=True, validate=validate.Length(min=1))
    aliases = fields.List(fields.String(), required=True)
    description = fields.String(required=True)
    source = fields.String(required=True, validate=validate.Length(min=3))
    as_of = fields.Date(required=True)
    profile = fields.Nested(ProfileShapeSchema, load_default=None)

    @post_load
    def _make(self, data: dict[str, Any], **_: Any) -> records.Workload:
        data["aliases"] = tuple(data["aliases"])
        return records.Workload(**data)

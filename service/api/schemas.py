"""Representation schemas (what the API returns), one per kind of record.

Numeric fields carry their unit in the name and a description; list envelopes are
built from these with :func:`service.api.pagination.page_schema`.
"""

from __future__ import annotations

from marshmallow import Schema, fields


def _num(description: str, **kw: object) -> fields.Float:
    return fields.Float(metadata={"description": description}, **kw)  # type: ignore[arg-type]


def _rate(precision: str) -> fields.Float:
    return _num(
        f"dense peak {precision} rate (TFLOPS; TOPS for int8); tensor-core figure where tensor "
        "cores exist, never the sparse figure; null where unsupported",
        allow_none=True,
    )


class GpuSchema(Schema):
    id = fields.String(metadata={"description": "stable id, e.g. h100-sxm-80gb"})
    vendor = fields.String()
    name = fields.String()
    architecture = fields.String()
    compute_capability = fields.String(allow_none=True)
    release_year = fields.Integer()
    segment = fields.String(metadata={"description": "datacenter, workstation or consumer"})
    form_factor = fields.String(metadata={"description": "sxm, pcie, oam, superchip or mobile"})
    memory_gb = _num("device memory, GB as the datasheet states it")
    memory_type = fields.String()
    memory_bandwidth_gb_per_s = _num("peak device-memory bandwidth, GB/s")
    fp64_tflops = _rate("fp64")
    fp32_tflops = _num("dense peak fp32 (vector, not TF32), TFLOPS")
    tf32_tflops = _rate("tf32")
    bf16_tflops = _rate("bf16")
    fp16_tflops = _rate("fp16 (FP32 accumulate: what PyTorch's autocast runs)")
    fp16_fp16acc_tflops = _rate("fp16 with FP16 accumulate (GeForce: twice the FP32 one)")
    fp8_tflops = _rate("fp8")
    int8_tops = _rate("int8")
    precisions = fields.List(fields.String(), metadata={"description": "supported precisions"})
    tensor_cores = fields.Integer()
    sm_count = fields.Integer(metadata={"description": "SMs (AMD: compute units)"})
    boost_clock_mhz = _num("the vendor's boost clock, MHz")
    l2_cache_mb = _num("L2 cache, MB")
    ecc = fields.Boolean()
    tdp_w = _num("board power, W")
    nvlink_bandwidth_gb_per_s = _num(
        "GPU-to-GPU link bandwidth per GPU, all links, both directions, GB/s; 0 if none"
    )
    gpu_link = fields.String(allow_none=True, metadata={"description": "interconnect id"})
    pcie_generation = fields.Integer()
    pcie_lanes = fields.Integer()
    p2p_supported = fields.Boolean(metadata={"description": "GPU peer-to-peer supported"})
    cooling = fields.String()
    datacenter_use_allowed = fields.Boolean(
        metadata={"description": "the vendor's licence allows data-centre deployment"}
    )
    price_usd = _num("list, street or estimated price, USD", allow_none=True)
    price_kind = fields.String(allow_none=True)
    price_as_of = fields.Date(allow_none=True)
    sources = fields.List(fields.String())
    as_of = fields.Date()
    aliases = fields.List(fields.String())
    notes = fields.String(allow_none=True)


class GpuDetailSchema(GpuSchema):
    knowledge_version = fields.String()


class InterconnectSchema(Schema):
    id = fields.String()
    kind = fields.String()
    name = fields.String()
    scope = fields.String(metadata={"description": "intra-node, inter-node or host"})
    bandwidth_gb_per_s_per_direction = _num(
        "per GPU for GPU links, per port for network links, one direction, GB/s"
    )
    latency_us = _num("typical small-message latency, µs")
    sources = fields.List(fields.String())
    as_of = fields.Date()
    notes = fields.String(allow_none=True)
    servers_of = fields.List(
        fields.String(),
        metadata={
            "description": "GPU architectures whose reference 8-GPU servers have a port of "
            "this network per GPU: the network estimates assume between their servers"
        },
    )


class OfferPriceSchema(Schema):
    region = fields.String()
    on_demand_usd_per_hour = _num("whole instance, USD per hour")
    spot_usd_per_hour = _num("whole instance, USD per hour; null if none", allow_none=True)
    reserved_usd_per_hour = _num(
        "effective reserved rate, whole instance, USD per hour; null if unknown", allow_none=True
    )
    catalog_date = fields.Date()
    source = fields.String()


class OfferSchema(Schema):
    id = fields.String(metadata={"description": "provider:instance_type"})
    provider = fields.String()
    instance_type = fields.String()
    gpu_id = fields.String()
    gpu_count = _num("GPUs in the instance; fractional for a shared GPU")
    vcpus = fields.Integer()
    memory_gib = _num("host memory, GiB")
    interconnect = fields.String(
        allow_none=True, metadata={"description": "GPU-to-GPU link inside the instance"}
    )
    on_demand_usd_per_hour = _num("lowest on-demand price over the regions shown, USD per hour")
    on_demand_usd_per_gpu_hour = _num("the same per GPU")
    cheapest_region = fields.String()
    spot_usd_per_hour = _num("lowest spot price over the regions shown", allow_none=True)
    reserved_usd_per_hour = _num("lowest reserved price over the regions shown", allow_none=True)
    regions = fields.List(fields.String())
    prices = fields.List(fields.Nested(OfferPriceSchema))
    catalog_date = fields.Date()
    source = fields.String()
    notes = fields.String(allow_none=True)


class BenchmarkSchema(Schema):
    kind = fields.String(
        metadata={
            "description": "training-throughput, time-to-train, inference-throughput, "
            "operator-timing"
        }
    )
    suite = fields.String(metadata={"description": "e.g. lambda-v1, mlperf-training-v4.0"})
    workload = fields.String(metadata={"description": "workload id (workloads.yaml)"})
    model = fields.String(metadata={"description": "model catalog name of the workload"})
    gpu = fields.String(metadata={"description": "GPU name as the source wrote it"})
    gpu_id = fields.String(allow_none=True)
    gpu_count = fields.Integer()
    precision = fields.String(
        allow_none=True,
        metadata={
            "description": "as the source labels it: fp16 = mixed precision (AMP); "
            "fp32 = framework default, which is TF32 on Ampere and newer"
        },
    )
    batch_size_per_gpu = _num("per-GPU batch (global batch / GPUs)", allow_none=True)
    metric = fields.String(metadata={"description": "throughput, time_to_train or op_time"})
    value = _num("the measurement, in unit; throughput is summed over all GPUs")
    unit = fields.String()
    system = fields.String()
    source = fields.String()
    as_of = fields.Date()
    note = fields.String(allow_none=True)
    details = fields.Dict(
        metadata={
            "description": "columns particular to the kind; submission: the id of a submitted row"
        }
    )
    layer = fields.Function(
        lambda b: "submitted" if "submission" in b.details else "curated",
        metadata={"description": "curated (knowledge/) or submitted (POST /v1/benchmarks)"},
    )

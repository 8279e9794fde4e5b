"""The answer of ``POST /v1/recommendations`` and ``POST /v1/tco``, every field described:
clients and tool-calling agents read them by name, so none is a free-form object.

Memory is in GiB everywhere (what a GPU has and what a layout needs); bandwidths in GB/s
per direction; times in hours unless the name says seconds; money in USD.
"""

from __future__ import annotations

from marshmallow import Schema, fields


def _num(description: str, none: bool = False) -> fields.Float:
    return fields.Float(allow_none=none, metadata={"description": description})


def _int(description: str, none: bool = False) -> fields.Integer:
    return fields.Integer(allow_none=none, metadata={"description": description})


def _str(description: str, none: bool = False) -> fields.String:
    return fields.String(allow_none=none, metadata={"description": description})


def _bool(description: str) -> fields.Boolean:
    return fields.Boolean(metadata={"description": description})


class ReasonSchema(Schema):
    rule = _str("the rule's id (GET /v1/rules)")
    effect = _str("exclude, penalise, warn or advise")
    message = _str("what the rule says of this candidate")
    source = _str("where the rule's figure or claim comes from")
    as_of = _str("the source's date (ISO)")


class DeploymentSchema(Schema):
    kind = _str("cloud or on-premise")
    provider = _str("the cloud provider, or on-premise")
    instance_type = _str("the cloud instance type (null on premise)", True)
    server_design = _str(
        "on premise: workstation, pcie_4gpu, pcie_8gpu or hgx_8gpu (null in the cloud)", True
    )
    region = _str("the region whose price and grid it uses (null on premise)", True)
    pricing = _str("on_demand, spot, reserved or owned")
    instances = _int("instances (or servers) the GPUs take")
    gpus_per_instance = _int("GPUs in one instance or server")
    vcpus_per_instance = _num("the host's vCPUs in one instance or server")
    memory_gib_per_instance = _num("the host's memory in one instance or server, GiB")
    marketplace = _bool("hosts rented on a marketplace: no shared fabric, may go away")
    cluster_network = _bool("its instances can be placed on one cluster network")


class LinkSchema(Schema):
    scope = _str("inside (between the GPUs of one instance or server) or between (instances)")
    id = _str("the link's id")
    name = _str("the link, as named")
    gb_per_s = _num("bandwidth per direction, GB/s: per GPU inside, per instance between")
    rdma = _bool("GPU memory reaches it without the host's TCP stack (peer-to-peer inside)")
    source = _str("where the figure comes from")
    as_of = _str("the source's date (ISO)", True)
    notes = _str("how it was read or assumed", True)


class LayoutAnswerSchema(Schema):
    data_parallel = _int("model replicas")
    tensor_parallel = _int("GPUs each layer is split over (inside one instance)")
    pipeline_parallel = _int("pipeline stages", True)
    context_parallel = _int("GPUs each sequence is split over", True)
    zero_stage = _int("ZeRO stage (3: fully sharded)", True)
    sequence_parallel = fields.Boolean(allow_none=True)
    activation_checkpointing = _str("none, selective or full", True)
    micro_batch_size = _int("samples per micro-batch per replica", True)
    gradient_accumulation = _int("micro-batches per optimizer step", True)
    offload = _str("none, optimizer or parameters", True)
    virtual_stages = _int("interleaved pipeline chunks per stage", True)
    ends_as_layers = fields.Boolean(allow_none=True)
    weight_precision = _str("serving: the weights' precision", True)
    kv_precision = _str("serving: the KV cache's precision", True)
    batch_size = _int("serving a model without decoding: requests per batch", True)


class ServingSchema(Schema):
    time_to_first_token_s = _num("one request's prefill, s", True)
    time_per_output_token_s = _num("one decode step at the concurrency, s", True)
    inter_token_latency_s = _num(
        "between two tokens of a request, the prefills of joining requests interleaved "
        "(continuous batching), s",
        True,
    )
    concurrency = _num("sequences decoded together", True)
    max_concurrency = _num("the most sequences the KV cache holds beside the weights", True)
    requests_per_s = _num("requests a second over all replicas", True)
    batch_latency_s = _num("a batch's latency (models without decoding), s", True)


class MemoryPartsSchema(Schema):
    """What one GPU holds, GiB, by part: the parts sum to ``memory_per_gpu_gib``."""

    parameters = _num("weights (serving: at the weights' precision)")
    gradients = _num("gradients", True)
    optimizer_states = _num("optimizer states and master weights", True)
    activations = _num("activations kept for the backward pass (and their recomputation)", True)
    kv_cache = _num("the KV cache (serving and decoding)", True)
    other = _num("temporaries at the peak, gathered parameters, the CUDA context, less what "
                 "is freed before the peak")  # fmt: skip


class StepPartsSchema(Schema):
    """A training step's seconds by part (they may overlap: the step is not their sum)."""

    compute = _num("forward, backward (and recomputation) and the optimizer on the GPU")
    communication = _num("tensor-, context-, pipeline- and data-parallel traffic not hidden")
    pipeline_bubble = _num("pipeline stages waiting")
    host = _num("launching kernels and the host's own work")
    input = _num("what feeding the samples adds when the host's input rate is the ceiling")


class EstimateAnswerSchema(Schema):
    step_time_s = _num("one optimizer step (training) or one request's latency (serving), s")
    samples_per_s = _num("samples (or requests) a second over all GPUs, the host's input "
                         "ceiling applied")  # fmt: skip
    hours_per_unit = _num("wall-clock hours per unit of work (the whole job, see job)")
    unit = _str("job, or a million samples or requests when the workload has no dataset")
    bound = _str("what bounds it: compute, data_parallel_communication, input, host, ...")
    memory_per_gpu_gib = _num("memory its layout needs on each GPU, GiB", True)
    memory_headroom = _num("share of the GPU's usable memory left", True)
    mfu = _num("model FLOPs utilisation of the step (training), at the rate achieved", True)
    serving = fields.Nested(ServingSchema, allow_none=True)
    memory_gib = fields.Nested(MemoryPartsSchema, allow_none=True)
    step_parts_s = fields.Nested(StepPartsSchema, allow_none=True)


class JobTimeSchema(Schema):
    hours = _num("wall-clock hours to the result: the sum of the parts below")
    start_up_hours = _num("provisioning, boot and image, and pretrained weights downloaded")
    staging_hours = _num("the dataset copied onto the instances")
    steps_hours = _num("the training steps (or the requests served)")
    checkpoint_hours = _num("writing checkpoints (the last one included)")
    restart_hours = _num("expected time lost to interruptions: restarts and lost work")
    expected_restarts = _num("interruptions expected over the job")
    checkpoints = _int("checkpoints written")
    checkpoint_interval_hours = _num("hours between checkpoints (0: not training)")
    unit = _str("job, or a million samples or requests")


class UsageAnswerSchema(Schema):
    gpu_hours_per_month = _num("GPU-hours a month the costs assume")
    horizon_months = _int("months the horizon cost covers")


class CostAnswerSchema(Schema):
    per_unit_usd = _num("what one job (or unit of work) costs, as billed")
    usd_per_gpu_hour = _num("per GPU-hour used (whole instances paid)")
    monthly_usd = _num("what the usage costs a month")
    horizon_usd = _num("what it costs over the horizon")
    capital_usd = _num("purchase cost on premise (GPUs, servers, fabric); 0 in the cloud")
    break_even_gpu_hours_per_month = _num(
        "monthly GPU-hours above which owning beats renting, or null", True
    )
    usage = fields.Nested(UsageAnswerSchema, allow_none=True)


class EnergySchema(Schema):
    kwh = _num("energy the job draws, kWh, PUE included")
    kg_co2e = _num("the job's emissions, kg CO2e, at the region's grid intensity")
    gpu_watts = _num("each GPU's mean draw while stepping, W")
    host_watts_per_gpu = _num("the host's draw per GPU slot, W")
    pue = _num("the data centre's power usage effectiveness")
    pue_source = _str("where the PUE comes from")
    grid_g_co2e_per_kwh = _num("the grid's carbon intensity, g CO2e per kWh")
    grid_source = _str("where the grid intensity comes from")


class OfferAnswerSchema(Schema):
    offer_id = _str("provider:instance_type")
    provider = _str("the cloud provider")
    instance_type = _str("the instance type")
    region = _str("the region priced")
    catalog_date = _str("the price catalog's date")
    source = _str("the price's source")
    pricing = _str("on_demand, spot or reserved")
    gpus_per_instance = _num("GPUs in one instance")
    instances = _int("instances taken")
    usd_per_gpu_hour = _num("per GPU-hour used, whole instances paid")
    monthly_usd = _num("what the usage costs a month")
    horizon_usd = _num("over the horizon")


class RecommendedSchema(Schema):
    rank = _int("1 is the first answer")
    gpu = _str("GPU id")
    gpu_name = _str("GPU name")
    count = _int("GPUs in all")
    vram_gib = _num("one GPU's memory, GiB")
    deployment = fields.Nested(DeploymentSchema)
    links = fields.List(fields.Nested(LinkSchema), metadata={"description": "inside, between"})
    layout = fields.Nested(LayoutAnswerSchema, allow_none=True)
    estimate = fields.Nested(EstimateAnswerSchema)
    job = fields.Nested(JobTimeSchema)
    cost = fields.Nested(CostAnswerSchema)
    energy = fields.Nested(EnergySchema)
    offer = fields.Nested(OfferAnswerSchema, allow_none=True)
    score = _num("the objective's figure the ranking used (lower is better)")
    reasons = fields.List(fields.Nested(ReasonSchema))
    pareto = _bool("no other candidate is both faster and cheaper per unit of work")


class ExcludedSchema(Schema):
    gpu = _str("GPU id")
    reasons = fields.List(fields.Nested(ReasonSchema))


class AdviceSchema(ReasonSchema):
    pass


class TcoEnergySchema(Schema):
    kwh_per_month = _num("energy the usage draws a month, kWh, PUE included")
    kg_co2e_per_month = _num("its emissions a month, kg CO2e")
    kg_co2e_horizon = _num("over the horizon, kg CO2e")
    pue = _num("the data centre's PUE")
    pue_source = _str("where the PUE comes from")
    grid_g_co2e_per_kwh = _num("the grid's carbon intensity, g CO2e per kWh")
    grid_source = _str("where it comes from")


class TcoEnergiesSchema(Schema):
    on_premise = fields.Nested(TcoEnergySchema)
    cloud = fields.Nested(TcoEnergySchema, allow_none=True)


class TcoUsageSchema(Schema):
    gpu_hours_per_month = _num("GPU-hours a month across all the GPUs")
    horizon_months = _int("months")
    pattern = _str("steady or bursty")
    peak_to_average = _num("bursty: peak over mean")
    interruptible = _bool("checkpointed work that may run on spot")
    baseline_share = _num("share of the hours that is a steady baseline")


class OnPremCostSchema(Schema):
    count = _int("GPUs owned")
    capital_usd = _num("GPUs, server slots and fabric")
    monthly_fixed_usd = _num("depreciation, staff and colocation: paid busy or idle")
    energy_usd_per_gpu_hour = _num("energy per GPU-hour used")
    monthly_usd = _num("what the usage costs a month")
    horizon_usd = _num("over the horizon")
    cost_per_gpu_hour_usd = _num("per GPU-hour used")
    utilisation = _num("GPU-hours used over GPU-hours owned")


class TcoCloudSchema(OfferAnswerSchema):
    cost_per_gpu_hour_usd = _num("per GPU-hour used (the same as usd_per_gpu_hour)")


class HybridSchema(Schema):
    owned_count = _int("GPUs owned for the baseline")
    owned_gpu_hours_per_month = _num("GPU-hours a month on the owned GPUs")
    rented_gpu_hours_per_month = _num("GPU-hours a month rented")
    monthly_usd = _num("what the mix costs a month")
    horizon_usd = _num("over the horizon")
    cloud = fields.Nested(OfferAnswerSchema)
    on_premise = fields.Nested(OnPremCostSchema)


class CostParameterSchema(Schema):
    name = _str("the parameter's short name (what onprem overrides)")
    id = _str("its knowledge id")
    value = _num("its value")
    unit = _str("its unit")
    source = _str("where it comes from ('request' where overridden)")
    as_of = _str("its date (ISO), or 'request'")

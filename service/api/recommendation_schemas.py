"""The answer of ``POST /v1/recommendations`` and ``POST /v1/tco``, every field described:
clients and tool-calling agents read them by name, so none is a free-form object.

Memory is in GiB everywhere (what a GPU has and what a layout needs); bandwidths in GB/s
per direction; times in hours unless the name says seconds; money in USD.
"""

from __future__ import annotations

from marshmallow import Schema, fields

from service.api.described import flag, integer, number, text


class ReasonSchema(Schema):
    rule = text("the rule's id (GET /v1/rules)")
    effect = text("exclude, penalise, warn or advise")
    message = text("what the rule says of this candidate")
    source = text("where the rule's figure or claim comes from")
    as_of = text("the source's date (ISO)")


class DeploymentSchema(Schema):
    kind = text("cloud or on-premise")
    provider = text("the cloud provider, or on-premise")
    instance_type = text("the cloud instance type (null on premise)", True)
    server_design = text(
        "on premise: workstation, pcie_4gpu, pcie_8gpu or hgx_8gpu (null in the cloud)", True
    )
    region = text("the region whose price and grid it uses (null on premise)", True)
    pricing = text("on_demand, spot, reserved or owned")
    instances = integer("instances (or servers) the GPUs take")
    gpus_per_instance = integer("GPUs in one instance or server")
    vcpus_per_instance = number("the host's vCPUs in one instance or server")
    memory_gib_per_instance = number("the host's memory in one instance or server, GiB")
    marketplace = flag("hosts rented on a marketplace: no shared fabric, may go away")
    cluster_network = flag("its instances can be placed on one cluster network")


class LinkSchema(Schema):
    scope = text("inside (between the GPUs of one instance or server) or between (instances)")
    id = text("the link's id")
    name = text("the link, as named")
    gb_per_s = number("bandwidth per direction, GB/s: per GPU inside, per instance between")
    rdma = flag("GPU memory reaches it without the host's TCP stack (peer-to-peer inside)")
    source = text("where the figure comes from")
    as_of = text("the source's date (ISO)", True)
    notes = text("how it was read or assumed", True)


class LayoutAnswerSchema(Schema):
    data_parallel = integer("model replicas")
    tensor_parallel = integer("GPUs each layer is split over (inside one instance)")
    pipeline_parallel = integer("pipeline stages", True)
    context_parallel = integer("GPUs each sequence is split over", True)
    zero_stage = integer("ZeRO stage (3: fully sharded)", True)
    sequence_parallel = fields.Boolean(allow_none=True)
    activation_checkpointing = text("none, selective or full", True)
    micro_batch_size = integer("samples per micro-batch per replica", True)
    gradient_accumulation = integer("micro-batches per optimizer step", True)
    offload = text("none, optimizer or parameters", True)
    virtual_stages = integer("interleaved pipeline chunks per stage", True)
    ends_as_layers = fields.Boolean(allow_none=True)
    weight_precision = text("serving: the weights' precision", True)
    kv_precision = text("serving: the KV cache's precision", True)
    batch_size = integer("serving a model without decoding: requests per batch", True)


class ServingSchema(Schema):
    time_to_first_token_s = number("one request's prefill, s", True)
    time_per_output_token_s = number("one decode step at the concurrency, s", True)
    inter_token_latency_s = number(
        "between two tokens of a request, the prefills of joining requests interleaved "
        "(continuous batching), s",
        True,
    )
    concurrency = number("sequences decoded together", True)
    max_concurrency = number("the most sequences the KV cache holds beside the weights", True)
    requests_per_s = number("requests a second over all replicas", True)
    batch_latency_s = number("a batch's latency (models without decoding), s", True)


class MemoryPartsSchema(Schema):
    """What one GPU holds, GiB, by part: the parts sum to ``memory_per_gpu_gib``."""

    parameters = number("weights (serving: at the weights' precision)")
    gradients = number("gradients", True)
    optimizer_states = number("optimizer states and master weights", True)
    activations = number("activations kept for the backward pass (and their recomputation)", True)
    kv_cache = number("the KV cache (serving and decoding)", True)
    other = number("temporaries at the peak, gathered parameters, the CUDA context, less what "
                 "is freed before the peak")  # fmt: skip


class StepPartsSchema(Schema):
    """A training step's seconds by part (they may overlap: the step is not their sum)."""

    compute = number("forward, backward (and recomputation) and the optimizer on the GPU")
    communication = number("tensor-, context-, pipeline- and data-parallel traffic not hidden")
    pipeline_bubble = number("pipeline stages waiting")
    host = number("launching kernels and the host's own work")
    input = number("what feeding the samples adds when the host's input rate is the ceiling")


class EstimateAnswerSchema(Schema):
    step_time_s = number("one optimizer step (training) or one request's latency (serving), s")
    samples_per_s = number("samples (or requests) a second over all GPUs, the host's input "
                         "ceiling applied")  # fmt: skip
    hours_per_unit = number("wall-clock hours per unit of work (the whole job, see job)")
    unit = text("job, or a million samples or requests when the workload has no dataset")
    bound = text("what bounds it: compute, data_parallel_communication, input, host, ...")
    memory_per_gpu_gib = number("memory its layout needs on each GPU, GiB", True)
    memory_headroom = number("share of the GPU's usable memory left", True)
    mfu = number("model FLOPs utilisation of the step (training), at the rate achieved", True)
    serving = fields.Nested(ServingSchema, allow_none=True)
    memory_gib = fields.Nested(MemoryPartsSchema, allow_none=True)
    step_parts_s = fields.Nested(StepPartsSchema, allow_none=True)


class JobTimeSchema(Schema):
    hours = number("wall-clock hours to the result: the sum of the parts below")
    start_up_hours = number("provisioning, boot and image, and pretrained weights downloaded")
    staging_hours = number("the dataset copied onto the instances")
    steps_hours = number("the training steps (or the requests served)")
    checkpoint_hours = number("writing checkpoints (the last one included)")
    restart_hours = number("expected time lost to interruptions: restarts and lost work")
    expected_restarts = number("interruptions expected over the job")
    checkpoints = integer("checkpoints written")
    checkpoint_interval_hours = number("hours between checkpoints (0: not training)")
    unit = text("job, or a million samples or requests")


class UsageAnswerSchema(Schema):
    gpu_hours_per_month = number("GPU-hours a month the costs assume")
    horizon_months = integer("months the horizon cost covers")


class CostAnswerSchema(Schema):
    per_unit_usd = number("what one job (or unit of work) costs, as billed")
    usd_per_gpu_hour = number("per GPU-hour used (whole instances paid)")
    monthly_usd = number("what the usage costs a month")
    horizon_usd = number("what it costs over the horizon")
    capital_usd = number("purchase cost on premise (GPUs, servers, fabric); 0 in the cloud")
    break_even_gpu_hours_per_month = number(
        "monthly GPU-hours above which owning beats renting, or null", True
    )
    usage = fields.Nested(UsageAnswerSchema, allow_none=True)


class EnergySchema(Schema):
    kwh = number("energy the job draws, kWh, PUE included")
    kg_co2e = number("the job's emissions, kg CO2e, at the region's grid intensity")
    gpu_watts = number("each GPU's mean draw while stepping, W")
    host_watts_per_gpu = number("the host's draw per GPU slot, W")
    pue = number("the data centre's power usage effectiveness")
    pue_source = text("where the PUE comes from")
    grid_g_co2e_per_kwh = number("the grid's carbon intensity, g CO2e per kWh")
    grid_source = text("where the grid intensity comes from")


class OfferAnswerSchema(Schema):
    offer_id = text("provider:instance_type")
    provider = text("the cloud provider")
    instance_type = text("the instance type")
    region = text("the region priced")
    catalog_date = text("the price catalog's date")
    source = text("the price's source")
    pricing = text("on_demand, spot or reserved")
    gpus_per_instance = number("GPUs in one instance")
    instances = integer("instances taken")
    usd_per_gpu_hour = number("per GPU-hour used, whole instances paid")
    monthly_usd = number("what the usage costs a month")
    horizon_usd = number("over the horizon")


class RecommendedSchema(Schema):
    rank = integer("1 is the first answer")
    gpu = text("GPU id")
    gpu_name = text("GPU name")
    count = integer("GPUs in all")
    vram_gib = number("one GPU's memory, GiB")
    deployment = fields.Nested(DeploymentSchema)
    links = fields.List(fields.Nested(LinkSchema), metadata={"description": "inside, between"})
    layout = fields.Nested(LayoutAnswerSchema, allow_none=True)
    estimate = fields.Nested(EstimateAnswerSchema)
    job = fields.Nested(JobTimeSchema)
    cost = fields.Nested(CostAnswerSchema)
    energy = fields.Nested(EnergySchema)
    offer = fields.Nested(OfferAnswerSchema, allow_none=True)
    score = number("the objective's figure the ranking used (lower is better)")
    reasons = fields.List(fields.Nested(ReasonSchema))
    pareto = flag("no other candidate is both faster and cheaper per unit of work")


class ExcludedSchema(Schema):
    gpu = text("GPU id")
    reasons = fields.List(fields.Nested(ReasonSchema))


class AdviceSchema(ReasonSchema):
    pass


class TcoEnergySchema(Schema):
    kwh_per_month = number("energy the usage draws a month, kWh, PUE included")
    kg_co2e_per_month = number("its emissions a month, kg CO2e")
    kg_co2e_horizon = number("over the horizon, kg CO2e")
    pue = number("the data centre's PUE")
    pue_source = text("where the PUE comes from")
    grid_g_co2e_per_kwh = number("the grid's carbon intensity, g CO2e per kWh")
    grid_source = text("where it comes from")


class TcoEnergiesSchema(Schema):
    on_premise = fields.Nested(TcoEnergySchema)
    cloud = fields.Nested(TcoEnergySchema, allow_none=True)


class TcoUsageSchema(Schema):
    gpu_hours_per_month = number("GPU-hours a month across all the GPUs")
    horizon_months = integer("months")
    pattern = text("steady or bursty")
    peak_to_average = number("bursty: peak over mean")
    interruptible = flag("checkpointed work that may run on spot")
    baseline_share = number("share of the hours that is a steady baseline")


class OnPremCostSchema(Schema):
    count = integer("GPUs owned")
    capital_usd = number("GPUs, server slots and fabric")
    monthly_fixed_usd = number("depreciation, staff and colocation: paid busy or idle")
    energy_usd_per_gpu_hour = number("energy per GPU-hour used")
    monthly_usd = number("what the usage costs a month")
    horizon_usd = number("over the horizon")
    cost_per_gpu_hour_usd = number("per GPU-hour used")
    utilisation = number("GPU-hours used over GPU-hours owned")


class TcoCloudSchema(OfferAnswerSchema):
    cost_per_gpu_hour_usd = number("per GPU-hour used (the same as usd_per_gpu_hour)")


class HybridSchema(Schema):
    owned_count = integer("GPUs owned for the baseline")
    owned_gpu_hours_per_month = number("GPU-hours a month on the owned GPUs")
    rented_gpu_hours_per_month = number("GPU-hours a month rented")
    monthly_usd = number("what the mix costs a month")
    horizon_usd = number("over the horizon")
    cloud = fields.Nested(OfferAnswerSchema)
    on_premise = fields.Nested(OnPremCostSchema)


class CostParameterSchema(Schema):
    name = text("the parameter's short name (what onprem overrides)")
    id = text("its knowledge id")
    value = number("its value")
    unit = text("its unit")
    source = text("where it comes from ('request' where overridden)")
    as_of = text("its date (ISO), or 'request'")

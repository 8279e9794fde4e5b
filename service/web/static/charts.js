// The answer's charts: time against cost (Pareto front), memory by part against VRAM,
// the step by part (or serving latencies), a trace's projected step per GPU, and owning
// against renting over the horizon.

import { candidateLabel, duration, num, seconds, svg, usd } from "./dom.js";
import {
  COLOURS, WIDTH, emptyFigure, figure, fitted, hbars, legend, linear, xAxis, yAxis,
} from "./svg.js";

const MEMORY_PARTS = [
  ["parameters", "parameters"], ["gradients", "gradients"],
  ["optimizer_states", "optimizer states"], ["activations", "activations"],
  ["kv_cache", "KV cache"], ["other", "other"],
];
const STEP_PARTS = [
  ["compute", "compute"], ["communication", "communication"],
  ["pipeline_bubble", "pipeline bubble"], ["host", "host"], ["input", "input"],
];
const keyed = (parts) => parts.map(([key, label], i) => ({ key, label, colour: COLOURS[i] }));

function per(rec) {
  const unit = rec.job?.unit || rec.estimate?.unit || "job";
  return unit === "job" ? "per job" : `per ${unit}`;
}

/** (a) Job time against cost per job, every candidate; the Pareto front joined. */
export function timeCost(recs, total) {
  const title = "Time against cost";
  const points = recs.filter((r) => r.job?.hours > 0 && r.cost?.per_unit_usd >= 0);
  if (!points.length) return emptyFigure("time-cost", title, "No candidate to place.");
  const front = points.filter((r) => r.pareto).sort((a, b) => a.job.hours - b.job.hours);
  const desc = `Job time (across) against cost ${per(points[0])} (up) for ${points.length} `
    + `candidates. On the Pareto front, where no other candidate is both faster and cheaper: `
    + `${front.map((r) => candidateLabel(r)).join("; ") || "none"}.`;
  const height = 330;
  const { box, root } = figure("time-cost", title, desc, height, [
    "Filled points are on the Pareto front; the line joins them. Numbers are ranks.",
    front.length ? "" : `None of these is on the Pareto front of all ${total ?? "the"} `
      + "candidates: those on it rank lower on the objective and are not shown.",
  ]);
  const [left, right, top, bottom] = [78, WIDTH - 20, 34, height - 50];
  const x = fitted(points.map((r) => r.job.hours), left, right);
  const y = fitted(points.map((r) => r.cost.per_unit_usd), bottom, top);
  yAxis(root, y, left, right, `cost ${per(points[0])}, USD`, usd);
  xAxis(root, x, bottom, `time ${per(points[0])}`, duration);
  if (front.length > 1) {
    const d = front.map((r, i) => `${i ? "L" : "M"}${x(r.job.hours)} ${y(r.cost.per_unit_usd)}`);
    root.append(svg("path", { d: d.join(""), class: "front" }));
  }
  for (const rec of [...points].reverse()) {
    const [cx, cy] = [x(rec.job.hours), y(rec.cost.per_unit_usd)];
    root.append(svg("circle", { cx, cy, r: 6, class: rec.pareto ? "point pareto" : "point" },
      svg("title", { text: `${candidateLabel(rec)}: ${duration(rec.job.hours)}, `
        + `${usd(rec.cost.per_unit_usd)} ${per(rec)}${rec.pareto ? " (Pareto front)" : ""}` })),
    svg("text", { x: cx + 8, y: cy - 7, class: "point-label", text: String(rec.rank) }));
  }
  legend(root, left + 8, 20, [
    { label: "Pareto front", shape: "dot" },
    { label: "other candidates", shape: "dot", hollow: true },
  ]);
  return box;
}

/** (b) Memory each GPU needs, by part, against its VRAM. */
export function memory(recs) {
  const title = "Memory per GPU against VRAM";
  const rows = recs.filter((r) => r.estimate?.memory_gib);
  if (!rows.length) {
    return emptyFigure("memory", title, "The answer gives no memory by part (a trace's is not "
      + "counted).");
  }
  const keys = keyed(MEMORY_PARTS);
  const negative = rows.some((r) => (r.estimate.memory_gib.other || 0) < 0);
  const desc = rows.map((r) => `${candidateLabel(r)}: needs ${num(r.estimate.memory_per_gpu_gib)}`
    + ` GiB of ${num(r.vram_gib)} GiB`).join("; ");
  const { box, root } = figure("memory", title, `Stacked bars of memory by part; the tick is `
    + `the GPU's VRAM. ${desc}.`, 60 + rows.length * 30 + 44, [
    "Bars: memory needed per GPU by part, GiB. Tick: the GPU's memory (VRAM).",
    negative ? "Memory freed before the peak is left out of the bars: they may exceed the "
      + "peak, which the table gives." : "",
  ]);
  legend(root, 10, 20, keys);
  hbars(root, {
    top: 36, stacked: true, keys, unit: "GiB per GPU",
    rows: rows.map((r) => ({
      label: candidateLabel(r),
      segments: keys.map((k) => ({
        key: k.key, value: r.estimate.memory_gib[k.key] || 0,
        title: `${candidateLabel(r)}: ${k.label} ${num(r.estimate.memory_gib[k.key])} GiB`,
      })),
      markers: [{ value: r.vram_gib, title: `${r.gpu_name}: ${num(r.vram_gib)} GiB of VRAM` }],
      note: `${num(r.estimate.memory_per_gpu_gib)} of ${num(r.vram_gib)} GiB`,
    })),
  });
  return box;
}

/** (c) The step by part (training), or the serving latencies, per candidate. */
export function step(recs) {
  const title = "The step, by part";
  const trained = recs.filter((r) => r.estimate?.step_parts_s);
  if (trained.length) {
    const keys = keyed(STEP_PARTS);
    const { box, root } = figure("step", title, "Stacked bars of each candidate's step time "
      + "by part, ms; the tick is the step (parts may overlap). "
      + trained.map((r) => `${candidateLabel(r)}: ${seconds(r.estimate.step_time_s)}`).join("; "),
    60 + trained.length * 30 + 44, ["Bars: the step's parts, ms. Tick: the step time "
      + "(communication may overlap compute, so the step is not always their sum)."]);
    legend(root, 10, 20, keys);
    hbars(root, {
      top: 36, stacked: true, keys, unit: "ms per step",
      rows: trained.map((r) => ({
        label: candidateLabel(r),
        segments: keys.map((k) => ({
          key: k.key, value: (r.estimate.step_parts_s[k.key] || 0) * 1000,
          title: `${candidateLabel(r)}: ${k.label} ${seconds(r.estimate.step_parts_s[k.key])}`,
        })),
        markers: [{ value: r.estimate.step_time_s * 1000,
          title: `step ${seconds(r.estimate.step_time_s)}` }],
      })),
    });
    return box;
  }
  const served = recs.filter((r) => r.estimate?.serving);
  if (!served.length) {
    return emptyFigure("step", title, "The answer gives no step by part (a trace's step is "
      + "projected below).");
  }
  const keys = [
    { key: "ttft", label: "time to first token", colour: COLOURS[0] },
    { key: "tpot", label: "time per output token", colour: COLOURS[1] },
  ];
  const { box, root } = figure("step", "Serving latency", "Time to first token and time per "
    + "output token, ms, per candidate. " + served.map((r) => `${candidateLabel(r)}: `
    + `${seconds(r.estimate.serving.time_to_first_token_s)} to the first token, `
    + `${seconds(r.estimate.serving.time_per_output_token_s)} per token`).join("; "),
  60 + served.length * 30 + 44, ["Serving: each candidate's prefill (time to first token) "
    + "and decode step (time per output token) at its concurrency."]);
  legend(root, 10, 20, keys);
  hbars(root, {
    top: 36, stacked: false, keys, unit: "ms",
    rows: served.map((r) => ({
      label: candidateLabel(r),
      segments: [
        { key: "ttft", value: (r.estimate.serving.time_to_first_token_s || 0) * 1000,
          title: `first token ${seconds(r.estimate.serving.time_to_first_token_s)}` },
        { key: "tpot", value: (r.estimate.serving.time_per_output_token_s || 0) * 1000,
          title: `per output token ${seconds(r.estimate.serving.time_per_output_token_s)}` },
      ],
    })),
  });
  return box;
}

/** (d) A trace's step projected onto each candidate GPU (POST /v1/traces/{id}/projections). */
export function projections(answer) {
  const title = "The traced step, projected per GPU";
  const items = [...(answer?.projections || [])].sort((a, b) => a.step_time_us - b.step_time_us);
  if (!items.length) return emptyFigure("trace", title, "No projection came back.");
  const ref = answer.reference_gpu_id;
  const keys = [
    { key: "projected", label: "projected step", colour: COLOURS[0] },
    { key: "traced", label: `traced on ${ref}`, colour: COLOURS[1] },
  ];
  const desc = items.map((p) => `${p.gpu_id}: ${num(p.step_time_us / 1000)} ms`
    + (p.speedup ? ` (${num(p.speedup)}× the traced step)` : "")).join("; ");
  const { box, root } = figure("trace", title, `Projected step time per GPU, ms; the tick is `
    + `the traced step on ${ref}. ${desc}.`, 60 + items.length * 30 + 44,
  ["Each part of the traced step scaled by what bounds it on the target; idle time is not."]);
  legend(root, 10, 20, keys);
  hbars(root, {
    top: 36, stacked: true, keys, unit: "ms per step",
    rows: items.map((p) => ({
      label: p.gpu_id,
      segments: [{ key: p.gpu_id === ref ? "traced" : "projected", value: p.step_time_us / 1000,
        title: `${p.gpu_id}: ${num(p.step_time_us / 1000)} ms, bound by ${p.bound}` }],
      markers: [{ value: answer.reference_step_time_us / 1000,
        title: `traced step ${num(answer.reference_step_time_us / 1000)} ms on ${ref}` }],
    })),
  });
  return box;
}

/**
 * (e) Owning against renting: cumulative spending by month. On premise the capital is paid
 * at month 0 and then the running costs (the monthly cost less its depreciation); in the
 * cloud each month's bill. Break-even: where the lines cross.
 */
export function ownVsRent(tco, assumed) {
  const title = "Owning against renting";
  const months = tco.usage.horizon_months;
  const own = tco.on_premise;
  const years = tco.parameters?.find((p) => p.name === "depreciation_years")?.value;
  const depreciation = years ? own.capital_usd / (12 * years) : 0;
  const running = Math.max(0, own.monthly_usd - depreciation);
  const rent = tco.cloud?.monthly_usd;
  const owned = (m) => own.capital_usd + running * m;
  const rented = (m) => rent * m;
  const crossing = rent > running ? own.capital_usd / (rent - running) : null;
  const even = crossing !== null && crossing <= months ? crossing : null;
  const gpu = `${tco.count} × ${tco.gpu}`;
  const usage = `${num(tco.usage.gpu_hours_per_month)} GPU-hours a month`;
  const verdict = rent === undefined ? "No cloud offer matched this GPU and count."
    : even !== null ? `Owning breaks even after ${num(even)} months.`
      : `Owning does not break even within ${months} months.`;
  const desc = `Cumulative cost over ${months} months of ${gpu} at ${usage}: on premise `
    + `${usd(owned(months))} (capital ${usd(own.capital_usd)}), in the cloud `
    + `${rent === undefined ? "not offered" : usd(rented(months))}. ${verdict}`;
  const hours = tco.break_even_gpu_hours_per_month;
  const height = 330;
  const { box, root } = figure("tco", title, desc, height, [
    `${gpu}, ${usage} over ${months} months${assumed ? ` (${assumed})` : ""}. ${verdict}`,
    hours ? `Owning beats renting above ${num(hours)} GPU-hours a month.` : "",
    tco.cloud ? `Cloud: ${tco.cloud.provider} ${tco.cloud.instance_type} (${tco.cloud.region}, `
      + `${tco.cloud.pricing.replace("_", "-")}).` : "",
  ]);
  const [left, right, top, bottom] = [84, WIDTH - 20, 34, height - 50];
  const x = linear(0, months, left, right, 6, true);
  const y = linear(0, Math.max(owned(months), rent ? rented(months) : 0), bottom, top);
  yAxis(root, y, left, right, "cumulative cost, USD", usd);
  xAxis(root, x, bottom, "months", num);
  const line = (f, cls, label) => {
    const d = [];
    for (let m = 0; m <= months; m++) d.push(`${m ? "L" : "M"}${x(m)} ${y(f(m))}`);
    root.append(svg("path", { d: d.join(""), class: cls }, svg("title", { text: label })));
  };
  line(owned, "line own", `on premise: ${usd(owned(months))} over ${months} months`);
  if (rent !== undefined) {
    line(rented, "line rent", `cloud: ${usd(rented(months))} over ${months} months`);
  }
  if (even !== null) {
    const [cx, cy] = [x(even), y(owned(even))];
    root.append(svg("circle", { cx, cy, r: 7, class: "even" },
      svg("title", { text: `break-even after ${num(even)} months, ${usd(owned(even))}` })),
    svg("text", { x: cx + (cx > WIDTH - 200 ? -10 : 10), y: cy + 20, class: "point-label",
      "text-anchor": cx > WIDTH - 200 ? "end" : "start",
      text: `break-even: month ${num(even)}` }));
  }
  legend(root, left + 8, 20, [
    { label: "on premise (capital, then running costs)", colour: COLOURS[5], shape: "line" },
    { label: "cloud", colour: COLOURS[0], shape: "line", dashed: true },
  ]);
  return box;
}

// The ranked answer as text: the table, why the first won, the software advice, the
// excluded GPUs, the summary, the assumptions, and the links to share and export it.

import { apiUrl } from "./api.js";
import { el, duration, linked, num, replace, usd } from "./dom.js";

function reasonItem(reason) {
  return el("li", { class: `reason ${reason.effect || ""}` },
    el("code", {}, reason.rule), " ", reason.message,
    reason.source ? el("span", { class: "source" }, " (", linked(reason.source),
      reason.as_of ? `, ${reason.as_of}` : "", ")") : null);
}

function deployment(rec) {
  const d = rec.deployment || {};
  const pricing = (d.pricing || "").replace("_", "-");
  const scale = `${d.instances} × ${d.gpus_per_instance} GPU${d.gpus_per_instance > 1 ? "s" : ""}`;
  if (d.kind === "cloud") {
    return [el("strong", {}, d.provider), " ", d.instance_type, el("br"),
      el("span", { class: "small" }, `${scale}, ${d.region}, ${pricing}`)];
  }
  const design = (d.server_design || "server").replaceAll("_", " ");
  return [el("strong", {}, "on-premise"), " ", design, el("br"),
    el("span", { class: "small" }, `${d.instances} server${d.instances > 1 ? "s" : ""} × `
      + `${d.gpus_per_instance} GPUs, owned`)];
}

function fit(rec) {
  const need = rec.estimate?.memory_per_gpu_gib;
  if (need === null || need === undefined) return "–";
  const share = rec.vram_gib ? need / rec.vram_gib : null;
  return [`${num(need)} / ${num(rec.vram_gib)}`,
    share !== null ? el("br") : null,
    share !== null ? el("span", { class: "small" }, `${num(share * 100)}% used`) : null];
}

function shortName(rec) {
  return (rec.gpu_name || rec.gpu).replace(/^(NVIDIA|AMD|Intel) /, "");
}

function row(rec) {
  const reasons = rec.reasons || [];
  return el("tr", { class: rec.pareto ? "pareto" : null },
    el("td", {}, String(rec.rank),
      rec.pareto ? el("span", { class: "badge", title: "on the Pareto front: no other "
        + "candidate is both faster and cheaper" }, "Pareto") : null),
    el("td", { class: "deployment" }, deployment(rec)),
    el("th", { scope: "row", class: "gpu" }, shortName(rec), el("br"),
      el("span", { class: "small" }, rec.gpu)),
    el("td", { class: "n" }, String(rec.count)),
    el("td", { class: "n" }, duration(rec.job?.hours)),
    el("td", { class: "n" }, usd(rec.cost?.per_unit_usd)),
    el("td", { class: "n" }, usd(rec.cost?.monthly_usd),
      rec.cost?.capital_usd ? [el("br"), el("span", { class: "small" },
        `capital ${usd(rec.cost.capital_usd)}`)] : null),
    el("td", { class: "n" }, `${num(rec.energy?.kwh)} kWh`, el("br"),
      el("span", { class: "small" }, `${num(rec.energy?.kg_co2e)} kg`)),
    el("td", { class: "n" }, fit(rec)),
    el("td", { class: "reasons-cell" }, reasons.length
      ? el("details", {}, el("summary", {}, `${reasons.length} reason`
        + `${reasons.length > 1 ? "s" : ""}`), el("ul", { class: "reasons" },
        reasons.map(reasonItem)))
      : "–"),
  );
}

/** Fill the answer's text parts; `root` is the page's #answer. */
export function renderAnswer(root, answer) {
  const recs = answer.recommendations || [];
  const id = encodeURIComponent(answer.id);
  const share = root.querySelector("#share-link");
  share.href = `${document.body.dataset.root || "/"}?id=${id}`;
  root.querySelector("#csv-link").href = apiUrl(`/recommendations/${id}/export.csv`);
  root.querySelector("#quote-link").href = apiUrl(`/recommendations/${id}/quote`);
  root.querySelector("#why-first").textContent = answer.why_first
    || (recs.length ? "" : "No candidate met the constraints: see the excluded GPUs below.");
  root.querySelector("#table-caption").textContent = `${recs.length} of `
    + `${answer.candidates_total ?? recs.length} candidates, ranked by `
    + `${(answer.objective || "").replace("_", " ")}`;
  const unit = recs[0]?.job?.unit || "job";
  root.querySelector("#col-time").textContent = unit === "job" ? "Job time" : `Time per ${unit}`;
  root.querySelector("#col-cost").textContent = `Cost per ${unit}`;
  replace(root.querySelector("#ranked tbody"), recs.map(row));
  const advice = answer.advice || [];
  replace(root.querySelector("#advice"),
    advice.length ? advice.map(reasonItem) : el("li", {}, "None."));
  const excluded = answer.excluded || [];
  const rules = new Map();
  for (const x of excluded) {
    for (const r of x.reasons || []) rules.set(r.rule, (rules.get(r.rule) || 0) + 1);
  }
  root.querySelector("#excluded-count").textContent = excluded.length
    ? `${excluded.length} GPU${excluded.length > 1 ? "s" : ""} excluded, by `
      + [...rules].map(([rule, n]) => `${rule} (${n})`).join(", ")
    : "None.";
  replace(root.querySelector("#excluded"), excluded.map((x) => el("li", {},
    el("strong", {}, x.gpu), el("ul", { class: "reasons" }, (x.reasons || []).map(reasonItem)))));
  root.querySelector("#summary").textContent = answer.summary || "";
  replace(root.querySelector("#assumptions"),
    (answer.assumptions || []).map((a) => el("li", {}, a)),
    el("li", {}, `Knowledge ${answer.knowledge_version}, rules ${answer.rules_version}, `
      + `answered ${answer.created_at}.`));
  root.hidden = false;
}

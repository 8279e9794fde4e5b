// The page: ask for a recommendation (from the form, a pasted config or a trace), show
// it with its charts, and make it shareable at /?id=<recommendation id>.

import { ApiProblem, apiKey, call, pollJob, setApiKey } from "./api.js";
import * as charts from "./charts.js";
import { candidateLabel, duration, el, replace, usd } from "./dom.js";
import { clearErrors, showProblem } from "./errors.js";
import {
  LocalProblem, fill, modelSearch, readInto, requestBody, source, stackChoices, syncVisibility,
} from "./form.js";
import { renderAnswer } from "./results.js";
import { emptyFigure } from "./svg.js";

const HOURS_PER_MONTH = 730; // the engine's month (service/engine/cost.py)
const DEFAULT_BUSY_SHARE = 0.5; // where no usage is given: the GPUs busy half the time

const form = document.getElementById("ask");
const general = document.getElementById("general-error");
const results = document.getElementById("results");
const status = document.getElementById("status");
const answerBox = document.getElementById("answer");
const chartsBox = document.getElementById("charts");
const submitButton = document.getElementById("submit");
const traceFile = document.getElementById("trace-file");
const traceStored = document.getElementById("trace-stored");
let running = null;
let storedTrace = null;
let stackList = null;

function say(text, state) {
  status.textContent = text;
  results.dataset.state = state;
  results.setAttribute("aria-busy", String(state === "loading"));
}

function keepTrace(traceId) {
  storedTrace = traceId;
  traceStored.hidden = !traceId;
  traceStored.textContent = traceId
    ? `Using the stored trace ${traceId}; choose a file to upload another.` : "";
}

/** The trace to recommend from: the chosen file uploaded (a 202 followed), or the stored one. */
async function traceId(signal) {
  const file = traceFile.files?.[0];
  if (!file) {
    if (storedTrace) return storedTrace;
    throw new LocalProblem("trace_id", "choose a trace file to upload");
  }
  if (!apiKey()) {
    throw new LocalProblem("api_key", "uploading a trace needs an API key with the write role");
  }
  const upload = new FormData();
  upload.append("file", file);
  say(`Uploading ${file.name}…`, "loading");
  const sent = await call("POST", "/traces", { form: upload, signal });
  if (sent.status !== 202) return sent.body.trace_id;
  const job = await pollJob(sent.body.job_url || sent.location, {
    signal, onProgress: (step) => say(`Analysing the trace: ${step}…`, "loading"),
  });
  return job.trace_id;
}

/** The usage to cost owning against renting, and what was assumed where none was given. */
function tcoUsage(asked, first) {
  const { runs_per_month: runs, ...usage } = asked || {};
  const most = first.count * HOURS_PER_MONTH;
  if (usage.gpu_hours_per_month !== undefined || runs !== undefined) {
    const hours = first.cost?.usage?.gpu_hours_per_month ?? usage.gpu_hours_per_month;
    return { usage: { ...usage, gpu_hours_per_month: Math.min(hours, most) }, assumed: null };
  }
  const hours = most * DEFAULT_BUSY_SHARE;
  return {
    usage: { ...usage, gpu_hours_per_month: hours },
    assumed: `no usage was given: assumed the GPUs busy half of every hour, ${hours} GPU-hours `
      + "a month",
  };
}

async function ownVsRent(answer, signal) {
  const first = answer.recommendations?.[0];
  if (!first) return emptyFigure("tco", "Owning against renting", "No candidate to cost.");
  const asked = answer.request || {};
  const { usage, assumed } = tcoUsage(asked.usage, first);
  const body = { gpu: first.gpu, count: first.count, usage };
  for (const name of ["providers", "regions"]) {
    if (asked.constraints?.[name]?.length) body[name] = asked.constraints[name];
  }
  if (asked.onprem) body.onprem = asked.onprem;
  try {
    return charts.ownVsRent((await call("POST", "/tco", { json: body, signal })).body, assumed);
  } catch (error) {
    if (signal.aborted) throw error;
    return emptyFigure("tco", "Owning against renting", `No cost comparison: ${error.message}`);
  }
}

async function projected(answer, signal) {
  const title = "The traced step, projected per GPU";
  const gpus = [...new Set((answer.recommendations || []).map((r) => r.gpu))].slice(0, 100);
  if (!gpus.length) return emptyFigure("trace", title, "No candidate GPU to project onto.");
  const path = `/traces/${encodeURIComponent(answer.request.trace_id)}/projections`;
  try {
    const json = { gpus, count: answer.request.count || 1 };
    return charts.projections((await call("POST", path, { json, signal })).body);
  } catch (error) {
    if (signal.aborted) throw error;
    return emptyFigure("trace", title, `No projection: ${error.message}`);
  }
}

/** Show an answer: the text at once (announced), then the charts that need more calls. */
async function show(answer, signal) {
  const recs = answer.recommendations || [];
  renderAnswer(answerBox, answer);
  const later = [];
  if (answer.request?.trace_id) later.push(projected(answer, signal));
  later.push(ownVsRent(answer, signal));
  const waiting = later.map(() => el("p", { class: "chart-wait" }, "Drawing…"));
  replace(chartsBox, charts.timeCost(recs, answer.candidates_total), charts.memory(recs),
    charts.step(recs), waiting);
  delete chartsBox.dataset.ready;
  const first = recs[0];
  say(first
    ? `${recs.length} candidates. First: ${candidateLabel(first)}, `
      + `${duration(first.job?.hours)} and ${usd(first.cost?.per_unit_usd)} per `
      + `${first.job?.unit || "job"}.`
    : "No candidate met the constraints; the excluded GPUs say why.", "ready");
  const drawn = await Promise.all(later);
  drawn.forEach((figure, i) => waiting[i].replaceWith(figure));
  chartsBox.dataset.ready = "true";
}

function failed(error) {
  if (error?.name === "AbortError") return;
  if (error instanceof ApiProblem || error instanceof LocalProblem) {
    const first = showProblem(form, general, error, source(form));
    say(error instanceof LocalProblem ? "Not sent: see the message next to the field."
      : `The service could not answer (${error.status}): see the messages.`, "error");
    first?.focus();
    return;
  }
  showProblem(form, general, { message: `The request failed: ${error?.message || error}` });
  say("The request failed.", "error");
}

async function ask() {
  running?.abort();
  const controller = new AbortController();
  running = controller;
  const { signal } = controller;
  clearErrors(form, general);
  submitButton.disabled = true;
  try {
    const body = requestBody(form);
    if (source(form) === "trace") {
      body.trace_id = await traceId(signal);
      keepTrace(body.trace_id);
    }
    say("Working out the answer…", "loading");
    const { body: answer } = await call("POST", "/recommendations", { json: body, signal });
    history.replaceState(null, "", `?id=${encodeURIComponent(answer.id)}`);
    await show(answer, signal);
  } catch (error) {
    failed(error);
  } finally {
    if (running === controller) submitButton.disabled = false;
  }
}

async function load(id) {
  const controller = new AbortController();
  running = controller;
  say("Loading the shared answer…", "loading");
  try {
    const { body: answer } = await call("GET", `/recommendations/${encodeURIComponent(id)}`,
      { signal: controller.signal });
    if (fill(form, answer.request || {}) === "trace") keepTrace(answer.request.trace_id);
    stackList?.want(answer.request?.stack);
    await show(answer, controller.signal);
  } catch (error) {
    failed(error);
  }
}

function start() {
  syncVisibility(form);
  form.addEventListener("change", (event) => {
    if (event.target.name === "source" || event.target.name === "workload.task") {
      syncVisibility(form);
    }
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    ask();
  });
  modelSearch(document.getElementById("model-name"), document.getElementById("model-list"),
    document.getElementById("model-name-hint"));
  stackList = stackChoices(document.getElementById("stack"), form.elements["workload.task"],
    document.getElementById("stack-hint"));
  readInto(document.getElementById("model-file"), document.getElementById("model-json"),
    (message) => showProblem(form, general, new LocalProblem("model", message), "json"));
  const key = document.getElementById("api-key");
  key.value = apiKey();
  key.addEventListener("input", () => setApiKey(key.value.trim()));
  const id = new URLSearchParams(window.location.search).get("id");
  if (id) load(id);
}

start();

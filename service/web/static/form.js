// The form: what it asks, read into a POST /v1/recommendations body, and filled back
// from a stored answer's `request`. Fields are named by the API's dotted paths
// (workload.batch_size), so an error's `field` finds its control by name.

import { call } from "./api.js";
import { el, num, replace } from "./dom.js";

const INTEGER = new Set([
  "workload.batch_size", "workload.seq_len", "workload.image_size", "workload.prompt_tokens",
  "workload.output_tokens", "workload.dataset_samples", "workload.dataset_tokens",
  "usage.horizon_months", "constraints.max_gpus", "count",
]);
const LISTS = new Set(["constraints.providers", "constraints.regions"]);

export class LocalProblem extends Error {
  /** A fault found before anything is sent: `field` as the API would name it. */
  constructor(field, message) {
    super(message);
    this.field = field;
  }
}

export function source(form) {
  return form.elements.source.value || "catalog";
}

function set(target, dotted, value) {
  const parts = dotted.split(".");
  let node = target;
  for (const part of parts.slice(0, -1)) node = node[part] ??= {};
  node[parts.at(-1)] = value;
}

function shown(control) {
  return !control.closest("[hidden]") && !control.disabled;
}

function value(control) {
  if (control.validity?.badInput) throw new LocalProblem(control.name, "not a number");
  const text = control.value.trim();
  if (text === "") return undefined;
  if (LISTS.has(control.name)) {
    const items = text.split(",").map((s) => s.trim()).filter(Boolean);
    return items.length ? items : undefined;
  }
  if (control.type === "number") {
    // 32.5 for a whole number is sent as it is: the API's message names the field
    const n = Number(text);
    return INTEGER.has(control.name) && Number.isInteger(n) ? Math.trunc(n) : n;
  }
  return text;
}

/** The JSON model of the text area: an object, sent as is (a config.json unwrapped). */
export function pastedModel(form) {
  const text = form.elements.model.value.trim();
  if (!text) throw new LocalProblem("model", "paste a config.json or a model description");
  let parsed;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw new LocalProblem("model", `not valid JSON: ${error.message}`);
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
    throw new LocalProblem("model", "must be a JSON object");
  }
  return parsed;
}

/** The request body the form describes (without a trace's id: main.js adds it). */
export function requestBody(form) {
  const body = {};
  const from = source(form);
  for (const control of form.elements) {
    const name = control.name;
    if (!name || name === "source" || name === "model" || !shown(control)) continue;
    if (name === "model.name") continue;
    if (from === "trace" && name.startsWith("workload.")) continue;
    const given = value(control);
    if (given !== undefined) set(body, name, given);
  }
  if (from === "catalog") {
    const name = form.elements["model.name"].value.trim();
    if (!name) throw new LocalProblem("model", "choose a model from the catalog");
    body.model = { name };
  } else if (from === "json") {
    body.model = pastedModel(form);
  }
  if (from !== "trace") body.workload ??= {};
  return body;
}

/** Show the controls the task and the source use; hide (and so leave out) the rest. */
export function syncVisibility(form) {
  const from = source(form);
  for (const part of form.querySelectorAll("[data-source]")) {
    part.hidden = part.dataset.source !== from;
  }
  form.querySelector("#workload-area").hidden = from === "trace";
  const task = form.elements["workload.task"].value;
  for (const field of form.querySelectorAll("[data-tasks]")) {
    field.hidden = !field.dataset.tasks.split(" ").includes(task);
  }
}

/** Fill the form from a request as it was sent (a shared answer's `request`). */
export function fill(form, request) {
  form.reset();
  let from = "catalog";
  if (request.trace_id) from = "trace";
  else if (request.model && !(Object.keys(request.model).length === 1 && request.model.name)) {
    from = "json";
  }
  form.elements.source.value = from;
  if (from === "catalog") form.elements["model.name"].value = request.model?.name ?? "";
  if (from === "json") form.elements.model.value = JSON.stringify(request.model, null, 2);
  if (request.workload?.task) form.elements["workload.task"].value = request.workload.task;
  for (const control of form.elements) {
    const name = control.name;
    if (!name || name === "source" || name === "model" || name === "model.name") continue;
    let found = request;
    for (const part of name.split(".")) found = found?.[part];
    if (found === undefined || found === null) continue; // as reset: the defaults
    control.value = Array.isArray(found) ? found.join(", ") : String(found);
  }
  syncVisibility(form);
  return from;
}

/**
 * Search as you type: the catalog's names in the datalist. `GET /v1/models?q=` where the
 * API filters; where it does not (a 422 for the unknown parameter), the whole catalog
 * once, filtered here.
 */
export function modelSearch(input, list, hint) {
  let everything = null;
  let filtersHere = false;
  let timer = 0;
  let asked = "";
  const byName = new Map();

  async function catalog() {
    if (everything === null) {
      const { body } = await call("GET", "/models?page_size=500");
      everything = body.items;
    }
    return everything;
  }

  async function matches(text) {
    if (!filtersHere) {
      try {
        const q = encodeURIComponent(text);
        return (await call("GET", `/models?q=${q}&page_size=50`)).body.items;
      } catch (error) {
        if (error.status !== 422 && error.status !== 400) throw error;
        filtersHere = true;
      }
    }
    const needle = text.toLowerCase();
    return (await catalog()).filter((m) =>
      [m.name, ...(m.aliases || [])].some((n) => n.toLowerCase().includes(needle)));
  }

  function describe(model) {
    if (!model) return "A name or alias from the catalog.";
    const n = model.parameters;
    const size = !n ? "" : n >= 1e9 ? `, ${num(n / 1e9)} B parameters`
      : `, ${num(n / 1e6)} M parameters`;
    return `${model.name}: ${model.family}${size}.`;
  }

  async function refresh() {
    const text = input.value.trim();
    if (text === asked) return;
    asked = text;
    let found;
    try {
      found = await matches(text);
    } catch {
      return; // the list stays as it was; submitting still reports what is wrong
    }
    if (asked !== text) return; // a later keystroke won
    for (const model of found) byName.set(model.name, model);
    const needle = text.toLowerCase();
    replace(list, found.slice(0, 50).map((m) => {
      // the browser shows an option whose value or label holds the text: name the alias
      const alias = (m.aliases || []).find((a) => a.toLowerCase().includes(needle));
      const label = describe(m).replace(/\.$/, "") + (alias && needle ? ` (${alias})` : "");
      return el("option", { value: m.name, label });
    }));
    list.dataset.query = text;
    hint.textContent = describe(byName.get(text));
  }

  input.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(refresh, 150);
  });
  input.addEventListener("focus", () => refresh());
}

/**
 * The software stacks the task runs on (`GET /v1/stacks`, read once), as the choices of
 * `select`; a choice the new task has no stack for falls back to the default. `want`
 * (a shared answer's stack) is chosen once the list is there.
 */
export function stackChoices(select, task, hint) {
  let stacks = null;
  let wanted = "";
  const original = hint.textContent;

  function describe() {
    const chosen = (stacks || []).find((s) => s.id === select.value);
    hint.textContent = chosen ? `${chosen.name} (${chosen.version}).` : original;
  }

  function offer() {
    const keep = wanted || select.value;
    const fits = (stacks || []).filter((s) => s.tasks.includes(task.value));
    replace(select, [el("option", { value: "" }, "default"),
      ...fits.map((s) => el("option", { value: s.id }, s.name.split(" (")[0]))]);
    if (fits.some((s) => s.id === keep)) select.value = keep;
    if (stacks) wanted = "";
    describe();
  }

  async function load() {
    try {
      stacks = (await call("GET", "/stacks")).body.stacks;
    } catch {
      stacks = []; // the default stack still answers; submitting names any fault
    }
    offer();
  }

  task.addEventListener("change", offer);
  select.addEventListener("change", describe);
  load();
  return {
    want(id) {
      wanted = id || "";
      if (stacks) offer();
    },
  };
}

/** Read a chosen config.json file into the text area. */
export function readInto(fileInput, textarea, onError) {
  fileInput.addEventListener("change", () => {
    const file = fileInput.files?.[0];
    if (!file) return;
    const reader = new FileReader();
    reader.addEventListener("load", () => {
      textarea.value = String(reader.result);
      textarea.dispatchEvent(new Event("input", { bubbles: true }));
    });
    reader.addEventListener("error", () => onError(`could not read ${file.name}`));
    reader.readAsText(file);
  });
}

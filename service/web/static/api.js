// Calls to the service's /v1 API: JSON in and out, problem+json errors raised as
// ApiProblem, the API key (kept in this tab's sessionStorage) sent where one is set.

const KEY_ITEM = "rightsize.api_key";
const root = document.body.dataset.api || "/v1";

export class ApiProblem extends Error {
  /** An RFC 9457 problem: `errors` lists {location, field, message}. */
  constructor(status, problem) {
    super(problem?.detail || problem?.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem || {};
    this.errors = Array.isArray(problem?.errors) ? problem.errors : [];
  }
}

export function apiKey() {
  try {
    return sessionStorage.getItem(KEY_ITEM) || "";
  } catch {
    return "";
  }
}

export function setApiKey(value) {
  try {
    if (value) sessionStorage.setItem(KEY_ITEM, value);
    else sessionStorage.removeItem(KEY_ITEM);
  } catch {
    // storage refused (private mode): the key then lasts as long as the field's value
  }
}

/** The URL of an API path ("/recommendations/x" -> "/v1/recommendations/x"). */
export function apiUrl(path) {
  return root + path;
}

async function read(response) {
  const type = response.headers.get("Content-Type") || "";
  if (type.includes("json")) return response.json();
  const text = await response.text();
  return text ? { detail: text.slice(0, 500) } : null;
}

/**
 * One API call. `json`: a body sent as JSON; `form`: a FormData (multipart).
 * Resolves to {status, body, location}; rejects with ApiProblem on a 4xx or 5xx.
 */
export async function call(method, path, { json, form, signal } = {}) {
  const headers = { Accept: "application/json" };
  const key = apiKey();
  if (key) headers.Authorization = `Bearer ${key}`;
  let body;
  if (json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(json);
  } else if (form !== undefined) {
    body = form;
  }
  const response = await fetch(path.startsWith("/v1") ? path : apiUrl(path), {
    method,
    headers,
    body,
    signal,
    credentials: "same-origin",
  });
  const payload = await read(response);
  if (!response.ok) throw new ApiProblem(response.status, payload);
  return { status: response.status, body: payload, location: response.headers.get("Location") };
}

const sleep = (ms, signal) =>
  new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      reject(signal.reason);
    });
  });

/** Follow a background job (a 202's job_url) until it finishes; its final state. */
export async function pollJob(url, { signal, onProgress, limitS = 900 } = {}) {
  const started = Date.now();
  let wait = 500;
  while (Date.now() - started < limitS * 1000) {
    const { body } = await call("GET", url, { signal });
    if (body.status === "finished") return body;
    if (body.status === "failed" || body.status === "stopped" || body.status === "canceled") {
      const why = body.error?.message || body.error?.kind || body.status;
      throw new ApiProblem(422, { detail: `the trace's analysis failed: ${why}` });
    }
    onProgress?.(body.progress || body.status);
    await sleep(wait, signal);
    wait = Math.min(wait * 1.5, 5000);
  }
  throw new ApiProblem(504, { detail: `the job did not finish within ${limitS} s` });
}

// The API's errors where they belong: each `errors[].field` next to the control it
// names (aria-invalid, aria-describedby), anything unmapped in the general error box.

import { el, replace } from "./dom.js";

const MARK = "data-error-for";

/** The field element ([data-field]) an API field name belongs to, or null. */
function fieldFor(form, name, from) {
  if (!name) return null;
  const dotted = name.replace(/\.\d+(?=\.|$)/g, ""); // constraints.providers.0 -> ...providers
  if (dotted === "model" || dotted.startsWith("model.")) {
    return form.querySelector(`[data-source="${from === "trace" ? "catalog" : from}"]`);
  }
  if (dotted === "trace_id" || dotted === "profile_id") {
    return form.querySelector('[data-source="trace"]');
  }
  let probe = dotted;
  while (probe) {
    const found = form.querySelector(`[data-field="${CSS.escape(probe)}"]`);
    if (found && !found.closest("[hidden]")) return found;
    probe = probe.includes(".") ? probe.slice(0, probe.lastIndexOf(".")) : "";
  }
  return null;
}

function control(field) {
  const visible = [...field.querySelectorAll("input, select, textarea")].filter(
    (c) => c.type !== "radio" && c.type !== "hidden" && !c.closest("[hidden]"));
  return visible[0] || null;
}

/** Remove every message this module placed. */
export function clearErrors(form, general) {
  for (const note of form.querySelectorAll(`[${MARK}]`)) note.remove();
  for (const input of form.querySelectorAll("[aria-invalid]")) {
    input.removeAttribute("aria-invalid");
    const ids = (input.getAttribute("aria-describedby") || "").split(" ")
      .filter((id) => id && !id.startsWith("error-"));
    if (ids.length) input.setAttribute("aria-describedby", ids.join(" "));
    else input.removeAttribute("aria-describedby");
  }
  general.hidden = true;
  replace(general);
}

function place(field, name, message) {
  const input = control(field);
  const id = `error-${(input?.id || name).replace(/[^A-Za-z0-9_-]/g, "-")}`;
  let note = field.querySelector(`#${CSS.escape(id)}`);
  if (!note) {
    note = el("p", { id, class: "field-error", [MARK]: name });
    if (input) input.after(note);
    else field.append(note);
  }
  note.textContent = note.textContent ? `${note.textContent}; ${message}` : message;
  if (input) {
    input.setAttribute("aria-invalid", "true");
    const ids = new Set((input.getAttribute("aria-describedby") || "").split(" ").filter(Boolean));
    ids.add(id);
    input.setAttribute("aria-describedby", [...ids].join(" "));
  }
  return input;
}

/**
 * Show `problem` (an ApiProblem or a LocalProblem) on the form. Returns the first control
 * marked, so the caller can move focus there.
 */
export function showProblem(form, general, problem, from) {
  clearErrors(form, general);
  const items = problem.errors?.length
    ? problem.errors
    : [{ field: problem.field || guessField(problem), message: problem.message }];
  const unplaced = [];
  let first = null;
  for (const item of items) {
    const field = fieldFor(form, item.field, from);
    const name = item.field || "";
    if (field) {
      const input = place(field, name, item.message);
      first ??= input;
    } else {
      unplaced.push(name ? `${name}: ${item.message}` : item.message);
    }
  }
  if (unplaced.length) {
    const title = problem.status ? `The service answered ${problem.status}` : "Not sent";
    replace(general, el("strong", {}, title), el("ul", {}, unplaced.map((t) => el("li", {}, t))));
    general.hidden = false;
  }
  return first;
}

function guessField(problem) {
  // a 404 names what it could not find in its detail: "no model 'x'; close matches: ..."
  const detail = problem.message || "";
  if (/^no model /.test(detail)) return "model";
  if (/^no trace /.test(detail)) return "trace_id";
  return "";
}

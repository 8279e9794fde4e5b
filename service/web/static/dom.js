// Small DOM and number helpers shared by the page's modules. Text from the API is only
// ever set as text (never parsed as HTML).

const SVG_NS = "http://www.w3.org/2000/svg";

function fill(node, attrs, children) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "text") node.textContent = String(value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** An HTML element: el("a", {href: "/"}, "text", otherNode). */
export function el(tag, attrs, ...children) {
  return fill(document.createElement(tag), attrs, children);
}

/** An SVG element, attributes as given (numbers rounded to 0.1 px). */
export function svg(tag, attrs, ...children) {
  const rounded = {};
  for (const [key, value] of Object.entries(attrs || {})) {
    rounded[key] = typeof value === "number" ? Math.round(value * 10) / 10 : value;
  }
  return fill(document.createElementNS(SVG_NS, tag), rounded, children);
}

/** Text with its http(s) addresses as links (a reason's source often holds one). */
export function linked(text) {
  const out = [];
  const parts = String(text ?? "").split(/(https?:\/\/[^\s,;)]+)/);
  parts.forEach((part, i) => {
    if (!part) return;
    out.push(i % 2 ? el("a", { href: part, rel: "noopener noreferrer" }, part) : part);
  });
  return out;
}

const sig3 = new Intl.NumberFormat("en", { maximumSignificantDigits: 3 });
const whole = new Intl.NumberFormat("en", { maximumFractionDigits: 0 });

/** A number to three significant figures (thousands grouped), "–" for none. */
export function num(value) {
  if (value === null || value === undefined || !Number.isFinite(value)) return "–";
  return Math.abs(value) >= 1000 ? whole.format(value) : sig3.format(value);
}

/** US dollars, three significant figures below 1,000. */
export function usd(value) {
  if (value === null || value === undefined || !Number.isFinite(value)) return "–";
  return `$${num(value)}`;
}

/** Hours as the unit that reads best: seconds, minutes, hours or days. */
export function duration(hours) {
  if (hours === null || hours === undefined || !Number.isFinite(hours)) return "–";
  const seconds = hours * 3600;
  if (seconds < 90) return `${num(seconds)} s`;
  if (seconds < 59.5 * 60) return `${num(seconds / 60)} min`;
  if (hours < 48) return `${num(hours)} h`;
  return `${num(hours / 24)} days`;
}

/** Seconds as ms or s. */
export function seconds(value) {
  if (value === null || value === undefined || !Number.isFinite(value)) return "–";
  return value < 1 ? `${num(value * 1000)} ms` : `${num(value)} s`;
}

/** A candidate's short name: "#1 H100 SXM5 80GB ×1, gcp". */
export function candidateLabel(rec) {
  const where = rec.deployment?.kind === "cloud" ? rec.deployment.provider : "on-premise";
  const name = (rec.gpu_name || rec.gpu).replace(/^(NVIDIA|AMD|Intel) /, "");
  return `#${rec.rank} ${name} ×${rec.count}, ${where}`;
}

/** Replace a node's children. */
export function replace(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined));
  return node;
}

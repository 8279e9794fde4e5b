// Chart primitives drawn as inline SVG: a labelled figure, scales with readable ticks,
// axes, a legend, and horizontal bars (stacked or side by side) with markers.

import { el, num, svg } from "./dom.js";

// Okabe and Ito's palette: told apart with the common colour-vision deficiencies
export const COLOURS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00",
  "#999933", "#555555"];
export const WIDTH = 680;

let made = 0;

/**
 * A <figure> holding one chart: its <svg> has a <title>, a <desc> and an aria-label; the
 * caption repeats the title for sighted readers, `notes` go under it.
 */
export function figure(name, title, desc, height, notes = []) {
  made += 1;
  const ids = { title: `${name}-title-${made}`, desc: `${name}-desc-${made}` };
  const root = svg("svg", {
    viewBox: `0 0 ${WIDTH} ${height}`,
    role: "img",
    "aria-label": title,
    "aria-describedby": ids.desc,
    class: "chart-svg",
    "data-chart": name,
  }, svg("title", { id: ids.title, text: title }), svg("desc", { id: ids.desc, text: desc }));
  const box = el("figure", { class: "chart", id: `chart-${name}` },
    el("figcaption", {}, title), root,
    notes.filter(Boolean).map((n) => el("p", { class: "chart-note" }, n)));
  return { box, root };
}

/** A figure that says why there is nothing to draw (still a labelled, marked svg). */
export function emptyFigure(name, title, why) {
  const { box, root } = figure(name, title, why, 60);
  root.append(svg("rect", { x: 0.5, y: 0.5, width: WIDTH - 1, height: 59, class: "empty" }),
    svg("text", { x: WIDTH / 2, y: 35, "text-anchor": "middle", class: "label", text: why }));
  return box;
}

function niceStep(span, count) {
  const raw = span / Math.max(1, count);
  const power = 10 ** Math.floor(Math.log10(raw));
  const scaled = raw / power;
  return power * (scaled <= 1 ? 1 : scaled <= 2 ? 2 : scaled <= 5 ? 5 : 10);
}

/** A linear scale from [lo, hi] (widened to nice ends unless `exact`) onto [r0, r1]. */
export function linear(lo, hi, r0, r1, count = 5, exact = false) {
  if (!(hi > lo)) hi = lo + (lo === 0 ? 1 : Math.abs(lo));
  const step = niceStep(hi - lo, count);
  const d0 = exact ? lo : Math.floor(lo / step) * step;
  const d1 = exact ? hi : Math.ceil(hi / step) * step;
  const scale = (v) => r0 + ((v - d0) / (d1 - d0)) * (r1 - r0);
  scale.ticks = () => {
    const out = [];
    const first = Math.ceil(d0 / step) * step;
    for (let v = first; v <= d1 + step / 1e6; v += step) out.push(Math.round(v / step) * step);
    return out;
  };
  scale.domain = [d0, d1];
  return scale;
}

/** A log10 scale over whole decades (1, 2, 5 between when they are few). */
export function log(lo, hi, r0, r1) {
  const d0 = Math.floor(Math.log10(lo));
  let d1 = Math.ceil(Math.log10(hi));
  if (d1 === d0) d1 += 1;
  const scale = (v) => r0 + ((Math.log10(v) - d0) / (d1 - d0)) * (r1 - r0);
  scale.ticks = () => {
    const out = [];
    for (let p = d0; p <= d1; p++) {
      for (const m of d1 - d0 <= 2 ? [1, 2, 5] : [1]) {
        const v = m * 10 ** p;
        if (v <= 10 ** d1) out.push(v);
      }
    }
    return out;
  };
  scale.domain = [10 ** d0, 10 ** d1];
  return scale;
}

/** A scale that suits the values: log where they span more than 30 times. */
export function fitted(values, r0, r1) {
  const positive = values.filter((v) => v > 0);
  const lo = Math.min(...positive);
  const hi = Math.max(...positive);
  if (positive.length === values.length && hi / lo > 30) return log(lo, hi, r0, r1);
  return linear(0, hi || 1, r0, r1);
}

/** The bottom axis of a plot area. */
export function xAxis(root, x, y0, label, format = num) {
  const g = svg("g", { class: "axis" });
  const [left, right] = [x(x.domain[0]), x(x.domain[1])];
  g.append(svg("line", { x1: left, x2: right, y1: y0, y2: y0 }));
  for (const t of x.ticks()) {
    g.append(svg("line", { x1: x(t), x2: x(t), y1: y0, y2: y0 + 5 }),
      svg("text", { x: x(t), y: y0 + 18, "text-anchor": "middle", text: format(t) }));
  }
  g.append(svg("text", { x: (left + right) / 2, y: y0 + 36, "text-anchor": "middle",
    class: "axis-title", text: label }));
  root.append(g);
}

/** The left axis of a plot area, with light grid lines across it. */
export function yAxis(root, y, x0, x1, label, format = num) {
  const g = svg("g", { class: "axis" });
  const [bottom, top] = [y(y.domain[0]), y(y.domain[1])];
  g.append(svg("line", { x1: x0, x2: x0, y1: bottom, y2: top }));
  for (const t of y.ticks()) {
    g.append(svg("line", { x1: x0 + 1, x2: x1, y1: y(t), y2: y(t), class: "grid" }),
      svg("line", { x1: x0 - 5, x2: x0, y1: y(t), y2: y(t) }),
      svg("text", { x: x0 - 8, y: y(t) + 4, "text-anchor": "end", text: format(t) }));
  }
  g.append(svg("text", { x: 14, y: (bottom + top) / 2, "text-anchor": "middle",
    transform: `rotate(-90 14 ${(bottom + top) / 2})`, class: "axis-title", text: label }));
  root.append(g);
}

/** A row of coloured keys at (x, y): [{label, colour, shape}]. */
export function legend(root, x, y, keys) {
  const g = svg("g", { class: "legend" });
  let at = x;
  for (const key of keys) {
    let mark;
    if (key.shape === "line") {
      mark = svg("line", { x1: at, x2: at + 14, y1: y - 4, y2: y - 4, stroke: key.colour,
        "stroke-width": 3, class: key.dashed ? "dashed" : null });
    } else if (key.shape === "dot") {
      mark = svg("circle", { cx: at + 6, cy: y - 4, r: 5,
        class: key.hollow ? "point" : "point pareto" });
    } else {
      mark = svg("rect", { x: at, y: y - 10, width: 12, height: 12, fill: key.colour });
    }
    g.append(mark, svg("text", { x: at + 18, y, text: key.label }));
    at += 28 + key.label.length * 7.2;
  }
  root.append(g);
}

function clip(text, length) {
  return text.length > length ? `${text.slice(0, length - 1)}…` : text;
}

/**
 * Horizontal bars, one band a row: `rows` [{label, segments: [{key, value, title}],
 * markers: [{value, title}], note}] (the note is written after the bar); `keys`
 * [{key, label, colour}]; stacked, or side by side.
 */
export function hbars(root, { rows, keys, stacked, top, left = 240, band = 30, unit,
  format = num }) {
  const right = WIDTH - (rows.some((r) => r.note) ? 100 : 20); // room for the notes
  const totals = rows.flatMap((r) => [
    stacked ? r.segments.reduce((s, p) => s + Math.max(0, p.value || 0), 0)
      : Math.max(0, ...r.segments.map((p) => p.value || 0)),
    ...(r.markers || []).map((m) => m.value || 0),
  ]);
  const x = linear(0, Math.max(...totals, 0) || 1, left, right);
  const bottom = top + rows.length * band;
  const colour = Object.fromEntries(keys.map((k) => [k.key, k.colour]));
  for (const t of x.ticks()) {
    root.append(svg("line", { x1: x(t), x2: x(t), y1: top, y2: bottom, class: "grid" }));
  }
  rows.forEach((row, i) => {
    const y = top + i * band;
    root.append(svg("text", { x: left - 8, y: y + band / 2 + 4, "text-anchor": "end",
      class: "label" }, clip(row.label, 32), svg("title", { text: row.label })));
    const parts = row.segments.filter((p) => (p.value || 0) > 0);
    let at = 0;
    parts.forEach((part, j) => {
      const h = stacked ? band - 10 : (band - 8) / parts.length;
      const y0 = stacked ? y + 5 : y + 4 + j * h;
      const x0 = stacked ? at : 0;
      root.append(svg("rect", {
        x: x(x0), y: y0, width: Math.max(1, x(x0 + part.value) - x(x0)), height: h,
        fill: colour[part.key], class: "bar",
      }, svg("title", { text: part.title || `${row.label}: ${part.key} ${format(part.value)}` })));
      if (stacked) at += part.value;
    });
    if (row.note) {
      const end = stacked ? at : Math.max(0, ...parts.map((p) => p.value));
      root.append(svg("text", { x: x(end) + 5, y: y + band / 2 + 4, class: "bar-note",
        text: row.note }));
    }
    for (const marker of row.markers || []) {
      const mx = x(marker.value);
      root.append(svg("path", {
        d: `M${mx} ${y + 1}V${y + band - 1}M${mx - 4} ${y + 1}h8`, class: "marker",
      }, svg("title", { text: marker.title })));
    }
  });
  root.append(svg("line", { x1: left, x2: left, y1: top, y2: bottom, class: "axis-line" }));
  xAxis(root, x, bottom, unit, format);
  return bottom + 44;
}

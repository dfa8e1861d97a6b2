// A small SVG line chart over time: one line per series, a y axis, a relative time axis.

import { colorAt, fmtNum, h } from "./util.js";

const W = 560;
const H = 170;
const PAD = { left: 42, right: 10, top: 10, bottom: 22 };

/**
 * series: [{name, points: [[at, value], ...]}]; options: {title, unit, yMax, span}.
 * Returns a <figure> with the chart and a legend (at most 16 series are drawn).
 */
export function linePlot(series, { title, unit = "", yMax = null, span = 600 } = {}) {
  const now = Date.now() / 1000;
  const t0 = now - span;
  const drawn = series.filter((s) => s.points.length).slice(0, 16);
  const top = yMax ?? niceMax(Math.max(1, ...drawn.flatMap((s) => s.points.map((p) => p[1]))));
  const x = (t) => PAD.left + ((t - t0) / span) * (W - PAD.left - PAD.right);
  const y = (v) => H - PAD.bottom - (Math.min(v, top) / top) * (H - PAD.top - PAD.bottom);

  const grid = [];
  for (let i = 0; i <= 4; i += 1) {
    const v = (top * i) / 4;
    grid.push(
      h("line", { x1: PAD.left, x2: W - PAD.right, y1: y(v), y2: y(v), class: "grid" }),
      h("text", { x: PAD.left - 6, y: y(v) + 4, class: "tick", "text-anchor": "end" }, `${fmtNum(v, 0)}${unit}`),
    );
  }
  for (let i = 0; i <= 5; i += 1) {
    const t = t0 + (span * i) / 5;
    const label = i === 5 ? "now" : ago(now - t);
    grid.push(h("text", { x: x(t), y: H - 6, class: "tick", "text-anchor": i === 0 ? "start" : i === 5 ? "end" : "middle" }, label));
  }
  const lines = drawn.map((s, i) => {
    const pts = s.points.filter((p) => p[0] >= t0).map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`);
    return h("polyline", { points: pts.join(" "), fill: "none", stroke: s.color || colorAt(i), "stroke-width": 1.6 },
      h("title", {}, s.name));
  });
  const svg = h("svg", { viewBox: `0 0 ${W} ${H}`, class: "plot", role: "img", "aria-label": title || "plot" }, grid, lines);
  const legend = h("div", { class: "legend" }, drawn.map((s, i) => h("span", { class: "key" },
    h("i", { style: { background: s.color || colorAt(i) } }), s.name)));
  return h("figure", { class: "chart" }, title ? h("figcaption", {}, title) : null,
    drawn.length ? svg : h("div", { class: "empty" }, "no samples yet"), drawn.length > 1 ? legend : null);
}

function ago(seconds) {
  if (seconds >= 3600) return `-${(seconds / 3600).toFixed(1)}h`;
  if (seconds >= 120) return `-${Math.round(seconds / 60)}m`;
  return `-${Math.round(seconds)}s`;
}

function niceMax(value) {
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 2.5, 5, 10]) if (value <= step * power) return step * power;
  return value;
}

/** Group telemetry samples into one series per (node, gpu) for ``field``. */
export function seriesOf(samples, field, label = (s) => `GPU ${s.gpu}`) {
  const byKey = new Map();
  for (const s of samples) {
    if (s[field] === null || s[field] === undefined) continue;
    const key = `${s.node}/${s.gpu}`;
    if (!byKey.has(key)) byKey.set(key, { name: label(s), points: [] });
    byKey.get(key).points.push([s.at, s[field]]);
  }
  return [...byKey.values()];
}

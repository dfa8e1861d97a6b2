// Small DOM and formatting helpers. Data is always set as text, never parsed as HTML.

/** h("div", {class: "x", onclick: f}, child, ...) -> an element; children may be arrays. */
export function h(tag, attrs = {}, ...children) {
  const el = tag === "svg" || SVG_TAGS.has(tag)
    ? document.createElementNS("http://www.w3.org/2000/svg", tag)
    : document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2), value);
    } else if (key === "dataset") {
      for (const [k, v] of Object.entries(value)) el.dataset[k] = String(v);
    } else if (key === "style" && typeof value === "object") {
      for (const [k, v] of Object.entries(value)) el.style.setProperty(k, String(v));
    } else {
      el.setAttribute(key, value === true ? "" : String(value));
    }
  }
  append(el, children);
  return el;
}

const SVG_TAGS = new Set(["path", "line", "text", "g", "rect", "polyline", "circle", "title"]);

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replace the children of ``el``. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// Twelve distinct colours that keep white text readable.
const PALETTE = [
  "#2f6fdf", "#d9534f", "#2e9e6a", "#8e5bd6", "#e08a1e", "#1aa3b8",
  "#c2448f", "#6b8e23", "#5a67d8", "#b7791f", "#0f8b8d", "#9c4221",
];

export function colorAt(index) {
  return PALETTE[((index % PALETTE.length) + PALETTE.length) % PALETTE.length];
}

/** A stable colour for a string (queue names, users). */
export function colorOf(text) {
  let hash = 0;
  for (const ch of String(text)) hash = (hash * 31 + ch.codePointAt(0)) | 0;
  return colorAt(Math.abs(hash));
}

export function fmtNum(value, digits = 1) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  return Number.isInteger(value) ? String(value) : value.toFixed(digits);
}

export function fmtDuration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, "0")}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

/** "3m 10s ago" or "in 2m 05s" relative to now (seconds since the epoch). */
export function fmtRelative(at, now = Date.now() / 1000) {
  if (at === null || at === undefined) return "–";
  const delta = at - now;
  if (Math.abs(delta) < 1) return "now";
  return delta > 0 ? `in ${fmtDuration(delta)}` : `${fmtDuration(-delta)} ago`;
}

export function fmtClock(at) {
  if (at === null || at === undefined) return "–";
  return new Date(at * 1000).toLocaleTimeString([], { hour12: false });
}

export function fmtBytes(bytes) {
  if (!bytes) return "0";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  let v = bytes;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return `${v >= 10 || i === 0 ? Math.round(v) : v.toFixed(1)} ${units[i]}`;
}

/** A coloured pill for a job or node state. */
export function stateBadge(state, extra = {}) {
  return h("span", { class: `badge state-${state}`, ...extra }, state);
}

export function link(href, ...children) {
  return h("a", { href }, ...children);
}

/** "8", "2x8" or "0.5": GPUs a job asks for (per node times nodes). */
export function jobGpus(job) {
  return job.nodes > 1 ? `${job.nodes}x${job.gpus}` : job.gpus;
}

export function jobTitle(job) {
  return job.name ? `#${job.id} ${job.name}` : `#${job.id}`;
}

/** A short message in the corner; kind "error" stays a little longer. */
export function toast(message, kind = "info") {
  let box = document.getElementById("toasts");
  if (!box) {
    box = h("div", { id: "toasts", role: "status", "aria-live": "polite" });
    document.body.append(box);
  }
  const item = h("div", { class: `toast toast-${kind}` }, message);
  box.append(item);
  setTimeout(() => item.remove(), kind === "error" ? 8000 : 4000);
}

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

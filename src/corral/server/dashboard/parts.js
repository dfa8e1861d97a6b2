// Pieces shared by several views: colours by queue or job, queue bars, the activity feed.

import { state } from "./store.js";
import { colorAt, fmtClock, fmtNum, h, link } from "./util.js";

export function queueColor(name) {
  const index = state.queues.findIndex((q) => q.name === name);
  return colorAt(index < 0 ? state.queues.length : index);
}

export function jobColor(id) {
  return colorAt(Number(id)); // the palette alternates hues: neighbouring ids differ clearly
}

export function totalGpus() {
  return state.nodes.reduce((sum, n) => sum + n.gpus, 0);
}

/**
 * A queue's GPU usage as a bar: the part within its nominal quota, the part borrowed from
 * its cohort, a mark at the quota and a dashed end at quota + borrowing limit. An
 * unlimited queue is drawn against the cluster's GPUs.
 */
export function queueBar(queue, { compact = false } = {}) {
  const quota = queue.quota.gpus;
  const limit = queue.borrowing_limit.gpus;
  const borrowed = queue.borrowed.gpus || 0;
  const used = queue.gpus_used;
  const cluster = Math.max(1, totalGpus());
  const scale = Math.max(used, quota === undefined ? cluster : quota + (limit ?? Math.max(0, cluster - quota)), 1);
  const pct = (v) => `${Math.min(100, (v / scale) * 100).toFixed(2)}%`;
  const own = used - borrowed;
  const color = queueColor(queue.name);
  const marks = [];
  if (quota !== undefined) {
    marks.push(h("span", { class: "mark quota", style: { left: pct(quota) }, title: `quota ${fmtNum(quota)} GPUs` }));
    if (limit !== undefined) {
      marks.push(h("span", { class: "mark limit", style: { left: pct(quota + limit) }, title: `borrowing limit +${fmtNum(limit)}` }));
    }
  }
  const caption = quota === undefined
    ? `${fmtNum(used)} GPUs · no quota`
    : `${fmtNum(used)} / ${fmtNum(quota)} GPUs${borrowed ? ` (+${fmtNum(borrowed)} borrowed)` : ""}`;
  const bar = h("div", { class: "qbar", dataset: { queue: queue.name, used, quota: quota ?? "", borrowed } },
    h("span", { class: "fill", style: { width: pct(own), background: color } }),
    h("span", { class: "fill borrowed", style: { left: pct(own), width: pct(borrowed), "--c": color } }),
    marks);
  const extraKeys = Object.entries(queue.quota).filter(([k]) => k !== "gpus");
  return h("div", { class: `queue${compact ? " compact" : ""}` },
    h("div", { class: "qhead" },
      h("span", { class: "qname" }, h("i", { class: "swatch", style: { background: color } }), queue.name),
      h("span", { class: "qcounts" }, `${queue.running} running · ${queue.pending} pending`)),
    bar,
    h("div", { class: "qcaption" }, caption,
      !compact && extraKeys.length
        ? ` · ${extraKeys.map(([k, v]) => `${k} quota ${fmtNum(v)}${queue.borrowed[k] ? ` (+${fmtNum(queue.borrowed[k])})` : ""}`).join(", ")}`
        : null));
}

function entityLink(event) {
  if (event.entity === "job") return link(`#/jobs/${event.entity_id}`, `job ${event.entity_id}`);
  return link(`#/nodes/${encodeURIComponent(event.entity_id)}`, `node ${event.entity_id}`);
}

/** The newest transitions, one line each. */
export function feedList(events, max = 30) {
  if (!events.length) return h("p", { class: "muted" }, "No transitions since this page opened.");
  return h("ul", { class: "feed" }, events.slice(0, max).map((e) => h("li", { dataset: { entity: e.entity, id: e.entity_id, to: e.to_state } },
    h("span", { class: "when" }, fmtClock(e.at)),
    h("span", { class: "what" }, entityLink(e), " ", transition(e)),
    e.reason ? h("span", { class: "why" }, e.reason) : null)));
}

/** "pending → running", or for a note on a state (same state, e.g. flagged idle) the state. */
export function transition(e) {
  if (e.from_state === e.to_state) {
    const idle = (e.reason || "").startsWith("idle:");
    return [h("span", { class: `st state-${e.to_state}` }, e.to_state), idle ? [" ", h("span", { class: "badge idle" }, "idle")] : null];
  }
  return [e.from_state ? h("span", { class: `st state-${e.from_state}` }, e.from_state) : "new",
    " → ", h("span", { class: `st state-${e.to_state}` }, e.to_state)];
}

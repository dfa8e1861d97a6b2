// The cluster map: every node and every GPU as a cell, grouped by network switch,
// coloured by queue or by job, with utilization when the server reports telemetry.
// Beside it: queue bars and the live activity feed.

import { feedList, jobColor, queueBar, queueColor, totalGpus } from "../parts.js";
import { latestSamples, state } from "../store.js";
import { fill, fmtNum, h, jobTitle, link, stateBadge } from "../util.js";

const COLOR_KEY = "corral.colorBy";

export function mount(root) {
  let colorBy = localStorage.getItem(COLOR_KEY) === "job" ? "job" : "queue";
  const summary = h("div", { class: "summary" });
  const toggle = h("div", { class: "seg", role: "group", "aria-label": "colour GPUs by" });
  const groups = h("div", { class: "map", id: "map" });
  const legend = h("div", { class: "legend map-legend" });
  const queues = h("div", { class: "queues compact" });
  const feed = h("div", { id: "feed" });
  fill(root,
    h("div", { class: "overview" },
      h("section", { class: "panel map-panel" },
        h("div", { class: "panel-head" }, h("h2", {}, "Cluster"), summary, toggle),
        groups, legend),
      h("aside", { class: "side" },
        h("section", { class: "panel" }, h("div", { class: "panel-head" }, h("h2", {}, link("#/queues", "Queues"))), queues),
        h("section", { class: "panel feed-panel" }, h("div", { class: "panel-head" }, h("h2", {}, "Activity")), feed))));

  function renderToggle() {
    fill(toggle, ["queue", "job"].map((mode) => h("button", {
      type: "button", class: mode === colorBy ? "on" : "", "aria-pressed": String(mode === colorBy), dataset: { colorBy: mode },
      onclick: () => { colorBy = mode; localStorage.setItem(COLOR_KEY, mode); update(); },
    }, `by ${mode}`)));
  }

  function update() {
    renderToggle();
    const nodes = state.nodes;
    const used = nodes.reduce((s, n) => s + n.gpus_used, 0);
    const total = totalGpus();
    const jobs = [...state.jobs.values()];
    const running = jobs.filter((j) => j.state === "running" || j.state === "preempting").length;
    const pending = jobs.filter((j) => j.state === "pending").length;
    const util = averageUtil();
    fill(summary,
      stat("nodes", `${nodes.filter((n) => n.state === "ready").length}/${nodes.length}`, "ready"),
      stat("gpus", `${fmtNum(used)}/${total}`, `allocated${total ? ` (${Math.round((used / total) * 100)}%)` : ""}`),
      stat("running", running, "running"),
      stat("pending", pending, "pending"),
      util === null ? null : stat("util", `${Math.round(util)}%`, "GPU util"));
    // Rebuild the cells only when what they show changed (keeps hover tooltips steady).
    const key = JSON.stringify([colorBy, nodes.map((n) => [n.name, n.state, n.devices.map((d) => [d.used_by, d.share_used])]),
      [...state.jobs.values()].filter((j) => j.state === "running" || j.state === "preempting").map((j) => [j.id, j.state, j.idle]),
      state.queues.map((q) => q.name), nodes.map((n) => [...latestSamples(n.name).values()].map((x) => Math.round(x.utilization)))]);
    if (key !== groups.dataset.key) groups.dataset.key = key;
    else return renderSide();
    fill(groups, nodes.length ? groupNodes(nodes).map(([name, members]) => h("div", { class: "switch", dataset: { switch: name } },
      h("div", { class: "switch-name" }, h("span", { class: "muted" }, "switch "), name),
      h("div", { class: "nodes" }, members.map((n) => nodeCard(n, colorBy)))))
      : h("p", { class: "muted" }, "No nodes registered yet: start agents with `corral agent` or `corral up`."));
    fill(legend, legendItems(colorBy));
    renderSide();
  }

  function renderSide() {
    fill(queues, state.queues.map((q) => queueBar(q, { compact: true })));
    fill(feed, feedList(state.feed, 25));
  }

  update();
  return { update };
}

function stat(key, value, label) {
  return h("span", { class: "stat", dataset: { stat: key } }, h("b", {}, String(value)), ` ${label}`);
}

function averageUtil() {
  const values = [];
  for (const node of state.nodes) for (const s of latestSamples(node.name).values()) values.push(s.utilization);
  return values.length ? values.reduce((a, b) => a + b, 0) / values.length : null;
}

/** Nodes grouped by their network switch (the innermost level of ``network``, else labels). */
export function switchOf(node) {
  if (node.network && node.network.length) return node.network.join(" › ");
  const labels = node.labels || {};
  return labels.switch || labels.leaf || labels.rack || "(no switch declared)";
}

function groupNodes(nodes) {
  const groups = new Map();
  for (const node of [...nodes].sort((a, b) => a.name.localeCompare(b.name, undefined, { numeric: true }))) {
    const key = switchOf(node);
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(node);
  }
  return [...groups.entries()].sort((a, b) => a[0].localeCompare(b[0], undefined, { numeric: true }));
}

function nodeCard(node, colorBy) {
  const samples = latestSamples(node.name);
  const devices = node.devices;
  const isTpu = node.tpu_chips > 0;
  const count = isTpu ? `${node.tpu_chips_used}/${node.tpu_chips} chips` : `${fmtNum(node.gpus_used)}/${node.gpus} GPUs`;
  return h("div", { class: `node node-${node.state}`, dataset: { node: node.name } },
    h("div", { class: "node-head" },
      link(`#/nodes/${encodeURIComponent(node.name)}`, node.name),
      node.state !== "ready" ? stateBadge(node.state) : null,
      h("span", { class: "muted count" }, count)),
    h("div", { class: "cells" }, devices.map((d) => gpuCell(node, d, samples.get(d.index), colorBy))));
}

/** One GPU: colour of its queue or job, the job id, and utilization when known. */
export function gpuCell(node, device, sample, colorBy) {
  const jobs = device.used_by.map((id) => state.jobs.get(id) || { id, queue: "?", name: null, state: "running" });
  const busy = jobs.length > 0;
  const first = jobs[0];
  const color = busy ? (colorBy === "job" ? jobColor(first.id) : queueColor(first.queue)) : null;
  const util = sample ? sample.utilization : null;
  const lines = [`${node.name} GPU ${device.index} · ${device.model}`];
  for (const j of jobs) lines.push(`${jobTitle(j)} · queue ${j.queue} · ${j.state}${j.idle ? " · idle" : ""}`);
  if (busy && device.share_used < 1) lines.push(`${Math.round(device.share_used * 100)}% of the GPU allocated`);
  if (util !== null) lines.push(`utilization ${Math.round(util)}%`);
  if (sample && sample.memory_total) lines.push(`memory ${Math.round((sample.memory_used / sample.memory_total) * 100)}%`);
  const preempting = jobs.some((j) => j.state === "preempting");
  const idle = jobs.some((j) => j.idle);
  const classes = ["gpu", busy ? "used" : "free", preempting ? "preempting" : "", idle ? "idle" : "", device.kind === "tpu" ? "tpu" : ""];
  const attrs = {
    class: classes.filter(Boolean).join(" "),
    title: lines.join("\n"),
    dataset: { node: node.name, gpu: device.index, jobs: device.used_by.join(","), queue: busy ? first.queue : "" },
    style: busy ? { "--c": color, "--share": `${Math.round(Math.min(1, device.share_used || 1) * 100)}%` } : {},
  };
  const children = [
    h("span", { class: "idx" }, String(device.index)),
    busy ? h("span", { class: "who" }, `#${first.id}${jobs.length > 1 ? `+${jobs.length - 1}` : ""}`) : null,
    util !== null ? h("span", { class: "util", title: `${Math.round(util)}%` }, h("i", { style: { width: `${Math.min(100, util)}%` } })) : null,
    util !== null ? h("span", { class: "pct" }, `${Math.round(util)}%`) : null,
  ];
  return busy ? h("a", { href: `#/jobs/${first.id}`, ...attrs }, children) : h("span", attrs, children);
}

function legendItems(colorBy) {
  if (colorBy === "queue") {
    return [...state.queues.map((q) => h("span", { class: "key" }, h("i", { style: { background: queueColor(q.name) } }), q.name)),
      h("span", { class: "key" }, h("i", { class: "free-key" }), "free")];
  }
  const onGpus = new Set(state.nodes.flatMap((n) => n.devices.flatMap((d) => d.used_by)));
  return [...onGpus].sort((a, b) => a - b).slice(0, 24).map((id) => {
    const job = state.jobs.get(id) || { id };
    return h("span", { class: "key" }, h("i", { style: { background: jobColor(id) } }), link(`#/jobs/${id}`, jobTitle(job)));
  });
}

// One node: its devices and jobs, and telemetry plots (utilization, memory, temperature,
// power) when the server reports telemetry.

import { linePlot, seriesOf } from "../plot.js";
import { followTelemetry, latestSamples, state } from "../store.js";
import { fill, fmtBytes, fmtNum, fmtRelative, h, jobTitle, link, stateBadge } from "../util.js";
import { gpuCell, switchOf } from "./map.js";

const SPAN_S = 15 * 60;
const PLOTS = [
  ["utilization", "Utilization", "%", 100],
  ["memory_pct", "Memory used", "%", 100],
  ["temperature", "Temperature", "°C", null],
  ["power", "Power", " W", null],
];

export function mount(root, { name }) {
  const head = h("div", { class: "job-head" });
  const info = h("dl", { class: "facts" });
  const cells = h("div", { class: "cells big" });
  const jobs = h("div");
  const plots = h("div", { class: "plots", id: "node-plots" });
  fill(root, head,
    h("div", { class: "job-grid" },
      h("div", { class: "col" },
        h("section", { class: "panel" }, info),
        h("section", { class: "panel" }, h("div", { class: "panel-head" }, h("h2", {}, "Devices")), cells),
        h("section", { class: "panel" }, h("div", { class: "panel-head" }, h("h2", {}, "Jobs")), jobs)),
      h("div", { class: "col" }, h("section", { class: "panel" }, h("div", { class: "panel-head" }, h("h2", {}, "Telemetry")), plots))));

  let samples = []; // null: the server has no telemetry
  let telemetryLoaded = false;

  function update() {
    const node = state.nodes.find((n) => n.name === name);
    if (!node) {
      fill(head, h("h1", {}, name));
      fill(info, h("dd", {}, state.loaded ? "No such node." : "Loading…"));
      return;
    }
    renderNode(node);
  }

  function renderNode(node) {
    fill(head, h("h1", {}, `Node ${node.name}`), stateBadge(node.state, { id: "node-state" }),
      node.reason ? h("span", { class: "muted" }, node.reason) : null);
    const models = node.models.join(", ") || "–";
    fill(info, [
      ["switch", switchOf(node)],
      ["address", node.address],
      ["GPUs", `${fmtNum(node.gpus_used)} of ${node.gpus} allocated · ${models}`],
      node.tpu_chips ? ["TPU chips", `${node.tpu_chips_used} of ${node.tpu_chips}`] : null,
      ["CPUs / memory", `${fmtNum(node.cpus)} · ${fmtBytes(node.memory)}`],
      ["labels", Object.entries(node.labels).map(([k, v]) => `${k}=${v}`).join(", ") || "–"],
      ["heartbeat", fmtRelative(node.last_heartbeat)],
    ].filter(Boolean).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
    const samples = latestSamples(node.name);
    fill(cells, node.devices.map((d) => gpuCell(node, d, samples.get(d.index), "job")));
    const here = node.jobs.map((id) => state.jobs.get(id) || { id, name: null, queue: "?", state: "running", user: "?" });
    fill(jobs, here.length ? h("ul", { class: "plain" }, here.map((j) => h("li", {}, link(`#/jobs/${j.id}`, jobTitle(j)), " ",
      stateBadge(j.state), h("span", { class: "muted" }, ` ${j.user} · ${j.queue}`))))
      : h("p", { class: "muted" }, "Nothing running here."));
  }

  function renderPlots() {
    if (samples === null) {
      fill(plots, h("p", { class: "muted" }, "This server does not report GPU telemetry."));
      return;
    }
    if (!samples.length) {
      fill(plots, h("p", { class: "muted" }, telemetryLoaded ? "No samples yet." : "Loading telemetry…"));
      return;
    }
    const rows = samples.map((s) => ({ ...s, memory_pct: s.memory_total ? (s.memory_used / s.memory_total) * 100 : null }));
    const errors = rows.filter((s) => s.ecc_errors || s.xid_errors);
    // the last 15 minutes, or since the first sample if that is less (at least a minute)
    const span = Math.min(SPAN_S, Math.max(60, (Date.now() / 1000 - rows[0].at) * 1.1));
    fill(plots, PLOTS.map(([field, title, unit, yMax]) => linePlot(seriesOf(rows, field), { title, unit, yMax, span })),
      errors.length ? h("p", { class: "alert" }, `GPU errors reported: ${errors.length} sample(s) with ECC or Xid errors`) : null);
  }

  const stop = followTelemetry(`/nodes/${encodeURIComponent(name)}/telemetry`, {
    since: () => Date.now() / 1000 - SPAN_S,
    keep: SPAN_S,
    onSamples: (kept) => { samples = kept; telemetryLoaded = true; renderPlots(); },
  });
  update();
  renderPlots();
  return { update, unmount: stop };
}

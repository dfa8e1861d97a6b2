// Queues (quota, usage, borrowing) and the pending jobs with their reasons and estimates.

import { queueBar, queueColor } from "../parts.js";
import { state } from "../store.js";
import { fill, fmtNum, fmtRelative, h, jobGpus, link } from "../util.js";

export function mount(root) {
  const queues = h("div", { class: "queues" });
  const pending = h("div", { id: "pending" });
  fill(root,
    h("section", { class: "panel" }, h("div", { class: "panel-head" }, h("h2", {}, "Queues"),
      h("span", { class: "muted" }, "bar: GPUs in use · solid mark: nominal quota · dashed mark: quota + borrowing limit")), queues),
    h("section", { class: "panel" }, h("div", { class: "panel-head" }, h("h2", {}, "Pending jobs")), pending));

  function update() {
    fill(queues, state.queues.map((q) => h("div", { class: "queue-row" }, queueBar(q),
      h("div", { class: "qmeta muted" }, `weight ${fmtNum(q.weight)}`, q.cohort ? ` · cohort ${q.cohort}` : "",
        ` · fair share ${fmtNum(q.share, 3)}`))));
    fill(pending, pendingTable());
  }

  update();
  return { update };
}

export function pendingTable() {
  const jobs = [...state.jobs.values()].filter((j) => j.state === "pending")
    .sort((a, b) => (a.position ?? 1e9) - (b.position ?? 1e9) || a.id - b.id);
  if (!jobs.length) return h("p", { class: "muted" }, "No job is waiting.");
  return h("table", { class: "table" },
    h("thead", {}, h("tr", {}, ["#", "job", "queue", "user", "GPUs", "waiting", "estimated start", "reason"].map((c) => h("th", {}, c)))),
    h("tbody", {}, jobs.map((j) => h("tr", { dataset: { job: j.id } },
      h("td", { class: "num" }, j.position ?? "–"),
      h("td", {}, link(`#/jobs/${j.id}`, `#${j.id}`), j.name ? ` ${j.name}` : ""),
      h("td", {}, h("i", { class: "swatch", style: { background: queueColor(j.queue) } }), j.queue),
      h("td", {}, j.user),
      h("td", { class: "num" }, jobGpus(j)),
      h("td", {}, fmtRelative(j.submitted_at).replace(" ago", "")),
      h("td", { class: "estimate" }, j.estimated_start ? fmtRelative(j.estimated_start) : "unknown"),
      h("td", { class: "reason" }, j.reason || "")))));
}

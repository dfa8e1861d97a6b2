// The jobs list with filters by state, queue, user and text (id, name, command, reason).

import { queueColor } from "../parts.js";
import { jobList, state } from "../store.js";
import { fill, fmtDuration, fmtRelative, h, jobGpus, link, stateBadge } from "../util.js";

const STATES = ["active", "all", "pending", "running", "preempting", "succeeded", "failed", "cancelled"];
const filters = { text: "", state: "all", queue: "", user: "" }; // kept while the page is open

export function mount(root) {
  const text = h("input", { type: "search", placeholder: "filter: id, name, command, reason", value: filters.text, id: "f-text",
    oninput: (e) => { filters.text = e.target.value; update(); } });
  const stateSel = select("f-state", STATES, filters.state, (v) => { filters.state = v; update(); });
  const queueSel = h("select", { id: "f-queue", onchange: (e) => { filters.queue = e.target.value; update(); } });
  const userSel = h("select", { id: "f-user", onchange: (e) => { filters.user = e.target.value; update(); } });
  const count = h("span", { class: "muted" });
  const body = h("div", { id: "jobs" });
  fill(root, h("section", { class: "panel" },
    h("div", { class: "panel-head" }, h("h2", {}, "Jobs"), count),
    h("div", { class: "filters" }, text, label("state", stateSel), label("queue", queueSel), label("user", userSel)),
    body));

  function update() {
    const all = jobList();
    syncOptions(queueSel, ["", ...new Set([...state.queues.map((q) => q.name), ...all.map((j) => j.queue)])], filters.queue);
    syncOptions(userSel, ["", ...[...new Set(all.map((j) => j.user))].sort()], filters.user);
    const shown = all.filter(matches);
    fill(count, `${shown.length} of ${all.length} jobs`);
    fill(body, shown.length ? jobsTable(shown) : h("p", { class: "muted" }, "No job matches."));
  }

  update();
  return { update };
}

function matches(job) {
  if (filters.state === "active" && !["pending", "running", "preempting"].includes(job.state)) return false;
  if (!["all", "active"].includes(filters.state) && job.state !== filters.state) return false;
  if (filters.queue && job.queue !== filters.queue) return false;
  if (filters.user && job.user !== filters.user) return false;
  const needle = filters.text.trim().toLowerCase();
  if (!needle) return true;
  const command = job.manifest && job.manifest.command;
  const hay = [`#${job.id}`, String(job.id), job.name || "", Array.isArray(command) ? command.join(" ") : command || "", job.reason || ""];
  return hay.some((s) => s.toLowerCase().includes(needle));
}

function jobsTable(jobs) {
  const now = Date.now() / 1000;
  return h("table", { class: "table" },
    h("thead", {}, h("tr", {}, ["id", "name", "user", "queue", "state", "GPUs", "submitted", "run time", "attempt", "reason"].map((c) => h("th", {}, c)))),
    h("tbody", {}, jobs.map((j) => h("tr", { dataset: { job: j.id, state: j.state } },
      h("td", { class: "num" }, link(`#/jobs/${j.id}`, j.array_task_id != null ? `#${j.array_job_id}_${j.array_task_id}` : `#${j.id}`)),
      h("td", { class: "name" }, link(`#/jobs/${j.id}`, j.name || "–")),
      h("td", {}, j.user),
      h("td", {}, h("i", { class: "swatch", style: { background: queueColor(j.queue) } }), j.queue),
      h("td", {}, stateBadge(j.state), j.idle ? h("span", { class: "badge idle" }, "idle") : null),
      h("td", { class: "num" }, jobGpus(j)),
      h("td", {}, fmtRelative(j.submitted_at, now)),
      h("td", {}, j.started_at ? fmtDuration((j.ended_at ?? now) - j.started_at) : "–"),
      h("td", { class: "num" }, j.attempt),
      h("td", { class: "reason" }, j.reason || "")))));
}

function select(id, options, value, onChange) {
  const el = h("select", { id, onchange: (e) => onChange(e.target.value) });
  syncOptions(el, options, value);
  return el;
}

function syncOptions(el, options, value) {
  const current = [...el.options].map((o) => o.value).join("\n");
  if (current !== options.join("\n")) {
    fill(el, options.map((o) => h("option", { value: o }, o || "any")));
  }
  el.value = value;
}

function label(text, control) {
  return h("label", { class: "filter" }, h("span", {}, text), control);
}

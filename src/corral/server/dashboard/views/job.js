// One job: state and actions, placement, attempts, events, GPU utilization and live logs.

import * as api from "../api.js";
import { queueColor, transition } from "../parts.js";
import { linePlot, seriesOf } from "../plot.js";
import { act, followTelemetry, state } from "../store.js";
import { fill, fmtClock, fmtDuration, fmtRelative, h, jobGpus, link, sleep, stateBadge, toast } from "../util.js";

const LOG_POLL_MS = 1000;

export function mount(root, { id }) {
  const jobId = Number(id);
  let job = null;
  let alive = true;
  let loading = false;
  let armed = null; // the action waiting for its confirming second click
  const log = { task: 0, attempt: null, offset: 0, follow: true, key: "" };
  let samples = [];

  const head = h("div", { class: "job-head" });
  const info = h("dl", { class: "facts" });
  const placement = h("div");
  const attempts = h("div");
  const events = h("div");
  const util = h("div", { id: "job-util" });
  const utilPanel = h("section", { class: "panel", hidden: true }, h("div", { class: "panel-head" }, h("h2", {}, "GPU utilization")), util);
  const advice = h("div");
  const logBox = h("pre", { class: "logs", id: "logs", tabindex: 0 });
  const logControls = h("div", { class: "filters" });
  logBox.addEventListener("scroll", () => {
    log.follow = logBox.scrollTop + logBox.clientHeight >= logBox.scrollHeight - 8;
  });

  fill(root,
    head,
    h("div", { class: "job-grid" },
      h("div", { class: "col" },
        h("section", { class: "panel" }, info, advice),
        h("section", { class: "panel" }, h("div", { class: "panel-head" }, h("h2", {}, "Placement")), placement),
        h("section", { class: "panel" }, h("div", { class: "panel-head" }, h("h2", {}, "Attempts")), attempts)),
      h("div", { class: "col" },
        utilPanel,
        h("section", { class: "panel" }, h("div", { class: "panel-head" }, h("h2", {}, "Logs"), logControls), logBox),
        h("section", { class: "panel" }, h("div", { class: "panel-head" }, h("h2", {}, "Events")), events))));

  async function load() {
    if (loading || !alive) return;
    loading = true;
    try {
      job = await api.get(`/jobs/${jobId}`);
      state.jobs.set(job.id, job);
      render();
      if (job.state === "pending") loadAdvice();
      else fill(advice);
    } catch (err) {
      if (err.status === 404) fill(root, h("section", { class: "panel" }, h("h2", {}, `Job ${jobId}`), h("p", {}, err.message)));
      else toast(err.message, "error");
    } finally {
      loading = false;
    }
  }

  async function loadAdvice() {
    try {
      const { hints } = await api.get(`/jobs/${jobId}/advice`);
      fill(advice, hints.length ? h("div", { class: "advice" }, h("b", {}, "Would start sooner: "), h("ul", {}, hints.map((x) => h("li", {}, x)))) : null);
    } catch { fill(advice); }
  }

  function actionButton(kind, label, allowed) {
    if (!allowed || state.denied[kind]) return null;
    const isArmed = armed === kind;
    return h("button", {
      type: "button", class: `btn ${kind === "cancel" ? "danger" : "warn"}${isArmed ? " armed" : ""}`, dataset: { action: kind },
      onclick: async () => {
        if (!isArmed) { armed = kind; renderHead(); setTimeout(() => { if (armed === kind) { armed = null; renderHead(); } }, 5000); return; }
        armed = null;
        try {
          // an element of a job array by its name: the array's id alone would act on every element
          const ref = job.array_task_id != null ? `${job.array_job_id}_${job.array_task_id}` : jobId;
          job = await act(kind, ref);
          toast(`job ${ref}: ${job.state}`);
          render();
        } catch (err) {
          toast(err.status === 403 ? `not allowed: ${err.message}` : err.message, "error");
          renderHead();
        }
      },
    }, isArmed ? `Confirm ${label.toLowerCase()}?` : label);
  }

  function renderHead() {
    if (!job) return;
    const active = ["pending", "running", "preempting"].includes(job.state);
    fill(head,
      h("h1", {}, `Job #${job.id}`, job.name ? h("span", { class: "muted" }, ` ${job.name}`) : null),
      stateBadge(job.state, { id: "job-state" }),
      job.idle ? h("span", { class: "badge idle", id: "job-idle", title: "its GPUs have stayed near 0% utilization" }, "idle") : null,
      job.attempt ? h("span", { class: "badge attempt", id: "job-attempt" }, `attempt ${job.attempt}`) : null,
      h("span", { class: "spacer" }),
      actionButton("preempt", "Preempt", job.state === "running"),
      actionButton("cancel", "Cancel", active));
  }

  function render() {
    renderHead();
    const now = Date.now() / 1000;
    const command = job.manifest.command;
    const facts = [
      ["user", job.user],
      ["queue", h("span", {}, h("i", { class: "swatch", style: { background: queueColor(job.queue) } }), link("#/queues", job.queue))],
      ["priority", `${job.priority_class ?? job.priority}${job.preemptible ? " · preemptible" : " · not preemptible"}`],
      ["kind", job.kind],
      job.roles.length
        ? ["roles", h("span", { id: "job-roles" }, job.roles.map((r) => h("div", {}, r)))]
        : ["resources", `${job.nodes} node(s) × ${job.tasks_per_node} task(s) · ${jobGpus(job)} GPUs`],
      ["submitted", `${fmtClock(job.submitted_at)} (${fmtRelative(job.submitted_at, now)})`],
      ["started", job.started_at ? `${fmtClock(job.started_at)} · ran ${fmtDuration((job.ended_at ?? now) - job.started_at)}` : "–"],
      job.idle_since ? ["idle", h("span", { id: "job-idle-since" }, `GPUs near 0% since ${fmtClock(job.idle_since)} (${fmtDuration(now - job.idle_since)})${job.idle ? " · flagged" : ""}`)] : null,
      job.state === "pending" ? ["position", `${job.position ?? "–"} · estimated start ${job.estimated_start ? fmtRelative(job.estimated_start, now) : "unknown"}`] : null,
      job.ended_at ? ["ended", `${fmtClock(job.ended_at)}${job.exit_code !== null ? ` · exit code ${job.exit_code}` : ""}`] : null,
      job.reason ? ["reason", h("span", { id: "job-reason" }, job.reason)] : null,
      ["command", h("code", {}, Array.isArray(command) ? command.join(" ") : command)],
    ].filter(Boolean);
    fill(info, facts.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
    fill(placement, job.tasks.length ? h("table", { class: "table" },
      h("thead", {}, h("tr", {}, [...(job.roles.length ? ["role", "role rank"] : []), "rank", "node", "local", "GPUs", "state", "pid", "exit"].map((c) => h("th", {}, c)))),
      h("tbody", {}, [...job.tasks].sort((a, b) => a.rank - b.rank).map((t) => h("tr", { dataset: { rank: t.rank, role: t.role } },
        job.roles.length ? h("td", {}, t.role) : null,
        job.roles.length ? h("td", { class: "num" }, t.role_rank) : null,
        h("td", { class: "num" }, t.rank),
        h("td", {}, link(`#/nodes/${encodeURIComponent(t.node)}`, t.node)),
        h("td", { class: "num" }, t.local_rank),
        h("td", {}, (t.mig.length ? t.mig : t.gpus).join(", ") + (t.gpu_share < 1 ? ` (${Math.round(t.gpu_share * 100)}%)` : "")),
        h("td", {}, stateBadge(t.state)),
        h("td", { class: "num" }, t.pid ?? "–"),
        h("td", { class: "num" }, t.exit_code ?? "–")))))
      : h("p", { class: "muted" }, "Not placed."));
    fill(attempts, job.attempts.length ? h("table", { class: "table" },
      h("thead", {}, h("tr", {}, ["attempt", "nodes", "started", "ended", "outcome"].map((c) => h("th", {}, c)))),
      h("tbody", {}, job.attempts.map((a) => h("tr", {},
        h("td", { class: "num" }, a.attempt), h("td", {}, a.nodes.join(", ")),
        h("td", {}, fmtClock(a.started_at)), h("td", {}, fmtClock(a.ended_at)), h("td", {}, a.outcome || "running")))))
      : h("p", { class: "muted" }, "No attempt yet."));
    fill(events, h("ul", { class: "feed", id: "job-events" }, [...job.events].reverse().map((e) => h("li", { dataset: { to: e.to_state } },
      h("span", { class: "when" }, fmtClock(e.at)),
      h("span", { class: "what" }, transition(e), e.attempt ? h("span", { class: "muted" }, ` (attempt ${e.attempt})`) : null),
      e.reason ? h("span", { class: "why" }, e.reason) : null))));
    renderLogControls();
  }

  function renderLogControls() {
    const world = job.world_size;
    const attemptsSeen = [...new Set([...job.attempts.map((a) => a.attempt), job.attempt])].sort((a, b) => a - b);
    const taskSel = h("select", { id: "log-task", onchange: (e) => { log.task = Number(e.target.value); resetLog(); } },
      Array.from({ length: Math.min(world, 256) }, (_, i) => h("option", { value: i, selected: i === log.task }, `task ${i}`)));
    const attemptSel = h("select", { id: "log-attempt", onchange: (e) => { log.attempt = e.target.value === "" ? null : Number(e.target.value); resetLog(); } },
      h("option", { value: "", selected: log.attempt === null }, "latest attempt"),
      attemptsSeen.map((a) => h("option", { value: a, selected: log.attempt === a }, `attempt ${a}`)));
    fill(logControls, taskSel, attemptSel);
  }

  function resetLog() {
    log.offset = 0;
    log.key = "";
    logBox.textContent = "";
    log.follow = true;
  }

  async function pollLogs() {
    while (alive) {
      if (job && job.state !== "pending") {
        try {
          const out = await api.get(`/jobs/${jobId}/logs`, { task: log.task, attempt: log.attempt ?? undefined, offset: log.offset });
          const key = `${out.task}/${out.attempt}`;
          if (log.key && key !== log.key) { resetLog(); log.key = key; continue; } // a new attempt: from its start
          log.key = key;
          if (out.data) {
            logBox.append(out.data);
            log.offset = out.offset;
            if (log.follow) logBox.scrollTop = logBox.scrollHeight;
          }
          if (!out.data && out.complete && !["running", "preempting", "pending"].includes(job.state)) {
            if (!logBox.textContent) logBox.textContent = "(no output)";
            await sleep(LOG_POLL_MS * 5);
            continue;
          }
        } catch (err) {
          if (err.status !== 404) console.warn(err);
        }
      }
      await sleep(LOG_POLL_MS);
    }
  }

  function renderTelemetry(kept) {
    if (kept === null) { utilPanel.hidden = true; return; }
    samples = kept;
    utilPanel.hidden = false;
    const first = samples.length ? samples[0].at : Date.now() / 1000;
    const span = Math.max(60, Math.min(3600, (Date.now() / 1000 - first) * 1.1));
    // one line per GPU; a shared GPU's utilization is the whole GPU's (every job on it)
    fill(util, linePlot(seriesOf(samples, "utilization", (s) => `${s.node} GPU ${s.gpu}${(s.job_ids || []).length > 1 ? " (shared)" : ""}`),
      { unit: "%", yMax: 100, span }));
  }

  let stopTelemetry = () => {};
  load().then(() => {
    pollLogs();
    if (!alive) return;
    // the job's GPUs while it held them, over its last hour (the server keeps an hour)
    stopTelemetry = followTelemetry(`/jobs/${jobId}/telemetry`, {
      since: () => {
        const first = job && (job.attempts.find((a) => a.started_at) || {}).started_at;
        const start = first ?? (job && job.started_at); // a requeued job's earlier attempts too
        return start ? Math.max(start - 5, Date.now() / 1000 - 3600) : null;
      },
      keep: 3600,
      onSamples: renderTelemetry,
    });
  });

  return {
    update(kind, detail) {
      if (kind === "data" || (kind === "event" && detail.entity === "job" && String(detail.entity_id) === String(jobId))) load();
    },
    unmount() { alive = false; stopTelemetry(); },
  };
}

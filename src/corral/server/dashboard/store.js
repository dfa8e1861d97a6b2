// The cluster as the dashboard knows it, kept live: the events stream when the server has
// one (each event triggers a refresh), else polling the plain endpoints every 1.5 s. GPU
// readings for the map come with the nodes; telemetry history is followed per view.

import * as api from "./api.js";
import { sleep } from "./util.js";

const POLL_FAST_MS = 1500; // without the events stream
const POLL_SLOW_MS = 5000; // with it (heartbeats, queue shares)
const TELEMETRY_MS = 5000;
const TELEMETRY_KEEP_S = 15 * 60;
const FEED_MAX = 60;
const FEED_SEED = 25; // recorded events shown when the page opens
const JOB_PAGE = 1000; // jobs asked for at a time (GET /jobs answers at most its `limit`)
const RECENT_JOBS = 200; // ended jobs shown besides the active ones

export const state = {
  nodes: [],
  queues: [],
  jobs: new Map(), // id -> job (active ones plus the most recent others)
  loaded: false,
  live: { mode: "connecting", error: null, updated: 0 },
  features: { events: null, telemetry: null }, // null: not known yet
  feed: [], // newest first: {at, entity, entity_id, from_state, to_state, reason}
  denied: { cancel: false, preempt: false }, // the API said 403
};

const listeners = new Set();

/** fn(kind, detail) after each change: "data", "event" (detail: the event), "live". */
export function subscribe(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

function emit(kind, detail) {
  for (const fn of [...listeners]) {
    try { fn(kind, detail); } catch (err) { console.error(err); }
  }
}

let inflight = null;
let again = false;

/** Reload nodes, queues and jobs (coalesced: one request set at a time). */
export function refresh() {
  if (inflight) { again = true; return inflight; }
  inflight = load().finally(() => {
    inflight = null;
    if (again) { again = false; refresh(); }
  });
  return inflight;
}

async function load() {
  try {
    const [nodes, queues, active, recent] = await Promise.all([
      api.get("/nodes"), api.get("/queues"), allJobs(), api.get("/jobs", { all: true, limit: RECENT_JOBS }),
    ]);
    const jobs = new Map();
    for (const job of [...recent.jobs, ...active.jobs]) jobs.set(job.id, job);
    const derive = state.loaded && state.features.events !== true;
    const changed = changedJobs(jobs).filter(() => derive);
    if (derive) nodeFeed(nodes.nodes);
    state.nodes = nodes.nodes;
    state.queues = queues.queues;
    state.jobs = jobs;
    state.loaded = true;
    state.live.error = null;
    state.live.updated = Date.now() / 1000;
    if (changed.length) await feedFromJobs(changed);
  } catch (err) {
    state.live.error = err.message;
  }
  emit("data");
}

/**
 * Every job GET /jobs lists with ``params`` (by default the active ones), oldest first:
 * a page of ``JOB_PAGE`` at a time, newest first, passing each page's ``next`` as
 * ``before`` while ``has_more`` (new jobs never shift a page), as ``corral jobs`` does.
 */
export async function allJobs(params = {}) {
  const pages = [];
  let before = null;
  for (;;) {
    const page = await api.get("/jobs", { ...params, limit: JOB_PAGE, before });
    pages.push(page.jobs);
    if (!page.has_more || page.next === null || page.next === undefined) break;
    before = page.next;
  }
  return { jobs: pages.reverse().flat() };
}

// The feed shows what happened since the page opened (with a margin for clock skew).
const opened = Date.now() / 1000 - 30;
const fed = new Set();

const polled = new Map(); // job id -> "state/attempt" as the last poll saw it

/** Jobs whose state or attempt differs from the last poll, or new ones (most recent 20). */
function changedJobs(jobs) {
  const ids = [];
  for (const [id, job] of jobs) {
    const now = `${job.state}/${job.attempt}`;
    const before = polled.get(id);
    polled.set(id, now);
    if (before === undefined ? job.submitted_at >= opened : before !== now) ids.push(id);
  }
  return ids.sort((a, b) => b - a).slice(0, 20);
}

/**
 * Without the events stream: the feed from the jobs' own recorded transitions (fetched for
 * the jobs that changed between two polls), so that short states such as "preempting"
 * show even when they began and ended between two polls.
 */
async function feedFromJobs(ids) {
  const details = await Promise.all(ids.map((id) => api.get(`/jobs/${id}`).catch(() => null)));
  for (const job of details) {
    if (!job) continue;
    state.jobs.set(job.id, job);
    for (const e of job.events) {
      const key = `job/${job.id}/${e.at}/${e.to_state}`;
      if (e.at < opened || e.from_state === e.to_state || fed.has(key)) continue;
      fed.add(key);
      pushFeed({ ...e, entity: "job", entity_id: String(job.id) });
    }
  }
}

function nodeFeed(nodes) {
  const at = Date.now() / 1000;
  const old = new Map(state.nodes.map((n) => [n.name, n.state]));
  for (const node of nodes) {
    const was = old.get(node.name);
    if (was === undefined || was === node.state) continue;
    pushFeed({ at, entity: "node", entity_id: node.name, attempt: 0, from_state: was, to_state: node.state, reason: node.reason || "" });
  }
}

function pushFeed(event) {
  if (event.id !== undefined && state.feed.some((e) => e.id === event.id)) return;
  state.feed.push(event);
  state.feed.sort((a, b) => b.at - a.at || (b.id ?? 0) - (a.id ?? 0));
  if (state.feed.length > FEED_MAX) state.feed.length = FEED_MAX;
}

let refreshTimer = null;

function refreshSoon() {
  if (refreshTimer) return;
  refreshTimer = setTimeout(() => { refreshTimer = null; refresh(); }, 100);
}

let started = false;

/** Start keeping the state live (once, after login). */
export function startLive() {
  if (started) return;
  started = true;
  refresh();
  pollLoop();
  eventsLoop();
}

async function pollLoop() {
  for (;;) {
    await sleep(state.live.mode === "events" ? POLL_SLOW_MS : POLL_FAST_MS);
    if (document.visibilityState !== "hidden" || state.live.mode !== "events") await refresh();
  }
}

/**
 * The activity feed starts with the latest recorded events; the stream then continues
 * right after the newest of them (Last-Event-ID), so none is missed or shown twice.
 * Returns that id, or null (no events yet, or no events API: the stream starts from now).
 */
async function seedFeed() {
  try {
    const { events } = await api.get("/events", { limit: FEED_SEED });
    for (const event of events) pushFeed(event);
    if (events.length) emit("event", events[events.length - 1]);
    return events.length ? events[events.length - 1].id : null;
  } catch {
    return null;
  }
}

async function eventsLoop() {
  let lastId = await seedFeed();
  let failures = 0;
  for (;;) {
    try {
      const result = await api.streamEvents({
        lastEventId: lastId,
        onOpen: () => {
          failures = 0;
          state.features.events = true;
          setMode("events");
          refresh(); // catch up on what happened while disconnected
        },
        onEvent: (event, id) => {
          lastId = id ?? event.id ?? lastId;
          pushFeed(event);
          emit("event", event);
          refreshSoon();
        },
      });
      if (result === "absent") {
        state.features.events = false;
        setMode("polling");
        return;
      }
    } catch (err) {
      if (err instanceof api.ApiError && err.status === 401) return;
      failures += 1;
    }
    setMode("polling");
    await sleep(Math.min(15000, 1000 * 2 ** Math.min(failures, 4)));
  }
}

function setMode(mode) {
  if (state.live.mode === mode) return;
  state.live.mode = mode;
  emit("live");
}

/**
 * Follow GPU telemetry at ``path`` ("/nodes/NAME/telemetry" or "/jobs/ID/telemetry"):
 * first every sample after ``since()``, then every 5 s only the newer ones (the API's
 * ``since`` is exclusive, in epoch seconds). ``onSamples(all)`` gets every sample kept so
 * far, oldest first, dropping those older than ``keep`` seconds. Returns a stop function;
 * stops by itself on a server without the endpoint (``state.features.telemetry`` false).
 */
export function followTelemetry(path, { since, keep = TELEMETRY_KEEP_S, onSamples }) {
  let alive = true;
  (async () => {
    let kept = [];
    let last = null;
    while (alive) {
      const start = last ?? since();
      if (start !== null) {
        try {
          const { samples } = await api.get(path, { since: start });
          if (!alive) return;
          state.features.telemetry = true;
          const fresh = samples.filter((s) => s.at > start);
          if (fresh.length) last = fresh[fresh.length - 1].at;
          const cutoff = Date.now() / 1000 - keep;
          kept = [...kept, ...fresh].filter((s) => s.at >= cutoff);
          onSamples(kept);
        } catch (err) {
          if (err.routeMissing) {
            state.features.telemetry = false;
            onSamples(null);
            return;
          }
          if (err.status === 404) return; // no such node or job
        }
      }
      await sleep(TELEMETRY_MS);
    }
  })();
  return () => { alive = false; };
}

/** The latest reading of each GPU of ``node`` as the nodes API reports it: gpu -> reading. */
export function latestSamples(node) {
  const out = new Map();
  const found = state.nodes.find((n) => n.name === node);
  for (const d of found ? found.devices : []) {
    if (d.utilization === null || d.utilization === undefined) continue;
    out.set(d.index, { gpu: d.index, utilization: d.utilization, memory_used: d.memory_used, memory_total: d.memory, temperature: d.temperature });
  }
  return out;
}

/** Cancel or preempt ``jobId``; a 403 hides that button from then on. */
export async function act(kind, jobId) {
  try {
    const job = await api.post(`/jobs/${jobId}/${kind}`);
    state.jobs.set(job.id, job);
    refreshSoon();
    return job;
  } catch (err) {
    if (err instanceof api.ApiError && err.status === 403) {
      state.denied[kind] = true;
      emit("data");
    }
    throw err;
  }
}

export function queueNames() {
  return state.queues.map((q) => q.name);
}

/** Jobs sorted by id, newest first. */
export function jobList() {
  return [...state.jobs.values()].sort((a, b) => b.id - a.id);
}

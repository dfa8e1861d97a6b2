// The cluster as the dashboard knows it, kept live: the events stream when the server has
// one (each event triggers a refresh), else polling the plain endpoints every 1.5 s.

import * as api from "./api.js";
import { sleep } from "./util.js";

const POLL_FAST_MS = 1500; // without the events stream
const POLL_SLOW_MS = 5000; // with it (heartbeats, queue shares)
const TELEMETRY_MS = 5000;
const TELEMETRY_KEEP_S = 15 * 60;
const FEED_MAX = 60;

export const state = {
  nodes: [],
  queues: [],
  jobs: new Map(), // id -> job (active ones plus the most recent others)
  loaded: false,
  live: { mode: "connecting", error: null, updated: 0 },
  features: { events: null, telemetry: null }, // null: not known yet
  feed: [], // newest first: {at, entity, entity_id, from_state, to_state, reason}
  telemetry: new Map(), // node -> samples, oldest first
  denied: { cancel: false, preempt: false }, // the API said 403
};

const listeners = new Set();

/** fn(kind) after each change: "data", "event", "live", "telemetry". */
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
      api.get("/nodes"), api.get("/queues"), api.get("/jobs"), api.get("/jobs", { all: true, limit: 200 }),
    ]);
    const jobs = new Map();
    for (const job of [...recent.jobs, ...active.jobs]) jobs.set(job.id, job);
    if (state.loaded && state.features.events !== true) deriveFeed(jobs, nodes.nodes);
    state.nodes = nodes.nodes;
    state.queues = queues.queues;
    state.jobs = jobs;
    state.loaded = true;
    state.live.error = null;
    state.live.updated = Date.now() / 1000;
  } catch (err) {
    state.live.error = err.message;
  }
  emit("data");
}

/** Without the events stream: the feed from state changes seen between two polls. */
function deriveFeed(jobs, nodes) {
  const at = Date.now() / 1000;
  for (const [id, job] of jobs) {
    const before = state.jobs.get(id);
    if (before && before.state === job.state && before.attempt === job.attempt) continue;
    if (!before && job.submitted_at < state.live.updated - 5) continue; // old, just listed
    pushFeed({
      at, entity: "job", entity_id: String(id), attempt: job.attempt,
      from_state: before ? before.state : "", to_state: job.state,
      reason: job.reason || "",
    });
  }
  const old = new Map(state.nodes.map((n) => [n.name, n.state]));
  for (const node of nodes) {
    const was = old.get(node.name);
    if (was === node.state) continue;
    pushFeed({ at, entity: "node", entity_id: node.name, attempt: 0, from_state: was || "", to_state: node.state, reason: node.reason || "" });
  }
}

function pushFeed(event) {
  state.feed.unshift(event);
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
  telemetryLoop();
}

async function pollLoop() {
  for (;;) {
    await sleep(state.live.mode === "events" ? POLL_SLOW_MS : POLL_FAST_MS);
    if (document.visibilityState !== "hidden" || state.live.mode !== "events") await refresh();
  }
}

async function eventsLoop() {
  let lastId = null;
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

async function telemetryLoop() {
  const lastAt = new Map();
  for (;;) {
    if (state.features.telemetry === false) return;
    for (const node of state.nodes) {
      const since = lastAt.get(node.name) ?? Date.now() / 1000 - TELEMETRY_KEEP_S;
      let samples;
      try {
        samples = (await api.get(`/nodes/${encodeURIComponent(node.name)}/telemetry`, { since })).samples;
      } catch (err) {
        if (err.routeMissing) {
          state.features.telemetry = false;
          emit("telemetry");
          return;
        }
        continue;
      }
      state.features.telemetry = true;
      const kept = state.telemetry.get(node.name) || [];
      const fresh = samples.filter((s) => s.at > since);
      if (fresh.length) lastAt.set(node.name, Math.max(...fresh.map((s) => s.at)));
      const cutoff = Date.now() / 1000 - TELEMETRY_KEEP_S;
      state.telemetry.set(node.name, [...kept, ...fresh].filter((s) => s.at >= cutoff));
    }
    emit("telemetry");
    await sleep(TELEMETRY_MS);
  }
}

/** The latest sample of each GPU of ``node`` (not older than a minute): gpu -> sample. */
export function latestSamples(node) {
  const out = new Map();
  const recent = Date.now() / 1000 - 60;
  for (const sample of state.telemetry.get(node) || []) {
    if (sample.at >= recent) out.set(sample.gpu, sample);
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

// The REST API at /api/v1 with the user's bearer token (kept in sessionStorage).

const BASE = "/api/v1";
const TOKEN_KEY = "corral.token";

export class ApiError extends Error {
  constructor(status, message, routeMissing = false) {
    super(message);
    this.status = status;
    this.routeMissing = routeMissing; // 404 because the server has no such endpoint
  }
}

export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** Take a token from a "#token=..." login link into sessionStorage and drop it from the URL. */
export function takeTokenFromFragment() {
  const match = /^#token=([^&/]+)/.exec(location.hash);
  if (!match) return false;
  setToken(decodeURIComponent(match[1]));
  history.replaceState(null, "", `${location.pathname}${location.search}#/`);
  return true;
}

function headers(extra = {}) {
  const token = getToken();
  return { Accept: "application/json", ...(token ? { Authorization: `Bearer ${token}` } : {}), ...extra };
}

let onUnauthorized = () => {};

/** Called with the server's message when a request comes back 401 (token missing/revoked). */
export function setUnauthorizedHandler(handler) {
  onUnauthorized = handler;
}

async function failure(res) {
  let body = null;
  try { body = await res.json(); } catch { /* not JSON */ }
  // FastAPI answers an unknown route with {"detail": "Not Found"}; Corral's own 404s
  // carry {"code", "message"}.
  const routeMissing = res.status === 404 && body && body.detail === "Not Found";
  const message = (body && (body.message || body.detail)) || `${res.status} ${res.statusText}`;
  const error = new ApiError(res.status, typeof message === "string" ? message : JSON.stringify(message), routeMissing);
  if (res.status === 401) onUnauthorized(error.message);
  return error;
}

export async function get(path, params = {}) {
  const query = new URLSearchParams(Object.entries(params).filter(([, v]) => v !== undefined && v !== null));
  const url = `${BASE}${path}${query.toString() ? `?${query}` : ""}`;
  const res = await fetch(url, { headers: headers() });
  if (!res.ok) throw await failure(res);
  return res.json();
}

export async function post(path, body = undefined) {
  const res = await fetch(`${BASE}${path}`, {
    method: "POST",
    headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!res.ok) throw await failure(res);
  return res.json();
}

/**
 * Read the server-sent-events stream at /events/stream (fetch, not EventSource, so that
 * the bearer token goes in a header). Calls onEvent(event, id) per message; resolves when
 * the stream ends. Resolves "absent" if the server has no such endpoint.
 */
export async function streamEvents({ lastEventId, onOpen, onEvent, signal }) {
  const extra = { Accept: "text/event-stream" };
  if (lastEventId !== null && lastEventId !== undefined) extra["Last-Event-ID"] = String(lastEventId);
  const res = await fetch(`${BASE}/events/stream`, { headers: headers(extra), signal, cache: "no-store" });
  if (!res.ok) {
    const error = await failure(res);
    if (error.routeMissing) return "absent";
    throw error;
  }
  onOpen();
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return "ended";
    buffer += value.replace(/\r\n?/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const message = parseBlock(block);
      if (message.data === null) continue;
      try {
        onEvent(JSON.parse(message.data), message.id);
      } catch (err) {
        console.warn("corral: bad event", err, message.data);
      }
    }
  }
}

function parseBlock(block) {
  let id = null;
  const data = [];
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "id") id = value;
    else if (field === "data") data.push(value);
  }
  return { id, data: data.length ? data.join("\n") : null };
}

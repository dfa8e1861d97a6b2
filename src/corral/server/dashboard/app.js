// The dashboard's shell: login, the top bar, hash routes and the live indicator.
// Routes: #/ (cluster map), #/queues, #/jobs, #/jobs/ID, #/nodes/NAME.

import * as api from "./api.js";
import { startLive, state, subscribe } from "./store.js";
import { fill, fmtClock, h } from "./util.js";
import * as jobView from "./views/job.js";
import * as jobsView from "./views/jobs.js";
import * as mapView from "./views/map.js";
import * as nodeView from "./views/node.js";
import * as queuesView from "./views/queues.js";

const ROUTES = [
  [/^#?\/?$/, "map", mapView],
  [/^#\/queues$/, "queues", queuesView],
  [/^#\/jobs$/, "jobs", jobsView],
  [/^#\/jobs\/(?<id>\d+)$/, "jobs", jobView],
  [/^#\/nodes\/(?<name>[^/]+)$/, "map", nodeView],
];

const app = document.getElementById("app");
const SIGNED_OUT_KEY = "corral.signedOut";
let current = null;

function main() {
  api.takeTokenFromFragment();
  const reason = sessionStorage.getItem(SIGNED_OUT_KEY);
  sessionStorage.removeItem(SIGNED_OUT_KEY);
  if (api.getToken()) start();
  else showLogin(reason ? `Signed out: ${reason}` : "");
  window.addEventListener("hashchange", () => { // a login link opened in this tab
    if (!shell && api.takeTokenFromFragment()) start();
  });
}

function showLogin(error = "") {
  const input = h("input", { type: "password", id: "token", name: "token", autocomplete: "current-password", placeholder: "API token", required: true });
  const message = h("p", { class: "error", id: "login-error", role: "alert" }, error);
  const form = h("form", { class: "login", id: "login" },
    h("h1", {}, h("span", { class: "logo" }, "◼"), " Corral"),
    h("p", { class: "muted" }, "Sign in with an API token (", h("code", {}, "corral token create --user NAME"),
      "), or open the link that ", h("code", {}, "corral up"), " prints."),
    input, h("button", { type: "submit", class: "btn primary" }, "Sign in"), message);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const token = input.value.trim();
    if (!token) return;
    api.setToken(token);
    try {
      await api.get("/queues");
      if (!location.hash.startsWith("#/")) history.replaceState(null, "", "#/");
      start();
    } catch (err) {
      api.setToken(null);
      fill(message, err.status === 401 ? "This token was not accepted." : `Cannot reach the server: ${err.message}`);
    }
  });
  fill(app, h("div", { class: "login-wrap" }, form));
  input.focus();
}

let shell = null;

function start() {
  const nav = h("nav", { class: "tabs" });
  const live = h("span", { id: "live", class: "live" });
  const main = h("main", { id: "view" });
  shell = { nav, live, main };
  api.setUnauthorizedHandler((message) => { // the token was revoked: back to the login form
    sessionStorage.setItem(SIGNED_OUT_KEY, message);
    api.setToken(null);
    location.reload();
  });
  fill(app,
    h("header", { class: "top" },
      h("a", { class: "brand", href: "#/" }, h("span", { class: "logo" }, "◼"), "Corral"),
      nav, h("span", { class: "spacer" }), live,
      h("button", { type: "button", class: "btn ghost", id: "logout", onclick: logout }, "Sign out")),
    main);
  subscribe((kind, detail) => {
    if (kind === "live" || kind === "data") renderLive();
    if (current && current.update) current.update(kind, detail);
  });
  window.addEventListener("hashchange", route);
  route();
  startLive();
  setInterval(renderLive, 1000);
}

function logout() {
  api.setToken(null);
  location.hash = "#/";
  location.reload();
}

function route() {
  if (/^#token=/.test(location.hash)) {
    api.takeTokenFromFragment();
  }
  const hash = location.hash || "#/";
  let match = null;
  let tab = "map";
  let view = mapView;
  for (const [pattern, name, module] of ROUTES) {
    match = pattern.exec(hash);
    if (match) { tab = name; view = module; break; }
  }
  const params = match && match.groups ? { ...match.groups } : {};
  if (params.name) params.name = decodeURIComponent(params.name);
  fill(shell.nav, [["map", "#/", "Cluster"], ["queues", "#/queues", "Queues"], ["jobs", "#/jobs", "Jobs"]].map(([name, href, label]) =>
    h("a", { href, class: name === tab ? "on" : "", "aria-current": name === tab ? "page" : null }, label)));
  if (current && current.unmount) current.unmount();
  shell.main.replaceChildren();
  current = view.mount(shell.main, params);
  window.scrollTo(0, 0);
}

function renderLive() {
  if (!shell) return;
  const { mode, error, updated } = state.live;
  const ok = !error && state.loaded;
  const how = mode === "events" ? "live · events" : mode === "polling" ? "live · polling" : "connecting";
  shell.live.className = `live ${ok ? "ok" : "bad"}`;
  shell.live.dataset.mode = mode;
  shell.live.title = error ? `last update failed: ${error}` : `updated ${fmtClock(updated)}`;
  fill(shell.live, h("i", {}), error ? `offline: ${error}` : how);
}

main();

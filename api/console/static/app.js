// The console shell: sign-in with an owner token, the router, and the live event feed.

import { ApiError, follow, get, setToken, token } from "./api.js";
import { clearError, h, replace, showError } from "./ui.js";
import * as approvals from "./approvals.js";
import * as jobs from "./jobs.js";
import * as nodes from "./nodes.js";
import * as review from "./review.js";
import * as runs from "./runs.js";
import * as skills from "./skills.js";
import * as tokens from "./tokens.js";

const main = document.getElementById("main");
const nav = document.getElementById("nav");
const live = document.getElementById("live");
const signOut = document.getElementById("sign-out");

const ROUTES = [
  [/^#\/approvals$/, approvals.page, "approvals"],
  [/^#\/runs$/, runs.page, "runs"],
  [/^#\/runs\/([\w-]+)$/, runs.runPage, "runs"],
  [/^#\/skills$/, skills.page, "skills"],
  [/^#\/skills\/([a-z0-9-]+)$/, skills.skillPage, "skills"],
  [/^#\/review$/, review.page, "review"],
  [/^#\/jobs$/, jobs.page, "jobs"],
  [/^#\/nodes$/, nodes.page, "nodes"],
  [/^#\/tokens$/, tokens.page, "tokens"],
];

// Feed listeners of the page on show; dropped when the page changes.
let listeners = new Set();
let cleanup = [];
let stopFeed = null;

function onFeed(listener) {
  listeners.add(listener);
}

function startFeed() {
  stopFeed = follow("/api/events", {
    onEvent(event) {
      for (const listener of listeners) listener(event);
      if (event.kind.startsWith("approval.")) approvals.refreshBadge();
    },
    onState(state, error) {
      live.hidden = false;
      live.className = `live live-${state}`;
      live.textContent = state === "open" ? "live" : state;
      if (state === "error" && error && error.status >= 400) showError(error, "Live updates");
      // A fresh connection may have missed changes made while it was down: show them now.
      if (state === "open") for (const listener of listeners) listener({ kind: "reconnected" });
    },
  });
}

function render() {
  for (const stop of cleanup) stop();
  cleanup = [];
  listeners = new Set();
  clearError();
  const hash = location.hash || "#/approvals";
  const route = ROUTES.find(([pattern]) => pattern.test(hash));
  if (!route) {
    location.hash = "#/approvals";
    return;
  }
  const [pattern, page, name] = route;
  for (const link of nav.querySelectorAll("a")) {
    link.classList.toggle("active", link.dataset.page === name);
  }
  const params = hash.match(pattern).slice(1).map(decodeURIComponent);
  const context = { main, params, onFeed, onLeave: (stop) => cleanup.push(stop) };
  Promise.resolve(page(context, ...params)).catch((error) => {
    showError(error);
    if (!main.childElementCount) replace(main, h("p", { class: "muted" }, "This page could not be shown."));
  });
}

// An owner token passes an owner-only route; an agent token gets 403 owner_only there.
async function check(candidate) {
  try {
    await get("/api/settings", { token: candidate });
  } catch (error) {
    if (error.status === 403) {
      const why = error.code === "owner_only"
        ? "This is an agent token; the console needs an owner token."
        : "This token can't manage an owner's fleet; the console needs an owner token.";
      throw new ApiError(403, error.code, `${why} (${error.message})`);
    }
    throw error;
  }
}

function showSignIn(message) {
  nav.hidden = true;
  signOut.hidden = true;
  live.hidden = true;
  const input = h("input", { id: "owner-token", name: "token", type: "password", autocomplete: "off", required: true, spellcheck: "false" });
  const problem = h("p", { class: "error", role: "alert", hidden: !message }, message || "");
  const button = h("button", { type: "submit" }, "Sign in");
  const form = h("form", { class: "panel sign-in", onsubmit: async (event) => {
    event.preventDefault();
    button.disabled = true;
    const candidate = input.value.trim();
    try {
      await check(candidate);
      setToken(candidate);
      start();
    } catch (error) {
      replace(problem, error.message);
      problem.hidden = false;
    } finally {
      button.disabled = false;
    }
  } },
    h("h1", {}, "Sign in"),
    h("label", { for: "owner-token" }, "Owner token"),
    input,
    h("p", { class: "muted" }, "Kept for this tab only. `skillfleet up` prints the owner token."),
    problem,
    button);
  replace(main, form);
  input.focus();
}

function start() {
  nav.hidden = false;
  signOut.hidden = false;
  if (!stopFeed) startFeed();
  approvals.refreshBadge();
  render();
}

signOut.addEventListener("click", () => {
  setToken(null);
  if (stopFeed) stopFeed();
  stopFeed = null;
  showSignIn();
});

window.addEventListener("hashchange", () => {
  if (token()) render();
});

if (token()) {
  start();
  // A token kept from earlier in this tab may have been revoked since.
  check(token()).catch((error) => {
    if (error.status === 401 || error.status === 403) {
      setToken(null);
      showSignIn(error.message);
    }
  });
} else {
  showSignIn();
}

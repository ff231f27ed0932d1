// The console shell: sign-in with an owner token or GitHub, the router, and the live event feed.

import { ApiError, follow, get, setToken, token } from "./api.js";
import { clearError, h, replace, setBadge, showError } from "./ui.js";
import * as approvals from "./approvals.js";
import { forget, githubSection, keepFresh } from "./signin.js";

const main = document.getElementById("main");
const nav = document.getElementById("nav");
const live = document.getElementById("live");
const signOut = document.getElementById("sign-out");

// The approvals inbox comes with the shell; other pages load when first visited.
const lazy = (file, name) => async (...args) => (await import(file))[name](...args);
const short = (id) => id.slice(0, 8);
// Each route: its pattern, page, tab, and what a link back to it says.
const ROUTES = [
  [/^#\/approvals$/, approvals.page, "approvals", () => "Approvals"],
  [/^#\/chat$/, lazy("./chat.js", "page"), "chat", () => "Chat"],
  [/^#\/chat\/(.+)$/, lazy("./chat.js", "page"), "chat", (id) => `Chat ${id}`],
  [/^#\/questions$/, lazy("./questions.js", "page"), "questions", () => "Questions"],
  [/^#\/runs$/, lazy("./runs.js", "page"), "runs", () => "Runs"],
  [/^#\/runs\/([\w-]+)$/, lazy("./runs.js", "runPage"), "runs", (id) => `Run ${short(id)}`],
  [/^#\/calls\/([\w-]+)$/, lazy("./calls.js", "callPage"), "calls", (id) => `Call ${short(id)}`],
  [/^#\/skills$/, lazy("./skills.js", "page"), "skills", () => "Skills"],
  [/^#\/skills\/([a-z0-9-]+)$/, lazy("./skills.js", "skillPage"), "skills", (name) => name],
  [/^#\/review$/, lazy("./review.js", "page"), "review", () => "Review"],
  [/^#\/jobs$/, lazy("./jobs.js", "page"), "jobs", () => "Jobs"],
  [/^#\/nodes$/, lazy("./nodes.js", "page"), "nodes", () => "Nodes"],
  [/^#\/tokens$/, lazy("./tokens.js", "page"), "tokens", () => "Tokens"],
  [/^#\/secrets$/, lazy("./secrets.js", "page"), "secrets", () => "Secrets"],
  [/^#\/keys$/, lazy("./keys.js", "page"), "keys", () => "Keys"],
  [/^#\/settings$/, lazy("./settings.js", "page"), "settings", () => "Settings"],
];

const routeOf = (hash) => ROUTES.find(([pattern]) => pattern.test(hash));
const paramsOf = (hash, pattern) => hash.match(pattern).slice(1).map(decodeURIComponent);

// The pages visited in this tab, the one on show last: a page's link back goes to the one
// before it (a run opened from a call goes back to that call), and following it steps back.
const trail = [];

function visit(hash) {
  if (trail.length >= 2 && trail[trail.length - 2] === hash) trail.pop();
  else if (trail[trail.length - 1] !== hash) trail.push(hash);
  if (trail.length > 50) trail.shift();
}

// A link to where the owner came from; where they came from nowhere, to `fallback`.
function back(fallback, label) {
  const from = trail.length >= 2 ? trail[trail.length - 2] : null;
  const route = from && routeOf(from);
  const [href, text] = route ? [from, route[3](...paramsOf(from, route[0]))] : [fallback, label];
  return h("p", { class: "back" }, h("a", { href, class: "back-link" }, `← ${text}`));
}

// Feed listeners of the page on show; dropped when the page changes.
let listeners = new Set();
let cleanup = [];
let stopFeed = null;

function onFeed(listener) {
  listeners.add(listener);
}

const onApprovals = () => ["", "#/approvals"].includes(location.hash);
const onReview = () => location.hash === "#/review";
const onQuestions = () => location.hash === "#/questions";
const QUESTION_CHANGES = new Set(["question.created", "question.answered"]);
const countQuestions = lazy("./questions.js", "refreshBadge");

// What waits on the Review page (drafts and edit plans), counted in its tab. Feed events
// come in bursts: one count at a time, and one more if any came meanwhile.
const REVIEW_CHANGES = new Set(["review.waiting", "approval.created", "approval.answered", "reconnected"]);
let reviewCount = null;

async function countReview() {
  if (reviewCount) {
    reviewCount.again = true;
    return;
  }
  reviewCount = { again: false };
  try {
    do {
      reviewCount.again = false;
      try {
        setBadge("review-count", (await get("/api/review")).needs_review);
      } catch {
        setBadge("review-count", 0); // a server without the route, or a token gone: no count
      }
    } while (reviewCount.again);
  } finally {
    reviewCount = null;
  }
}

function startFeed() {
  let opened = false;
  stopFeed = follow("/api/events", {
    onEvent(event) {
      for (const listener of listeners) listener(event);
      if ((event.kind === "approval.created" || event.kind === "approval.answered") && !onApprovals()) {
        approvals.refreshBadge();
      }
      if (REVIEW_CHANGES.has(event.kind) && !onReview()) countReview(); // Review counts itself
      if (QUESTION_CHANGES.has(event.kind) && !onQuestions()) countQuestions(); // Questions counts itself
    },
    onState(state, error) {
      live.hidden = false;
      live.className = `live live-${state}`;
      live.textContent = state === "open" ? "live" : state;
      if (state === "error" && error && error.status >= 400) showError(error, "Live updates");
      // Changes made while the feed was down are replayed from Last-Event-ID, but the first
      // connection starts at "now": pages reload once if it opened after they loaded.
      if (state === "open" && opened) for (const listener of listeners) listener({ kind: "reconnected" });
      if (state === "open") opened = true;
    },
  });
}

function leave() {
  for (const stop of cleanup) stop();
  cleanup = [];
  listeners = new Set();
  delete main.dataset.ready;
}

let shown = 0;

function render() {
  leave();
  clearError();
  const hash = location.hash || "#/approvals";
  const route = routeOf(hash);
  if (!route) {
    location.hash = "#/approvals";
    return;
  }
  const [pattern, page, name] = route;
  for (const link of nav.querySelectorAll("a")) {
    link.classList.toggle("active", link.dataset.page === name);
  }
  visit(hash);
  const params = paramsOf(hash, pattern);
  // Each page draws into its own element, so a page left before its data came can't draw over
  // the next one.
  const view = h("div", { class: "view" });
  replace(main, view);
  const current = ++shown;
  const context = { main: view, params, onFeed, onLeave: (stop) => cleanup.push(stop), back };
  Promise.resolve(page(context, ...params))
    .catch((error) => {
      if (current !== shown) return;
      showError(error);
      if (!view.childElementCount) replace(view, h("p", { class: "muted" }, "This page could not be shown."));
    })
    .finally(() => {
      if (current !== shown) return;
      // The first page with its data on screen: what the console's speed is measured by.
      if (!performance.getEntriesByName("console-ready").length) performance.mark("console-ready");
      main.dataset.ready = name;
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
  main.dataset.ready = "sign-in";
  githubSection(start).then((area) => {
    if (!area || !form.isConnected) return;
    form.insertBefore(h("p", { class: "muted" }, "or paste an owner token:"), form.children[1]);
    form.insertBefore(area, form.children[1]);
  });
}

function start() {
  nav.hidden = false;
  signOut.hidden = false;
  if (!stopFeed) startFeed();
  if (!onApprovals()) approvals.refreshBadge(); // the approvals page sets it itself
  if (!onReview()) countReview();
  if (!onQuestions()) countQuestions();
  render();
}

function signOutWith(message) {
  forget(); // a GitHub sign-in's token is deleted while this tab still holds it
  setToken(null);
  if (stopFeed) stopFeed();
  stopFeed = null;
  leave();
  showSignIn(message);
}

signOut.addEventListener("click", () => signOutWith());
window.addEventListener("skillfleet:unauthorized", (event) => {
  if (token()) signOutWith(event.detail.message);
});

window.addEventListener("hashchange", () => {
  if (!token()) return;
  render();
  // Skills and drafts change from other pages too (a draft enabled on Skills): count again.
  if (!onReview()) countReview();
});

if (token()) {
  start();
  keepFresh();
  // A token kept from earlier in this tab may have been revoked since: check once the first
  // page is up (its own requests would show a 401 as well).
  setTimeout(() => check(token()).catch((error) => {
    if (error.status === 401 || error.status === 403) signOutWith(error.message);
  }), 500);
} else {
  showSignIn();
}

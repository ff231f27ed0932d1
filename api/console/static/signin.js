// Signing in with GitHub's device flow: the code to enter on GitHub, polling at the interval
// GitHub asks for, and refreshing the sign-in before its token expires.

import { get, post, del, setToken } from "./api.js";
import { h, replace } from "./ui.js";

const SESSION_KEY = "skillfleet.github-session";
const REFRESH_AHEAD_MS = 5 * 60 * 1000; // renew this long before the token expires
const RETRY_MS = 30 * 1000;
let refreshTimer = null;

function session() {
  try {
    return JSON.parse(sessionStorage.getItem(SESSION_KEY) || "null");
  } catch {
    return null;
  }
}

function keep(value) {
  if (value) sessionStorage.setItem(SESSION_KEY, JSON.stringify(value));
  else sessionStorage.removeItem(SESSION_KEY);
}

// The GitHub part of the sign-in page, or nothing when the operator did not turn it on.
export async function githubSection(onSignedIn) {
  let info;
  try {
    info = await get("/api/signin/github");
  } catch {
    return null; // an older server, or none: the token form alone
  }
  if (!info || !info.enabled) return null;
  const area = h("div", { class: "github-sign-in", id: "github-sign-in" });
  const begin = h("button", { type: "button", id: "github-start" }, "Sign in with GitHub");
  begin.addEventListener("click", () => run(area, begin, onSignedIn));
  replace(area, begin);
  return area;
}

async function run(area, begin, onSignedIn) {
  begin.disabled = true;
  const problem = h("p", { class: "error", role: "alert", id: "github-error" });
  let started;
  try {
    started = await post("/api/signin/github/start");
  } catch (error) {
    replace(area, problem, begin);
    replace(problem, error.message);
    begin.disabled = false;
    return;
  }
  const waiting = h("p", { class: "muted", id: "github-waiting" }, "Waiting for GitHub…");
  replace(area,
    h("p", {}, "Open ",
      h("a", { href: started.verification_uri, target: "_blank", rel: "noopener noreferrer", id: "github-link" },
        started.verification_uri),
      " and enter this code:"),
    h("p", { class: "user-code", id: "github-code" }, started.user_code),
    waiting);
  let interval = started.interval;
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, Math.max(1, interval) * 1000));
    let answer;
    try {
      answer = await post("/api/signin/github/poll", { signin: started.signin });
    } catch (error) {
      if (error.code === "github_unavailable" || error.code === "unreachable") {
        replace(waiting, `${error.message} Still waiting…`);
        continue; // the code is still good: ask again at the next interval
      }
      begin.disabled = false;
      begin.textContent = "Start again";
      replace(area, problem, begin);
      replace(problem, error.message);
      return;
    }
    if (answer.status === "pending") {
      interval = answer.interval;
      continue;
    }
    setToken(answer.token);
    keep({ token_id: answer.token_id, expires_at: answer.expires_at, login: answer.github_login });
    keepFresh();
    onSignedIn();
    return;
  }
}

// Renew a GitHub sign-in ahead of its expiry, again and again while the tab is open.
export function keepFresh() {
  clearTimeout(refreshTimer);
  const current = session();
  if (!current) return;
  const left = new Date(current.expires_at).getTime() - Date.now();
  const wait = Math.max(10_000, left > 2 * REFRESH_AHEAD_MS ? left - REFRESH_AHEAD_MS : left / 2);
  refreshTimer = setTimeout(async () => {
    try {
      const renewed = await post("/api/signin/github/refresh");
      keep({ ...current, expires_at: renewed.expires_at });
      keepFresh();
    } catch (error) {
      // A sign-in GitHub no longer vouches for was ended by the server: its 401 signs out.
      // GitHub out of reach (502) ends nothing: try again shortly, while the token lasts.
      if (error.status !== 401 && error.status !== 403) {
        refreshTimer = setTimeout(keepFresh, RETRY_MS);
      }
    }
  }, wait);
}

// Sign out: a GitHub sign-in's token is deleted, not just forgotten.
export async function forget() {
  clearTimeout(refreshTimer);
  const current = session();
  keep(null);
  if (!current) return;
  try {
    await del(`/api/tokens/${current.token_id}`);
  } catch {
    // already gone (expired or ended): nothing left to delete
  }
}

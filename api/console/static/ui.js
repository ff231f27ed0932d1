// Small DOM helpers: every text goes in as text, never as HTML (arguments come from agents).

export function h(tag, attrs = {}, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) element.addEventListener(key.slice(2), value);
    else if (key === "class") element.className = value;
    else if (key === "dataset") Object.assign(element.dataset, value);
    else if (value === true) element.setAttribute(key, "");
    else element.setAttribute(key, String(value));
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function replace(element, ...children) {
  element.replaceChildren();
  append(element, children);
}

const banner = () => document.getElementById("error");

// The API's own message (never a blank page); `where` says what was being done.
export function showError(error, where) {
  const message = error && error.message ? error.message : String(error);
  const code = error && error.code ? ` (${error.code})` : "";
  const details = error && error.errors ? problems(error.errors) : [];
  replace(banner(), h("span", {}, where ? `${where}: ` : "", message, code,
    details.length ? h("ul", { class: "problems" }, details.map((d) => h("li", {}, d))) : null),
    h("button", { class: "quiet", type: "button", "aria-label": "Dismiss", onclick: clearError }, "×"));
  banner().hidden = false;
}

// The API's `errors` (a list, or fields mapped to lists, as marshmallow gives them) as lines.
function problems(errors, prefix = "") {
  if (typeof errors === "string") return [prefix ? `${prefix}: ${errors}` : errors];
  if (Array.isArray(errors)) return errors.flatMap((e) => problems(e, prefix));
  if (errors && typeof errors === "object") {
    return Object.entries(errors).flatMap(([key, value]) => {
      const at = key === "json" || key === "query" ? prefix : prefix ? `${prefix}.${key}` : key;
      return problems(value, at);
    });
  }
  return [];
}

export function clearError() {
  banner().hidden = true;
  banner().replaceChildren();
}

export const hash8 = (hash) => (hash ? String(hash).slice(0, 8) : "");

export function when(iso) {
  if (!iso) return "—";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return String(iso);
  return date.toLocaleString(undefined, { dateStyle: "short", timeStyle: "medium" });
}

export function ago(iso) {
  if (!iso) return "never";
  const seconds = Math.round((Date.now() - new Date(iso).getTime()) / 1000);
  if (seconds < 60) return `${Math.max(seconds, 0)} s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  return `${Math.round(seconds / 3600)} h ago`;
}

export function json(value) {
  return JSON.stringify(value, null, 2);
}

// A unified diff with added and removed lines marked.
export function diff(text) {
  const lines = String(text).split("\n").map((line) => {
    let kind = "";
    if (line.startsWith("+++") || line.startsWith("---")) kind = "file";
    else if (line.startsWith("@@")) kind = "hunk";
    else if (line.startsWith("+")) kind = "add";
    else if (line.startsWith("-")) kind = "del";
    return h("span", { class: `line ${kind}` }, line, "\n");
  });
  return h("pre", { class: "diff" }, lines);
}

export function status(value) {
  return h("span", { class: `status status-${value}` }, String(value).replaceAll("_", " "));
}

// The panel a page shows when this server has no routes for it yet.
export function unavailable(title, route, hint) {
  return h("section", { class: "panel unavailable" },
    h("h1", {}, title),
    h("p", {}, `Not available on this server: ${route} answered 404.`),
    hint ? h("p", { class: "muted" }, hint) : null);
}

// A table whose cells carry their column's heading, which a phone's width shows beside each
// value once the table has become a list (console.css).
export function table(headings, rows, attrs = {}) {
  for (const row of rows) {
    [...row.children].forEach((cell, index) => {
      if (headings[index]) cell.dataset.label = headings[index];
    });
  }
  return h("table", attrs,
    h("thead", {}, h("tr", {}, headings.map((text) => h("th", {}, text)))),
    h("tbody", {}, rows));
}

// A count in the navigation (pending approvals, what waits for review); hidden at zero.
export function setBadge(id, count) {
  const badge = document.getElementById(id);
  if (!badge) return;
  badge.textContent = count;
  badge.hidden = !count;
}

export function definitions(pairs) {
  return h("dl", { class: "facts" },
    pairs.filter(([, value]) => value !== undefined).map(([term, value]) => [
      h("dt", {}, term), h("dd", {}, value === null || value === "" ? "—" : value),
    ]));
}

// `work` one run at a time: a call while it runs makes it run once more afterwards (events come
// in bursts, and an answer drawn late must not put back what changed since). Every caller's
// promise settles once what it asked for is drawn.
export function serial(work) {
  let running = null;
  return () => {
    if (running) {
      running.again = true;
      return running.promise;
    }
    const state = { again: false };
    running = state;
    state.promise = (async () => {
      try {
        do {
          state.again = false;
          await work();
        } while (state.again);
      } finally {
        running = null;
      }
    })();
    return state.promise;
  };
}

export function busy(button, work) {
  return async (...args) => {
    button.disabled = true;
    try {
      return await work(...args);
    } finally {
      button.disabled = false;
    }
  };
}

// The REST API as the console uses it: JSON requests with the owner token, errors in the
// API's own shape, and Server-Sent Events read with fetch (EventSource can't send a token).

const TOKEN_KEY = "skillfleet.owner-token";

export class ApiError extends Error {
  constructor(status, code, message, errors) {
    super(message);
    this.status = status;
    this.code = code;
    this.errors = errors;
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

function headers(extra = {}, tokenValue = token()) {
  return tokenValue ? { Authorization: `Bearer ${tokenValue}`, ...extra } : extra;
}

async function errorFrom(response) {
  const text = await response.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  if (body && typeof body.message === "string") {
    return new ApiError(response.status, body.code || "error", body.message, body.errors);
  }
  const what = `${response.status} ${response.statusText}`.trim();
  return new ApiError(response.status, "http_error", `The server answered ${what}.`);
}

const UNREACHABLE = "The server can't be reached; check that skillfleet is running.";

// One request; resolves to {data, response}. `body` is JSON unless it is a FormData.
export async function call(method, path, body, options = {}) {
  const init = { method, headers: headers({}, options.token), cache: "no-store" };
  if (body instanceof FormData) {
    init.body = body;
  } else if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch {
    throw new ApiError(0, "unreachable", UNREACHABLE);
  }
  if (!response.ok) {
    const error = await errorFrom(response);
    // The tab's token stopped working (revoked or deleted): the shell goes back to sign-in.
    if (response.status === 401 && !options.token) {
      window.dispatchEvent(new CustomEvent("skillfleet:unauthorized", { detail: error }));
    }
    throw error;
  }
  if (response.status === 204) return { data: null, response };
  const type = response.headers.get("Content-Type") || "";
  const data = type.includes("json") ? await response.json() : await response.text();
  return { data, response };
}

// A request whose answer is read as it comes (a chat's stream): the response once it is ok
// (a 204 included), an ApiError otherwise. `signal` aborts it.
export async function open(method, path, body, signal) {
  const init = { method, headers: headers({ Accept: "text/event-stream" }), cache: "no-store", signal };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    if (signal && signal.aborted) throw error;
    throw new ApiError(0, "unreachable", UNREACHABLE);
  }
  if (!response.ok) {
    const error = await errorFrom(response);
    if (response.status === 401) window.dispatchEvent(new CustomEvent("skillfleet:unauthorized", { detail: error }));
    throw error;
  }
  return response;
}

export const get = async (path, options) => (await call("GET", path, undefined, options)).data;
export const post = async (path, body) => (await call("POST", path, body ?? {})).data;
export const put = async (path, body) => (await call("PUT", path, body)).data;
export const del = async (path) => (await call("DELETE", path)).data;

// A list route's page: its items, the next page's address (the Link header's rel="next",
// null on the last page) and, on a first page, X-Total-Count ("37", or "1000+" past the cap).
export async function list(path) {
  const { data, response } = await call("GET", path);
  const link = /<([^>]*)>;\s*rel="next"/.exec(response.headers.get("Link") || "");
  return { items: data, next: link ? link[1] : null, total: response.headers.get("X-Total-Count") };
}

// Every page of a list, for those the console shows whole (skills, nodes).
export async function listAll(path) {
  const items = [];
  for (let next = path; next;) {
    const page = await list(next);
    items.push(...page.items);
    next = page.next;
  }
  return { items };
}

// Follow an SSE route. Reconnects after a drop with Last-Event-ID so nothing is missed;
// stops for good on a 4xx or when `until(event)` is true. Returns a function that stops it.
export function follow(path, { onEvent, onState = () => {}, until = () => false, lastId = null }) {
  let stopped = false;
  let controller = null;
  let last = lastId;
  let retry = 1000;

  function dispatch(frame) {
    let id = null;
    let kind = "message";
    const data = [];
    for (const line of frame.split("\n")) {
      if (!line || line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "id") id = value;
      else if (field === "event") kind = value;
      else if (field === "data") data.push(value);
      else if (field === "retry" && /^\d+$/.test(value)) retry = Number(value);
    }
    if (id !== null) last = id;
    if (!data.length) return false;
    let parsed;
    try {
      parsed = JSON.parse(data.join("\n"));
    } catch {
      parsed = data.join("\n");
    }
    const event = { id, kind, data: parsed };
    onEvent(event);
    return until(event);
  }

  async function read(response) {
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return false;
      buffer += value.replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (dispatch(frame)) return true;
      }
    }
  }

  async function run() {
    while (!stopped) {
      controller = new AbortController();
      try {
        const extra = { Accept: "text/event-stream" };
        if (last) extra["Last-Event-ID"] = last;
        const response = await fetch(path, { headers: headers(extra), signal: controller.signal, cache: "no-store" });
        if (!response.ok) {
          const error = await errorFrom(response);
          if (response.status === 401) {
            window.dispatchEvent(new CustomEvent("skillfleet:unauthorized", { detail: error }));
          }
          onState("error", error);
          if (response.status >= 400 && response.status < 500) return;
        } else {
          onState("open");
          if (await read(response)) {
            onState("ended");
            controller.abort();
            return;
          }
        }
      } catch (e) {
        if (stopped) return;
        onState("error", new ApiError(0, "unreachable", UNREACHABLE));
      }
      if (stopped) return;
      onState("reconnecting");
      await new Promise((resolve) => setTimeout(resolve, retry));
    }
  }

  run();
  return () => {
    stopped = true;
    if (controller) controller.abort();
  };
}

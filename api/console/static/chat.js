// Chat: talk to the assistant. The history comes from GET /api/chats/<id>; a prompt is sent as
// the AI SDK's DefaultChatTransport sends it (POST /api/chat) and its answer read from the UI
// message stream as it comes; Stop, Retry, and an answer still streaming picked up on opening.

import { get, list, open, post } from "./api.js";
import { drawPart, usage } from "./chatparts.js";
import { picker } from "./modelpicker.js";
import { h, replace, showError, status } from "./ui.js";
import { apply, assistant, readChunks } from "./uistream.js";

function randomId(prefix) {
  const bytes = crypto.getRandomValues(new Uint8Array(8));
  return `${prefix}-${[...bytes].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
}

const chatHash = (id) => `#/chat/${encodeURIComponent(id)}`;
const atEnd = () => window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 80;
const toEnd = () => window.scrollTo(0, document.documentElement.scrollHeight);

// What the transport would send of a message: the server compares ids, roles and the user's
// text, so an answer goes with its text only (not its tool outputs).
function sent(message) {
  const parts = message.parts.filter((p) => p.type === "text").map((p) => ({ type: "text", text: p.text }));
  return { id: message.id, role: message.role, parts };
}

async function recentChats(current) {
  const { items } = await list("/api/chats?page_size=20");
  return h("nav", { class: "chat-list", "aria-label": "Chats" },
    h("a", { href: "#/chat", class: "new-chat" }, "+ New chat"),
    items.map((chat) => h("a", { href: chatHash(chat.chat_id), class: chat.chat_id === current ? "active" : null },
      chat.chat_id)));
}

async function loadHistory(id) {
  try {
    return (await get(`/api/chats/${encodeURIComponent(id)}`)).messages;
  } catch (error) {
    if (error.status === 404) return null; // a chat not started yet
    throw error;
  }
}

export async function page({ main, onLeave }, chatId) {
  const id = chatId || randomId("chat");
  let known = Boolean(chatId);
  const messages = [];
  const views = new WeakMap(); // message -> {element, body, footer}
  const drawn = new WeakMap(); // part -> element
  let streaming = null; // {controller, message}
  let hint = null; // what an empty chat says
  let left = false; // the page is no longer on show

  const thread = h("div", { id: "chat-thread", class: "thread" });
  const prompt = h("textarea", { id: "chat-prompt", name: "prompt", rows: 3, required: true,
    placeholder: "Ask the assistant… (Enter sends, Shift+Enter a new line)" });
  const sendButton = h("button", { type: "submit", class: "primary" }, "Send");
  const form = h("form", { id: "chat-form", class: "chat-form" },
    h("label", { for: "chat-prompt" }, "Message"), prompt, h("div", { class: "actions" }, sendButton));
  const aside = h("aside", { class: "chat-aside" });

  function view(message) {
    let found = views.get(message);
    if (!found) {
      const body = h("div", { class: "parts" });
      const footer = h("div", { class: "message-foot" });
      const element = h("article", { class: `message message-${message.role}` }, body, footer);
      found = { element, body, footer };
      views.set(message, found);
    }
    found.element.dataset.messageId = message.id || "";
    return found;
  }

  function drawParts(message) {
    const { body } = view(message);
    for (const part of message.parts) {
      const before = drawn.get(part);
      if (before && !part.dirty) continue;
      const element = drawPart(part, before);
      if (before) before.replaceWith(element);
      else body.append(element);
      drawn.set(part, element);
      part.dirty = false;
    }
  }

  // Under each answer: its usage and how it ended; on the last one, Stop or Retry.
  function drawFeet() {
    const last = messages.findLast((m) => m.role === "assistant");
    for (const message of messages.filter((m) => m.role === "assistant")) {
      const meta = message.metadata || {};
      const live = streaming && streaming.message === message;
      const error = meta.error && !message.parts.some((p) => p.type === "error")
        ? h("p", { class: "error chat-error" }, meta.error.message) : null;
      const ended = !live && meta.status && meta.status !== "succeeded" ? status(meta.status) : null;
      let action = null;
      if (live) action = h("button", { type: "button", class: "danger stop", onclick: stop }, "Stop");
      else if (message === last && !streaming) action = h("button", { type: "button", class: "retry", onclick: () => retry(message) }, "Retry");
      replace(view(message).footer, error, h("div", { class: "foot-line" }, usage(meta.usage), ended, action));
    }
    sendButton.disabled = Boolean(streaming);
  }

  function show(message) {
    if (hint) hint.remove();
    thread.append(view(message).element);
    drawParts(message);
  }

  async function stop(event) {
    event.target.disabled = true;
    const message = streaming && streaming.message;
    if (!message) return;
    try {
      await post(`/api/turns/${encodeURIComponent(message.metadata.turnId || message.id)}/stop`);
    } catch (error) {
      showError(error, "Stopping the answer");
      event.target.disabled = false;
    }
  }

  // Read an answer's stream into a new message, in place of `replacing` (a retried answer, or
  // the history's copy of an answer resumed) or after the rest.
  async function follow(response, replacing) {
    const message = assistant(response.headers.get("X-Skillfleet-Turn"));
    const old = replacing || messages.find((m) => m.role === "assistant" && m.id === message.id);
    if (old) {
      messages[messages.indexOf(old)] = message;
      view(old).element.replaceWith(view(message).element);
    } else {
      messages.push(message);
      thread.append(view(message).element);
    }
    streaming.message = message;
    drawFeet();
    await readChunks(response, (chunk) => {
      const stick = atEnd(); // an owner reading further up is not pulled down
      const part = apply(message, chunk);
      if (part) part.dirty = true;
      view(message);
      drawParts(message);
      if (chunk.type === "finish" || chunk.type === "message-metadata" || chunk.type === "start") drawFeet();
      if (stick) toEnd();
    });
  }

  const resumePath = () => `/api/chat/${encodeURIComponent(id)}/stream`;

  // One request answered by a stream: sending, retrying, or resuming. A stream that breaks off
  // before its answer finished is resumed (the turn goes on without it).
  async function stream(method, path, body, replacing = null, quiet = false) {
    const controller = new AbortController();
    streaming = { controller, message: null };
    drawFeet();
    let response = null;
    try {
      response = await open(method, path, body, controller.signal);
      if (response.status === 204) return "idle"; // nothing streaming
      if (!known) {
        known = true; // the chat exists now: its address is kept, without drawing the page again
        history.replaceState(null, "", chatHash(id));
        recentChats(id).then((chats) => replace(aside, chats)).catch(() => {});
      }
      await follow(response, replacing);
      return true;
    } catch (error) {
      if (controller.signal.aborted) return true;
      if (response) return true; // broken off while read: resumed below
      if (quiet && (error.status === 0 || error.status >= 500)) return "again"; // the server is away for now
      showError(error, method === "GET" ? "Resuming the answer" : "Sending");
      return false;
    } finally {
      const broken = response && response.status === 200 && streaming.message && !streaming.message.finishReason
        ? streaming.message : null;
      streaming = null;
      if (!controller.signal.aborted) {
        drawFeet();
        if (broken) setTimeout(() => resumeBroken(broken), 1000);
      }
    }
  }

  // An answer whose stream broke off: resumed, or, when it ended meanwhile, read from the history.
  async function resumeBroken(message) {
    if (left || streaming || !messages.includes(message)) return;
    const result = await stream("GET", resumePath(), undefined, null, true);
    if (result === "again") setTimeout(() => resumeBroken(message), 2000);
    if (result !== "idle") return;
    const fresh = ((await loadHistory(id)) || []).find((m) => m.id === message.id);
    if (!fresh || left || !messages.includes(message)) return;
    fresh.metadata = fresh.metadata || {};
    messages[messages.indexOf(message)] = fresh;
    view(message).element.replaceWith(view(fresh).element);
    drawParts(fresh);
    drawFeet();
  }

  async function send(text) {
    const user = { id: randomId("msg"), role: "user", parts: [{ type: "text", text }] };
    const body = { id, messages: [...messages.map(sent), user], trigger: "submit-message" };
    messages.push(user);
    show(user);
    toEnd();
    prompt.value = "";
    if (!(await stream("POST", "/api/chat", body))) {
      messages.splice(messages.indexOf(user), 1); // refused: nothing was kept, the text comes back
      view(user).element.remove();
      prompt.value = text;
    }
  }

  function retry(answer) {
    const index = messages.indexOf(answer);
    const body = { id, messages: messages.slice(0, index).map(sent), trigger: "regenerate-message", messageId: answer.id };
    return stream("POST", "/api/chat", body, answer);
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const text = prompt.value.trim();
    if (text && !streaming) send(text);
  });
  prompt.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
  onLeave(() => {
    left = true;
    if (streaming) streaming.controller.abort(); // the answer goes on; reopening resumes it
  });

  const [held, chats] = await Promise.all([known ? loadHistory(id) : null, recentChats(id).catch(() => null)]);
  if (held === null) known = false;
  for (const message of held || []) {
    messages.push({ ...message, metadata: message.metadata || {} });
    show(messages[messages.length - 1]);
  }
  replace(aside, chats);
  hint = held && held.length ? null : h("p", { class: "muted chat-empty" },
    "Ask the assistant to do something with your skills; calls that need your approval show here with Approve and Deny.");
  replace(main,
    h("div", { class: "chat-page" },
      h("div", { class: "chat-main" },
        h("h1", {}, "Chat"),
        picker(),
        hint,
        thread, form),
      aside));
  drawFeet();
  if (held && held.length) stream("GET", resumePath()); // an answer still streaming (a chat of calls only has none)
  prompt.focus();
}

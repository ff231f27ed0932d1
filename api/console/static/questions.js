// Questions: what agents asked the owner (ask_owner) and the secrets they asked for
// (request_secret). A secret is typed into a password field and sent once; it is never shown.

import { get, post } from "./api.js";
import { h, hash8, replace, serial, setBadge, showError, status, table, when } from "./ui.js";

const QUESTION_CHANGES = new Set(["question.created", "question.answered", "reconnected"]);

export async function refreshBadge() {
  try {
    setBadge("question-count", (await get("/api/questions?status=pending")).length);
  } catch {
    setBadge("question-count", 0); // a server without the route, or a token gone: no count
  }
}

// Who asked: the turn of a chat, or a job's run.
function askedBy(question) {
  if (question.job_run_id) return ["job run ", h("code", {}, question.job_run_id.slice(0, 8))];
  if (question.turn_id) return ["turn ", h("code", { class: "turn" }, question.turn_id)];
  return "an agent outside any turn";
}

function answerForm(question, send) {
  if (question.choices && question.choices.length) {
    return h("div", { class: "actions choices" }, question.choices.map((choice) =>
      h("button", { type: "button", onclick: () => send(question, { answer: choice }) }, choice)));
  }
  const input = h("textarea", { name: "answer", rows: 2, maxlength: 4000, required: true });
  return h("form", { class: "actions answer", onsubmit: (event) => {
    event.preventDefault();
    send(question, { answer: input.value });
  } }, input, h("button", { type: "submit", class: "primary" }, "Answer"));
}

// The skill version a secret allows is always named: the one the card showed when it was asked,
// or, once the skill changed, the one it is now, which the owner must choose knowingly.
function allowedVersion(question) {
  if (!question.skill_name) return { label: "Store secret" };
  if (!question.skill_changed) return { label: "Store secret", skill_hash: question.skill_hash };
  if (!question.skill_hash_now) return null; // the skill is gone: nothing can be allowed
  return { label: `Allow version ${hash8(question.skill_hash_now)} and store`,
    skill_hash: question.skill_hash_now };
}

function secretForm(question, send) {
  const version = allowedVersion(question);
  if (!version) return null;
  const input = h("input", { type: "password", name: "secret", autocomplete: "off", required: true,
    spellcheck: "false", "aria-label": `Value of ${question.secret_name}` });
  return h("form", { class: "actions secret", dataset: { allows: version.skill_hash || "" }, onsubmit: (event) => {
    event.preventDefault();
    const body = { secret: input.value };
    input.value = ""; // never left in the page
    if (version.skill_hash) body.skill_hash = version.skill_hash;
    send(question, body);
  } }, input, h("button", { type: "submit", class: version.skill_hash === question.skill_hash ? "primary" : "danger" },
    version.label));
}

function skillRef(question) {
  if (!question.skill_name) return null;
  return h("code", { class: "skill-ref" }, `${question.skill_name}@${hash8(question.skill_hash) || "?"}`);
}

function card(question, send) {
  const secret = question.kind === "secret";
  return h("article", { class: `card question${secret ? " secret" : ""}`, dataset: { questionId: question.id } },
    h("header", {},
      h("h2", {}, secret ? `Secret ${question.secret_name}` : "Question"),
      secret ? skillRef(question) : null),
    h("p", { class: "asked-by" }, "Asked by ", askedBy(question)),
    h("p", { class: "question-text" }, question.text),
    question.skill_change ? h("p", { class: "warning skill-changed" }, question.skill_change) : null,
    secret ? secretForm(question, send) : answerForm(question, send),
    h("p", { class: "muted" }, `Asked ${when(question.created_at)} · expires ${when(question.expires_at)}`));
}

// A redraw (any question's event) must not wipe what the owner is typing into another card.
// A secret is kept only while its card allows the same skill version: once the version it
// would be stored for changes, the owner types it again, knowingly.
function typed(list) {
  const kept = new Map();
  for (const form of list.querySelectorAll("form")) {
    const field = form.querySelector("textarea, input");
    const id = form.closest("[data-question-id]")?.dataset.questionId;
    if (!id || !field || !field.value) continue;
    kept.set(id, { allows: form.dataset.allows, value: field.value, focused: document.activeElement === field,
      start: field.selectionStart, end: field.selectionEnd });
  }
  return kept;
}

function retype(list, kept) {
  for (const [id, was] of kept) {
    const form = list.querySelector(`[data-question-id="${CSS.escape(id)}"] form`);
    const field = form?.querySelector("textarea, input");
    if (!field || form.dataset.allows !== was.allows) continue;
    field.value = was.value;
    if (was.focused) {
      field.focus();
      field.setSelectionRange(was.start, was.end);
    }
  }
}

function asks(question) {
  return question.kind === "secret" ? `secret ${question.secret_name}` : question.text;
}

export async function page({ main, onFeed }) {
  const list = h("div", { class: "cards", id: "questions" });
  const recent = h("div", { id: "settled" });
  replace(main,
    h("h1", {}, "Questions"),
    h("p", { class: "muted" }, "What agents wait for you to answer, and secrets they asked for."),
    list,
    h("h2", {}, "Recently settled"),
    recent);

  async function send(question, body) {
    try {
      await post(`/api/questions/${question.id}`, body);
    } catch (error) {
      showError(error, "Answering the question");
    }
    await load();
  }

  const load = serial(async () => {
    const [pending, latest] = await Promise.all([
      get("/api/questions?status=pending"), get("/api/questions?page_size=10")]);
    setBadge("question-count", pending.length);
    if (pending.length) {
      const kept = typed(list);
      replace(list, pending.map((question) => card(question, send)));
      retype(list, kept);
    } else replace(list, h("p", { class: "empty" }, "Nothing is waiting for you."));
    const done = latest.filter((question) => question.status !== "pending");
    replace(recent, done.length
      ? table(["Asks", "Asked by", "Status", "Answer", "Settled", "Call"], done.map((question) =>
        h("tr", { dataset: { questionId: question.id } },
          h("td", {}, asks(question)),
          h("td", {}, askedBy(question)),
          h("td", {}, status(question.status)),
          h("td", {}, question.kind === "secret" ? "stored" : question.answer || ""),
          h("td", {}, when(question.answered_at)),
          h("td", {}, h("a", { href: `#/calls/${question.call_id}`, class: "call-link" }, "call")))))
      : h("p", { class: "muted" }, "None yet."));
  });

  onFeed((event) => {
    if (QUESTION_CHANGES.has(event.kind)) load().catch((e) => showError(e));
  });
  await load();
}

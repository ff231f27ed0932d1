// The review queue: drafts an agent wrote (enable by the hash you read, or discard) and edit
// plans with their diffs (approve or deny), where the server has the route.

import { call, del, get, post, put } from "./api.js";
import { busy, diff, h, hash8, replace, setBadge, showError, unavailable, when } from "./ui.js";

// A draft's file as an all-new diff: a draft is a whole new skill, nothing to compare with.
function asNewFile(path, text) {
  const lines = String(text).replace(/\n$/, "").split("\n");
  return [`--- /dev/null`, `+++ b/${path}`, `@@ -0,0 +1,${lines.length} @@`, ...lines.map((l) => `+${l}`)].join("\n");
}

function warnings(list) {
  return list && list.length
    ? h("div", { class: "warnings" }, h("h3", {}, "Review warnings"), h("ul", {}, list.map((w) => h("li", {}, w))))
    : null;
}

function button(text, work, attrs = {}) {
  const element = h("button", { type: "button", ...attrs }, text);
  element.addEventListener("click", busy(element, work));
  return element;
}

// A draft's files, SKILL.md first, read as the owner would before enabling it (the first few).
const SHOWN_FILES = 10;

async function draftFiles(path) {
  let detail;
  try {
    detail = await get(path);
  } catch (error) {
    if (error.status === 404) return null; // discarded meanwhile: the card says so
    throw error;
  }
  const paths = detail.files.map((f) => f.path).sort((a, b) => (b === "SKILL.md") - (a === "SKILL.md"));
  const shown = paths.slice(0, SHOWN_FILES);
  const texts = await Promise.all(shown.map(async (file) => {
    const { data, response } = await call("GET", `${path}/files/${file.split("/").map(encodeURIComponent).join("/")}`);
    return (response.headers.get("Content-Type") || "").startsWith("text/") ? data : null;
  }));
  return { shown: shown.map((file, i) => [file, texts[i]]), more: paths.slice(SHOWN_FILES) };
}

async function draftCard(draft, act) {
  const path = `/api/skills/${encodeURIComponent(draft.name)}`;
  const files = await draftFiles(path);
  return h("article", { class: "card", dataset: { draft: draft.name, hash: draft.hash } },
    h("header", {}, h("h2", {}, h("a", { href: `#/skills/${draft.name}` }, draft.name)),
      h("span", { class: "tier" }, "draft"), h("code", { title: draft.hash }, `@${hash8(draft.hash)}`),
      h("span", { class: "muted" }, `written ${when(draft.updated_at)}`)),
    h("p", {}, draft.description),
    draft.rationale ? h("p", {}, h("strong", {}, "Why: "), draft.rationale) : null,
    draft.source_chats && draft.source_chats.length
      ? h("p", { class: "muted" }, `From chats: ${draft.source_chats.join(", ")}`) : null,
    warnings(draft.lint_warnings),
    files === null ? h("p", { class: "muted" }, "This draft is gone.")
      : diff(files.shown.map(([file, text]) => asNewFile(file, text === null ? "(not text)" : text)).join("\n")),
    files && files.more.length ? h("p", { class: "muted" }, `${files.more.length} more file(s): `,
      h("a", { href: `#/skills/${draft.name}` }, "read them")) : null,
    h("div", { class: "actions" },
      button(`Enable @${hash8(draft.hash)}`, () => act(
        () => enableDraft(path, draft),
        `Enabled ${draft.name} at ${hash8(draft.hash)}.`, `Enabling ${draft.name}`), { class: "primary" }),
      button("Discard", async () => {
        if (!window.confirm(`Delete the draft ${draft.name}?`)) return;
        await act(() => del(path), `Discarded ${draft.name}.`, `Discarding ${draft.name}`);
      }, { class: "danger" })));
}

// A draft is unsigned: when the owner requires signatures it is held, and enabling it takes
// the override, asked for here and recorded by the server.
async function enableDraft(path, draft) {
  try {
    return await put(`${path}/enabled`, { enabled: true, hash: draft.hash });
  } catch (error) {
    if (error.code !== "signature_required" || !window.confirm(`${error.message}\n\nEnable ${draft.name} anyway?`)) throw error;
    return put(`${path}/enabled`, { enabled: true, hash: draft.hash, override_signature: true });
  }
}

function editCard(plan, act) {
  const answer = (decision, done) => act(
    () => post(`/api/approvals/${plan.approval_id}`, { decision }),
    done, `Answering the edit of ${plan.skill_name}`);
  return h("article", { class: "card", dataset: { planId: plan.plan_id, approvalId: plan.approval_id } },
    h("header", {}, h("h2", {}, h("a", { href: `#/skills/${plan.skill_name}` }, plan.skill_name)),
      h("span", { class: "tier tier-change" }, "edit"),
      h("code", { title: plan.base_hash }, `from @${hash8(plan.base_hash)}`),
      h("span", { class: "muted" }, `asked ${when(plan.created_at)}, expires ${when(plan.expires_at)}`)),
    plan.rationale ? h("p", {}, h("strong", {}, "Why: "), plan.rationale) : null,
    warnings(plan.lint_warnings),
    diff(plan.diff || ""),
    h("div", { class: "actions" },
      button("Approve", () => answer("approve", `Approved the edit of ${plan.skill_name}.`), { class: "primary" }),
      button("Deny", () => answer("deny", `Denied the edit of ${plan.skill_name}.`), { class: "danger" })));
}

export async function page({ main, onFeed }) {
  const note = h("p", { class: "notice", role: "status", hidden: true });
  const body = h("div", { id: "review" });
  let loading = null;

  async function act(request, done, where) {
    try {
      await request();
      replace(note, done);
      note.hidden = false;
    } catch (error) {
      note.hidden = true;
      showError(error, where);
    }
    await load();
  }

  async function draw() {
    let queue;
    try {
      queue = await get("/api/review");
    } catch (error) {
      if (error.status !== 404) throw error;
      replace(main, unavailable("Review", "GET /api/review",
        "Drafts and edit plans agents write show up here once the server has the authoring routes."));
      return false;
    }
    setBadge("review-count", queue.needs_review); // the tab's count, from the queue on show
    const drafts = await Promise.all(queue.drafts.map((draft) => draftCard(draft, act)));
    const edits = queue.edits.map((plan) => editCard(plan, act));
    replace(body,
      h("h2", {}, `Edit plans (${edits.length})`),
      edits.length ? h("div", { class: "cards" }, edits) : h("p", { class: "empty" }, "No edit waits for an answer."),
      h("h2", {}, `Drafts (${drafts.length})`),
      drafts.length ? h("div", { class: "cards" }, drafts) : h("p", { class: "empty" }, "No draft waits to be enabled."),
      queue.chats_with_issues
        ? h("p", { class: "muted" }, `${queue.chats_with_issues} unreviewed chat(s) had declined, failed or timed-out calls.`)
        : null);
    return true;
  }

  // One load at a time; a change arriving meanwhile loads once more after it.
  async function load() {
    if (loading) {
      loading.again = true;
      return loading.promise;
    }
    loading = { again: false };
    body.setAttribute("aria-busy", "true"); // the cards are being redrawn
    loading.promise = (async () => {
      try {
        let shown;
        do {
          loading.again = false;
          shown = await draw();
        } while (shown && loading.again);
        return shown;
      } finally {
        loading = null;
        body.removeAttribute("aria-busy");
      }
    })();
    return loading.promise;
  }

  replace(main, h("h1", {}, "Review"), note, body);
  // Edit plans come and go with their approvals; drafts are written by tool calls.
  onFeed((event) => {
    if (["approval.created", "approval.answered", "call.finished", "reconnected"].includes(event.kind)) {
      load().catch(showError);
    }
  });
  await load();
}

// Approvals inbox: pending calls the policy asked the owner about, updated live.

import { get, post } from "./api.js";
import { busy, diff, h, hash8, replace, serial, setBadge, showError, status, table, when } from "./ui.js";

const APPROVAL_CHANGES = new Set(["approval.created", "approval.answered"]);
const MAX_REASON = 1000; // the API's limit (store/limits.py MAX_DENY_REASON_CHARS)

export async function refreshBadge() {
  try {
    setBadge("pending-count", (await get("/api/approvals?status=pending")).length);
  } catch {
    setBadge("pending-count", 0);
  }
}

function skillRef(approval) {
  if (!approval.skill_name) return null;
  return `${approval.skill_name}@${hash8(approval.skill_hash)}`;
}

// An edit's diff, wherever the call carries it.
function editDiff(approval) {
  const args = approval.arguments || {};
  return approval.diff || args.diff || (args.plan && args.plan.diff) || null;
}

// Who asked: the chat and turn, or the job (linked to the Jobs page) and its run.
export function askedBy(approval) {
  if (approval.job_run_id) {
    const job = approval.job_name || "a job deleted since";
    return ["job ", h("a", { href: "#/jobs", class: "job" }, job),
      h("span", { class: "muted" }, `, run ${approval.job_run_id.slice(0, 8)}`)];
  }
  if (approval.chat_id) {
    return ["chat ", h("a", { href: `#/chat/${encodeURIComponent(approval.chat_id)}`, class: "chat" }, h("code", {}, approval.chat_id)),
      approval.turn_id ? [", turn ", h("code", { class: "turn" }, approval.turn_id)] : null];
  }
  return approval.asked_by || "—";
}

// The second answer grants the chat or the job the call came from; some calls only approve once.
const ALWAYS = {
  chat: ["approve_for_chat", "Approve for this chat"],
  job: ["approve_for_job", "Approve for this job"],
};

// Deny asks for an optional reason in place of the buttons; the agent is told it.
export function denyForm(approval, answer, actions, buttons) {
  const id = `deny-reason-${approval.id}`;
  const reason = h("input", { id, name: "reason", class: "reason", maxlength: MAX_REASON, autocomplete: "off",
    placeholder: "e.g. not on production; use the staging node" });
  const submit = h("button", { type: "submit", class: "danger" }, "Deny call");
  const form = h("form", { class: "inline deny" },
    h("label", { for: id }, "Why (optional; the agent is told)"), reason, submit,
    h("button", { type: "button", class: "quiet", onclick: () => replace(actions, buttons) }, "Back"));
  form.addEventListener("submit", busy(submit, async (event) => {
    event.preventDefault();
    await answer(approval, "deny", reason.value.trim() || null);
  }));
  replace(actions, form);
  reason.focus();
}

function card(approval, answer) {
  const always = ALWAYS[approval.grant_scope];
  const actions = h("div", { class: "actions" });
  const buttons = [
    h("button", { type: "button", class: "primary", onclick: () => answer(approval, "approve") }, "Approve once"),
    always ? h("button", { type: "button", onclick: () => answer(approval, always[0]) }, always[1]) : null,
    h("button", { type: "button", class: "danger", onclick: () => denyForm(approval, answer, actions, buttons) }, "Deny"),
  ];
  replace(actions, buttons);
  const changes = editDiff(approval);
  return h("article", { class: "card approval", dataset: { approvalId: approval.id } },
    h("header", {},
      h("h2", {}, approval.tool),
      h("span", { class: `tier tier-${approval.tier}` }, approval.tier),
      skillRef(approval) ? h("code", { class: "skill-ref" }, skillRef(approval)) : null,
      approval.node ? h("span", { class: "node" }, `on ${approval.node}`) : null),
    h("p", { class: "asked-by" }, "Asked by ", askedBy(approval)),
    approval.skill_change ? h("p", { class: "warning skill-changed" }, approval.skill_change) : null,
    approval.warning ? h("p", { class: "warning" }, approval.warning) : null,
    h("h3", {}, "Arguments"),
    h("pre", { class: "arguments" }, approval.arguments_shown),
    changes ? [h("h3", {}, "Changes"), diff(changes)] : null,
    h("p", { class: "muted" }, `Asked ${when(approval.created_at)} · expires ${when(approval.expires_at)}`
      + (approval.rule ? ` · rule ${approval.rule}` : "")),
    // Why "approve for this chat" is missing: the chat was a guess of skillfleet's.
    approval.grant_note ? h("p", { class: "muted grant-note" }, approval.grant_note) : null,
    actions);
}

// An answered approval's state; approving always in a job granted the job.
export function answered(approval) {
  if (approval.status === "withdrawn") { // the agent stopped waiting: nothing ran
    return h("span", { class: "status status-withdrawn", title: approval.withdrawn_note || "" },
      "withdrawn: the agent stopped waiting");
  }
  if (approval.status === "approved_for_chat" && approval.job_run_id) {
    return h("span", { class: "status status-approved_for_chat" }, "approved for job");
  }
  if (approval.status === "denied" && approval.reason) {
    return h("span", {}, status(approval.status), " ", h("span", { class: "reason" }, approval.reason));
  }
  return status(approval.status);
}

// Where an answered approval led: its call, and the run the call started.
function links(approval) {
  return [
    h("a", { href: `#/calls/${approval.call_id}`, class: "call-link" }, "call"),
    approval.run_id ? [" · ", h("a", { href: `#/runs/${approval.run_id}`, class: "run-link" }, "run")] : null,
  ];
}

export async function page({ main, onFeed }) {
  const list = h("div", { class: "cards", id: "approvals" });
  const recent = h("div", { id: "answered" });
  replace(main,
    h("h1", {}, "Approvals"),
    h("p", { class: "muted" }, "Calls waiting for your answer. New ones appear here as they are asked."),
    list,
    h("h2", {}, "Recently answered"),
    recent);

  async function answer(approval, decision, reason = null) {
    try {
      await post(`/api/approvals/${approval.id}`, reason ? { decision, reason } : { decision });
    } catch (error) {
      showError(error, `Answering ${approval.tool}`);
    }
    await load();
  }

  const load = serial(async () => {
    const pending = await get("/api/approvals?status=pending");
    setBadge("pending-count", pending.length);
    // A card whose reason is being written stays as it is, so the feed doesn't wipe it.
    const writing = new Map([...list.querySelectorAll("article")].filter((a) => a.querySelector("form.deny"))
      .map((a) => [a.dataset.approvalId, a]));
    if (pending.length) replace(list, pending.map((approval) => writing.get(approval.id) || card(approval, answer)));
    else replace(list, h("p", { class: "empty" }, "Nothing is waiting for you."));
    loadAnswered().catch((e) => showError(e)); // below the fold: not waited for
  });

  // Approved calls shown without a run yet: their link comes with their run's first state (or
  // with a list read while it came).
  let runless = new Set();
  let reading = false;

  const loadAnswered = serial(async () => {
    reading = true;
    let latest;
    try {
      latest = await get("/api/approvals?page_size=10");
    } finally {
      reading = false;
    }
    const done = latest.filter((approval) => approval.status !== "pending");
    runless = new Set(done.filter((a) => a.status.startsWith("approved") && !a.run_id).map((a) => a.call_id));
    replace(recent, done.length
      ? table(["Tool", "Skill", "Asked by", "Answer", "Answered", "Led to"], done.map((approval) =>
        h("tr", { dataset: { approvalId: approval.id } },
          h("td", {}, approval.tool),
          h("td", {}, skillRef(approval) || ""),
          h("td", {}, askedBy(approval)),
          h("td", {}, answered(approval)),
          h("td", {}, when(approval.answered_at)),
          h("td", {}, links(approval)))))
      : h("p", { class: "muted" }, "None yet."));
  });

  onFeed((event) => {
    // State changes only: the feed also carries notices for push and webhooks (approval.waiting).
    if (APPROVAL_CHANGES.has(event.kind) || event.kind === "reconnected") {
      load().catch((e) => showError(e));
    } else if (event.kind === "run.state" && (reading || runless.has(event.data.call_id))) {
      runless.delete(event.data.call_id);
      loadAnswered().catch((e) => showError(e)); // an approved call's run started: link it
    }
  });
  await load();
}

// Approvals inbox: pending calls the policy asked the owner about, updated live.

import { get, post } from "./api.js";
import { diff, h, hash8, json, replace, showError, status, when } from "./ui.js";

const APPROVAL_CHANGES = new Set(["approval.created", "approval.answered"]);

function setBadge(count) {
  const badge = document.getElementById("pending-count");
  badge.textContent = count;
  badge.hidden = count === 0;
}

export async function refreshBadge() {
  try {
    setBadge((await get("/api/approvals?status=pending")).length);
  } catch {
    setBadge(0);
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

function card(approval, answer) {
  const buttons = [
    h("button", { type: "button", class: "primary", onclick: () => answer(approval, "approve") }, "Approve once"),
    approval.offers_chat_grant
      ? h("button", { type: "button", onclick: () => answer(approval, "approve_for_chat") }, "Approve for this chat")
      : null,
    h("button", { type: "button", class: "danger", onclick: () => answer(approval, "deny") }, "Deny"),
  ];
  const changes = editDiff(approval);
  return h("article", { class: "card approval", dataset: { approvalId: approval.id } },
    h("header", {},
      h("h2", {}, approval.tool),
      h("span", { class: `tier tier-${approval.tier}` }, approval.tier),
      skillRef(approval) ? h("code", { class: "skill-ref" }, skillRef(approval)) : null,
      approval.node ? h("span", { class: "node" }, `on ${approval.node}`) : null),
    approval.warning ? h("p", { class: "warning" }, approval.warning) : null,
    h("h3", {}, "Arguments"),
    h("pre", { class: "arguments" }, json(approval.arguments)),
    changes ? [h("h3", {}, "Changes"), diff(changes)] : null,
    h("p", { class: "muted" }, `Asked ${when(approval.created_at)} · expires ${when(approval.expires_at)}`
      + (approval.rule ? ` · rule ${approval.rule}` : "")),
    h("div", { class: "actions" }, buttons));
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

  async function answer(approval, decision) {
    try {
      await post(`/api/approvals/${approval.id}`, { decision });
    } catch (error) {
      showError(error, `Answering ${approval.tool}`);
    }
    await load();
  }

  async function load() {
    const pending = await get("/api/approvals?status=pending");
    setBadge(pending.length);
    if (pending.length) replace(list, pending.map((approval) => card(approval, answer)));
    else replace(list, h("p", { class: "empty" }, "Nothing is waiting for you."));
    loadAnswered().catch((e) => showError(e)); // below the fold: not waited for
  }

  async function loadAnswered() {
    const answered = await get("/api/approvals?page_size=10");
    const done = answered.filter((approval) => approval.status !== "pending");
    replace(recent, done.length
      ? h("table", {}, h("tbody", {}, done.map((approval) => h("tr", {},
        h("td", {}, approval.tool),
        h("td", {}, skillRef(approval) || ""),
        h("td", {}, status(approval.status)),
        h("td", {}, when(approval.answered_at))))))
      : h("p", { class: "muted" }, "None yet."));
  }

  onFeed((event) => {
    // State changes only: the feed also carries notices for push and webhooks (approval.waiting).
    if (APPROVAL_CHANGES.has(event.kind) || event.kind === "reconnected") load().catch((e) => showError(e));
  });
  await load();
}

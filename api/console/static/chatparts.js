// How the chat page draws an answer's parts: text, reasoning (folded), each tool call as a block
// (its input, then its output or error) with Approve / Deny in place while it waits, errors,
// and the usage under the answer.

import { post } from "./api.js";
import { denyForm } from "./approvals.js";
import { h, json, replace, showError } from "./ui.js";

const TOOL_STATES = {
  "input-streaming": "…",
  "input-available": "running",
  "approval-requested": "waiting for your answer",
  "output-available": "done",
  "output-error": "failed",
  "output-denied": "denied",
};

function toolState(part) {
  if (part.state === "approval-responded") return part.approval.approved ? "approved, running" : "denied";
  return TOOL_STATES[part.state] || part.state;
}

// Approve, Approve for this chat, or Deny (with an optional reason the agent is told); the
// stream then brings the outcome.
function approvalActions(part) {
  const actions = h("div", { class: "actions approval-actions" });
  const approval = { id: part.approval.id };
  async function answer(_approval, decision, reason = null) {
    for (const button of actions.querySelectorAll("button")) button.disabled = true;
    try {
      await post(`/api/approvals/${approval.id}`, reason ? { decision, reason } : { decision });
      replace(actions, h("span", { class: "muted answered" },
        decision === "deny" ? "Denied; the agent is told." : "Approved; waiting for the outcome…"));
    } catch (error) {
      showError(error, `Answering ${part.toolName}`);
      for (const button of actions.querySelectorAll("button")) button.disabled = false;
    }
  }
  const buttons = [
    h("button", { type: "button", class: "primary", onclick: () => answer(approval, "approve") }, "Approve"),
    h("button", { type: "button", onclick: () => answer(approval, "approve_for_chat") }, "Approve for this chat"),
    h("button", { type: "button", class: "danger", onclick: () => denyForm(approval, answer, actions, buttons) }, "Deny"),
  ];
  replace(actions, buttons);
  return actions;
}

function toolBlock(part) {
  const denied = part.state === "output-denied" || (part.approval && part.approval.approved === false);
  const reason = part.approval && part.approval.reason;
  return h("div", { class: `tool tool-${part.state}`, dataset: { toolCallId: part.toolCallId, tool: part.toolName } },
    h("div", { class: "tool-head" }, h("code", { class: "tool-name" }, part.toolName), " ",
      h("span", { class: `status status-${denied ? "denied" : part.state}` }, toolState(part))),
    part.input !== undefined && part.input !== null ? h("pre", { class: "tool-input" }, json(part.input)) : null,
    part.state === "approval-requested" ? approvalActions(part) : null,
    part.state === "output-available" ? h("pre", { class: "tool-output" }, json(part.output)) : null,
    part.state === "output-error" ? h("p", { class: "error tool-error" }, part.errorText) : null,
    denied ? h("p", { class: "muted" }, reason || "You declined this call.") : null);
}

function reasoning(part, before) {
  const open = before && before.tagName === "DETAILS" && before.open; // kept open while it streams
  return h("details", { class: "reasoning", open },
    h("summary", {}, part.state === "streaming" ? "Reasoning…" : "Reasoning"),
    h("div", { class: "text" }, part.text));
}

function question(part) {
  return h("p", { class: "notice question" }, "The agent asks you a question: answer it on ",
    h("a", { href: "#/questions" }, "Questions"), ".");
}

// A part's element; `before` is the one it replaces.
export function drawPart(part, before) {
  if (part.type === "text") return h("div", { class: "text" }, part.text);
  if (part.type === "reasoning") return reasoning(part, before);
  if (part.type === "tool") return toolBlock(part);
  if (part.type === "error") return h("p", { class: "error chat-error", role: "alert" }, part.errorText);
  if (part.type === "data-history") return h("p", { class: "notice history-notice" }, part.data && part.data.message);
  if (part.type === "data-question") return question(part);
  return h("span", { hidden: true });
}

// "1,840 tokens in · 12 out" (and the reasoning tokens when the server counts them).
export function usage(counts) {
  if (!counts || typeof counts.inputTokens !== "number") return null;
  const number = (value) => Number(value || 0).toLocaleString();
  const reasoningTokens = counts.reasoningTokens ? ` (${number(counts.reasoningTokens)} reasoning)` : "";
  return h("span", { class: "usage muted" },
    `${number(counts.inputTokens)} tokens in · ${number(counts.outputTokens)} out${reasoningTokens}`);
}

// A tool call's page: what was called and how it ended, who asked and how the owner answered,
// and the run it started; the Approvals page and a run's page link here.

import { get } from "./api.js";
import { answered, askedBy } from "./approvals.js";
import { definitions, h, hash8, json, replace, showError, status, when } from "./ui.js";

function approvalFacts(approval) {
  return [
    h("h2", {}, "Approval"),
    definitions([
      ["Asked by", h("span", { class: "asked-by" }, askedBy(approval))],
      ["Answer", approval.status === "pending" ? h("a", { href: "#/approvals" }, "waiting: answer it") : answered(approval)],
      ["Rule", approval.rule],
      ["Warning", approval.warning],
      ["Asked", when(approval.created_at)],
      ["Answered", when(approval.answered_at)],
    ]),
  ];
}

export async function callPage({ main, onFeed, back }, callId) {
  const facts = h("div", { id: "call-facts" });
  const approval = h("section", { id: "call-approval" });
  const result = h("section", { id: "call-result" });
  replace(main,
    back("#/approvals", "Approvals"),
    h("h1", {}, "Call ", h("code", {}, callId.slice(0, 8))),
    facts, approval, result);

  // Events reload the call as it goes; only the latest load is shown, so a late answer never
  // replaces a newer state.
  let latest = 0;
  async function load() {
    const loading = ++latest;
    const call = await get(`/api/calls/${encodeURIComponent(callId)}`);
    if (loading !== latest) return;
    const skill = call.skill_name
      ? h("a", { href: `#/skills/${call.skill_name}` }, `${call.skill_name}@${hash8(call.skill_hash)}`)
      : null;
    replace(facts, definitions([
      ["Tool", call.tool],
      ["State", status(call.status)],
      ["Tier", call.tier],
      ["Skill", skill],
      ["Node", call.node],
      ["Run", call.run_id ? h("a", { href: `#/runs/${call.run_id}`, class: "run-link" }, call.run_id) : null],
      ["Chat", call.chat_id],
      ["Turn", call.turn_id],
      ["Job run", call.job_run_id],
      ["Rule", call.rule],
      ["Error", call.error_message ? `${call.error_message} (${call.error_code})` : null],
      ["Made", when(call.created_at)],
      ["Finished", when(call.finished_at)],
    ]));
    facts.dataset.status = call.status;
    if (call.approval_id) {
      const asked = await get(`/api/approvals/${call.approval_id}`);
      if (loading !== latest) return;
      replace(approval, approvalFacts(asked));
    }
    replace(result, call.result === null || call.result === undefined ? null
      : [h("h2", {}, "Result"), h("pre", { class: "result" }, json(call.result))]);
  }

  onFeed((event) => {
    const ours = event.data && event.data.call_id === callId;
    if (event.kind === "reconnected" || (ours && event.kind !== "approval.waiting")) load().catch((e) => showError(e));
  });
  await load();
}

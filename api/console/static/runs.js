// Runs: a filterable list, and a run page whose output streams in live.

import { follow, get, list, post } from "./api.js";
import { answered, askedBy } from "./approvals.js";
import { busy, definitions, h, hash8, replace, showError, status, table, when } from "./ui.js";

const STATES = ["", "queued", "running", "succeeded", "failed", "timed_out", "cancelled", "interrupted"];
const END_STATES = ["succeeded", "failed", "timed_out", "cancelled", "interrupted"];

function filterForm(onChange) {
  const field = (name, label, control) => h("label", {}, label, control);
  const form = h("form", { class: "filters", onsubmit: (event) => { event.preventDefault(); onChange(); } },
    field("status", "Status", h("select", { name: "status", onchange: onChange },
      STATES.map((state) => h("option", { value: state }, state ? state.replaceAll("_", " ") : "any")))),
    field("skill", "Skill", h("input", { name: "skill", placeholder: "any" })),
    field("node", "Node", h("input", { name: "node", placeholder: "any" })),
    field("chat", "Chat", h("input", { name: "chat", placeholder: "any" })),
    h("button", { type: "submit" }, "Filter"));
  return form;
}

export async function page({ main, onFeed }) {
  // The addresses of the pages seen, newest first: "Older" follows the Link header's cursor,
  // "Newer" goes back to the page before. A filter starts again from the first page.
  let pages = [];
  let total = null;
  // Loads overlap (a click while a live event's reload is on its way): only the latest renders,
  // or an older page's answer could land after it, under the newer page's number.
  let latest = 0;
  const form = filterForm(() => { pages = []; load().catch((e) => showError(e)); });
  const runs = h("div", { id: "runs" });
  const pager = h("div", { class: "pager" });
  replace(main, h("h1", {}, "Runs"), form, runs, pager);

  function first() {
    const query = new URLSearchParams({ page_size: 25 });
    for (const [key, value] of new FormData(form)) if (value) query.set(key, value);
    return `/api/runs?${query}`;
  }

  async function load() {
    if (!pages.length) pages = [first()];
    const loading = ++latest;
    const { items, next, total: counted } = await list(pages[pages.length - 1]);
    if (loading !== latest) return;
    if (pages.length === 1) total = counted;
    replace(runs, items.length
      ? table(["Run", "Skill", "Script", "Node", "Status", "Exit", "Started"], items.map((run) =>
        h("tr", { dataset: { runId: run.run_id } },
          h("td", {}, h("a", { href: `#/runs/${run.run_id}` }, run.run_id.slice(0, 8))),
          h("td", {}, `${run.skill_name}@${hash8(run.skill_hash)}`),
          h("td", {}, run.script),
          h("td", {}, run.node || run.queue),
          h("td", {}, status(run.status)),
          h("td", {}, run.exit_code ?? ""),
          h("td", {}, when(run.started_at || run.created_at)))))
      : h("p", { class: "empty" }, "No runs match."));
    // The count stops at 1,000 ("1000+"): counting every run would cost every refresh.
    const of = total === null ? "" : ` of ${total.endsWith("+") ? `more than ${total.slice(0, -1)}` : total} runs`;
    replace(pager,
      h("button", { type: "button", disabled: pages.length <= 1, onclick: () => { pages.pop(); load().catch((e) => showError(e)); } }, "Newer"),
      h("span", { class: "muted" }, `Page ${pages.length}${of}`),
      h("button", { type: "button", disabled: !next, onclick: () => { pages.push(next); load().catch((e) => showError(e)); } }, "Older"));
  }

  onFeed((event) => {
    if (event.kind === "run.state" || event.kind === "reconnected") load().catch((e) => showError(e));
  });
  await load();
}

// The call that started a run and, when it was asked about, who asked and how it was answered.
async function origin(callId, into) {
  if (!callId) return;
  const call = await get(`/api/calls/${encodeURIComponent(callId)}`);
  const link = h("a", { href: `#/calls/${call.call_id}`, class: "call-link" }, `${call.tool} call ${call.call_id.slice(0, 8)}`);
  if (!call.approval_id) {
    // Only what the call has: a turn's or a job run's id.
    replace(into, definitions([["Call", link], ["Turn", call.turn_id ?? undefined],
      ["Job run", call.job_run_id ?? undefined]]));
    return;
  }
  const approval = await get(`/api/approvals/${call.approval_id}`);
  replace(into, definitions([
    ["Call", link],
    ["Asked by", h("span", { class: "asked-by" }, askedBy(approval))],
    ["Approval", h("span", { class: "approval" }, answered(approval), " ", when(approval.answered_at))],
  ]));
}

// The output comes first, where the page opens; the facts about the run follow it.
export async function runPage({ main, onFeed, onLeave, back }, runId) {
  const facts = h("div", { id: "run-facts" });
  const asked = h("div", { id: "run-origin" });
  const output = h("pre", { id: "output", class: "output", "aria-live": "polite" });
  const cancel = h("button", { type: "button", class: "danger", id: "cancel" }, "Cancel");
  const streamState = h("span", { class: "muted", id: "stream-state" });
  const state = h("span", { id: "run-state" });
  replace(main,
    back("#/runs", "Runs"),
    h("h1", {}, "Run ", h("code", {}, runId.slice(0, 8)), " ", state),
    h("div", { class: "actions" }, cancel, streamState),
    h("h2", {}, "Output"),
    output,
    h("h2", {}, "Details"),
    facts,
    asked);

  // Events reload the run as it goes; only the latest load is shown, so a late answer saying
  // "running" never follows one that says how it ended.
  let latest = 0;
  async function load() {
    const loading = ++latest;
    const run = await get(`/api/runs/${encodeURIComponent(runId)}`);
    if (loading !== latest) return run;
    replace(facts, definitions([
      ["State", status(run.status)],
      ["Exit code", run.exit_code ?? null],
      ["Skill", h("a", { href: `#/skills/${run.skill_name}` }, `${run.skill_name}@${hash8(run.skill_hash)}`)],
      ["Skill hash", h("code", { class: "hash" }, run.skill_hash)],
      ["Script", run.script],
      ["Node", run.node || run.queue],
      ["Isolation", run.isolation],
      ["Worker", run.worker],
      ["Error", run.error],
      ["Created", when(run.created_at)],
      ["Started", when(run.started_at)],
      ["Finished", when(run.finished_at)],
    ]));
    replace(state, status(run.status));
    cancel.hidden = END_STATES.includes(run.status);
    facts.dataset.status = run.status;
    return run;
  }

  cancel.addEventListener("click", busy(cancel, async () => {
    if (!window.confirm(`Cancel run ${runId.slice(0, 8)}? Its script is stopped where it is.`)) return;
    try {
      await post(`/api/runs/${encodeURIComponent(runId)}/cancel`);
    } catch (error) {
      showError(error, "Cancelling");
    }
    await load();
  }));

  const run = await load();
  origin(run.call_id, asked).catch((e) => showError(e, "The run's call"));
  const stop = follow(`/api/runs/${encodeURIComponent(runId)}/events`, {
    onEvent(event) {
      if (event.kind === "stdout" || event.kind === "stderr") {
        output.append(h("span", { class: event.kind }, event.data.text));
      } else if (event.kind === "exit" || event.kind === "status") {
        load().catch((e) => showError(e));
      }
    },
    onState(state, error) {
      streamState.textContent = state === "open" ? "streaming" : state;
      if (error && error.status >= 400) showError(error, "Output");
    },
    until: (event) => event.kind === "exit",
  });
  onLeave(stop);
  onFeed((event) => {
    if (event.kind === "run.state" && event.data.run_id === runId) load().catch((e) => showError(e));
  });
}

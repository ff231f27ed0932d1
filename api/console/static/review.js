// The review queue: drafts and EditPlans with their diffs, where the server has the route.

import { get, post } from "./api.js";
import { diff, h, replace, showError, unavailable, when } from "./ui.js";

function item(entry, reload) {
  const act = (action) => async () => {
    try {
      await post(entry.actions[action], {});
    } catch (error) {
      showError(error, action);
    }
    await reload();
  };
  return h("article", { class: "card" },
    h("header", {}, h("h2", {}, entry.skill_name || entry.name || entry.id),
      h("span", { class: "tier" }, entry.kind || "draft")),
    entry.rationale ? h("p", {}, entry.rationale) : null,
    entry.warning ? h("p", { class: "warning" }, entry.warning) : null,
    entry.diff ? diff(entry.diff) : null,
    h("p", { class: "muted" }, when(entry.created_at)),
    entry.actions ? h("div", { class: "actions" }, Object.keys(entry.actions).map((action) =>
      h("button", { type: "button", onclick: act(action) }, action.replaceAll("_", " ")))) : null);
}

export async function page({ main, onFeed }) {
  async function load() {
    let queue;
    try {
      queue = await get("/api/review");
    } catch (error) {
      if (error.status !== 404) throw error;
      replace(main, unavailable("Review", "GET /api/review",
        "Drafts and edit plans agents write show up here once the server has the authoring routes."));
      return;
    }
    const entries = Array.isArray(queue) ? queue : [...(queue.drafts || []), ...(queue.edit_plans || [])];
    replace(main, h("h1", {}, "Review"),
      entries.length ? h("div", { class: "cards" }, entries.map((entry) => item(entry, load)))
        : h("p", { class: "empty" }, "Nothing to review."));
  }
  onFeed((event) => { if (event.kind === "reconnected") load().catch(showError); });
  await load();
}

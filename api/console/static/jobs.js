// Jobs: scheduled tool calls, where the server has the routes: list, create/edit with a
// preview of the next five times in the job's time zone, run now, and each job's history.

import { list, post, put } from "./api.js";
import { nextTimes } from "./cron.js";
import { h, json, replace, showError, status, unavailable, when } from "./ui.js";

function preview(cron, timeZone, into) {
  try {
    const times = nextTimes(cron, timeZone || "UTC");
    const format = new Intl.DateTimeFormat(undefined, { timeZone: timeZone || "UTC", dateStyle: "medium", timeStyle: "short" });
    replace(into, h("ol", {}, times.map((t) => h("li", {}, `${format.format(t)} (${timeZone || "UTC"})`))));
  } catch (error) {
    replace(into, h("p", { class: "error" }, error.message));
  }
}

function editor(job, saved) {
  const zone = job ? job.timezone : Intl.DateTimeFormat().resolvedOptions().timeZone;
  const fields = {
    name: h("input", { name: "name", required: true, value: job ? job.name : "" }),
    cron: h("input", { name: "cron", required: true, value: job ? job.cron : "0 6 * * 1-5" }),
    timezone: h("input", { name: "timezone", required: true, value: zone || "UTC" }),
    tool: h("input", { name: "tool", required: true, value: job ? job.tool : "run_skill_script" }),
    arguments: h("textarea", { name: "arguments", rows: 5 }, job ? json(job.arguments || {}) : "{}"),
  };
  const next = h("div", { class: "preview", id: "cron-preview" });
  const update = () => preview(fields.cron.value, fields.timezone.value, next);
  fields.cron.addEventListener("input", update);
  fields.timezone.addEventListener("input", update);
  update();
  const form = h("form", { class: "panel editor", onsubmit: async (event) => {
    event.preventDefault();
    let args;
    try {
      args = JSON.parse(fields.arguments.value || "{}");
    } catch {
      showError(new Error("The arguments are not valid JSON."));
      return;
    }
    const body = { name: fields.name.value, cron: fields.cron.value, timezone: fields.timezone.value, tool: fields.tool.value, arguments: args };
    try {
      if (job) await put(`/api/jobs/${job.id}`, body);
      else await post("/api/jobs", body);
      await saved();
    } catch (error) {
      showError(error, "Saving the job");
    }
  } },
    h("h2", {}, job ? `Edit ${job.name}` : "New job"),
    Object.entries(fields).map(([name, control]) => h("label", {}, name.replace("timezone", "time zone"), control)),
    h("h3", {}, "Next five times"), next,
    h("button", { type: "submit" }, job ? "Save" : "Create"));
  return form;
}

export async function page({ main, onFeed }) {
  try {
    await list("/api/jobs");
  } catch (error) {
    if (error.status !== 404) throw error;
    replace(main, unavailable("Jobs", "GET /api/jobs", "Scheduled jobs show up here once the server has the jobs routes."));
    return;
  }
  const table = h("div", { id: "jobs" });
  const side = h("div", { id: "job-side" });
  replace(main, h("h1", {}, "Jobs"),
    h("button", { type: "button", onclick: () => replace(side, editor(null, load)) }, "New job"),
    table, side);

  async function history(job) {
    const { items } = await list(`/api/jobs/${job.id}/runs`);
    replace(side, h("section", { class: "panel" }, h("h2", {}, `History of ${job.name}`),
      items.length ? h("table", {}, h("tbody", {}, items.map((run) => h("tr", {},
        h("td", {}, when(run.started_at || run.created_at)), h("td", {}, status(run.status)),
        h("td", {}, run.error || ""))))) : h("p", { class: "muted" }, "It has not run yet.")));
  }

  async function load() {
    const { items } = await list("/api/jobs");
    replace(table, items.length ? h("table", {},
      h("thead", {}, h("tr", {}, ["Job", "Schedule", "Time zone", "Next", "Last", ""].map((t) => h("th", {}, t)))),
      h("tbody", {}, items.map((job) => h("tr", {},
        h("td", {}, job.name), h("td", {}, h("code", {}, job.cron)), h("td", {}, job.timezone),
        h("td", {}, when(job.next_run_at)), h("td", {}, job.last_status ? status(job.last_status) : "—"),
        h("td", { class: "actions" },
          h("button", { type: "button", onclick: async () => {
            try { await post(`/api/jobs/${job.id}/run`); } catch (error) { showError(error, "Run now"); }
            await history(job);
          } }, "Run now"),
          h("button", { type: "button", onclick: () => replace(side, editor(job, load)) }, "Edit"),
          h("button", { type: "button", onclick: () => history(job).catch(showError) }, "History"))))))
      : h("p", { class: "empty" }, "No jobs yet."));
  }
  onFeed((event) => { if (event.kind === "job_run.state" || event.kind === "reconnected") load().catch(showError); });
  await load();
}

// Jobs: scheduled tool calls, where the server has the routes: list, create/edit with a
// preview of the next five times, run now, and each job's history; every time shown is in the
// browser's time zone, named.

import { del, list, listAll, post, put } from "./api.js";
import { nextTimes } from "./cron.js";
import { busy, h, hash8, json, replace, showError, status, table, unavailable } from "./ui.js";

const EXAMPLE_STEPS = [{ tool: "list_skills", arguments: {} }];

function knownZone(timeZone) {
  try {
    new Intl.DateTimeFormat("en-US", { timeZone });
    return true;
  } catch {
    return false;
  }
}

// Every time on this page is in the browser's time zone, named; a job's cron preview also
// gives the time on the job's own clock when that is another zone.
const LOCAL = Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";

// A time in `timeZone` (the browser's by default), the zone named.
function inZone(date, timeZone = LOCAL) {
  if (!date) return "—";
  const zone = knownZone(timeZone) ? timeZone : "UTC";
  const format = new Intl.DateTimeFormat(undefined, { timeZone: zone, weekday: "short",
    year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
  return `${format.format(new Date(date))} ${zone}`;
}

function preview(cron, timeZone, into) {
  const zone = timeZone.trim() || "UTC";
  if (!knownZone(zone)) {
    replace(into, h("p", { class: "error" }, `'${zone}' is not an IANA time zone (e.g. Europe/Berlin).`));
    return;
  }
  try {
    const times = nextTimes(cron, zone, 5);
    replace(into, h("ol", { class: "times" }, times.map((t) =>
      h("li", { dataset: { time: t.toISOString() } }, inZone(t),
        zone === LOCAL ? null : h("span", { class: "muted" }, ` (${inZone(t, zone)})`)))));
  } catch (error) {
    replace(into, h("p", { class: "error" }, error.message));
  }
}

const names = (text) => text.split(",").map((part) => part.trim()).filter(Boolean);

// The job's `skills` field: blank is none, "*" every enabled skill, else a list of names.
function skillsFrom(text) {
  const trimmed = text.trim();
  if (!trimmed) return null;
  if (trimmed === "*") return "*";
  return names(trimmed);
}

function skillsText(skills) {
  if (skills === "*") return "*";
  return (skills || []).join(", ");
}

// What a job may be granted: the change and destructive tools (run_command; run_skill_script
// takes each skill's tier instead) and skills, each skill at its current version. Only enabled
// skills are offered (not disabled ones, not drafts); read skills never ask.
const GRANTABLE = new Set(["change", "destructive"]);

const choice = (name, value, checked, ...text) => h("label", { class: "check" },
  h("input", { type: "checkbox", name, value, checked }), ...text);

function grantChoices(job, skills) {
  const granted = new Set(job ? job.grants.skills : []);
  const grantable = skills.filter((skill) => GRANTABLE.has(skill.tier) && skill.enabled && skill.source !== "draft");
  const current = new Set(grantable.map((skill) => `${skill.name}@${skill.hash}`));
  const choices = grantable.map((skill) => choice("grant_skill", skill.name, granted.has(`${skill.name}@${skill.hash}`),
    skill.name, " ", h("span", { class: `tier tier-${skill.tier}` }, skill.tier),
    " ", h("code", { class: "muted" }, `@${hash8(skill.hash)}`)));
  // A grant no longer offered (the skill changed, or was disabled): kept until unticked.
  const now = new Map(skills.map((skill) => [skill.name, skill]));
  for (const entry of granted) {
    if (current.has(entry)) continue;
    const [name, at] = entry.split("@");
    const same = now.has(name) && now.get(name).hash === at;
    choices.push(choice("grant_skill", entry, true, `${name}@${hash8(at)} `,
      h("span", { class: "muted" }, same ? "disabled: kept until unticked" : "an earlier version: it no longer matches")));
  }
  return h("fieldset", { class: "grants", id: "job-grants" },
    h("legend", {}, "Granted skills (their scripts run without asking)"),
    choices.length ? choices
      : h("p", { class: "muted" }, "None of your enabled skills is a change or destructive one, the only kind granted to a job."));
}

function toolChoices(job, tools) {
  const granted = new Set(job ? job.grants.tools : []);
  const offered = tools.filter((tool) => tool.job_may_grant);
  const names = new Set(offered.map((tool) => tool.name));
  const choices = offered.map((tool) => choice("grant_tool", tool.name, granted.has(tool.name),
    h("code", {}, tool.name), " ", h("span", { class: `tier tier-${tool.tier}` }, tool.tier)));
  for (const name of granted) {
    if (!names.has(name)) choices.push(choice("grant_tool", name, true, h("code", {}, name)));
  }
  return h("fieldset", { class: "grants", id: "job-grant-tools" },
    h("legend", {}, "Granted tools (they run without asking in this job)"),
    choices.length ? choices : h("p", { class: "muted" }, "No tool can be granted to a job on this server."));
}

function editor(job, skills, tools, done) {
  const zone = job ? job.time_zone : Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
  const field = (name, attrs) => h("input", { name, id: `job-${name}`, ...attrs });
  const fields = {
    name: field("name", { required: true, maxlength: 100, value: job ? job.name : "" }),
    cron: field("cron", { required: true, spellcheck: "false", value: job ? job.cron : "0 6 * * 1-5" }),
    time_zone: field("time_zone", { required: true, list: "time-zones", spellcheck: "false", value: zone }),
    steps: h("textarea", { name: "steps", id: "job-steps", rows: 7, spellcheck: "false" },
      json(job ? job.steps : EXAMPLE_STEPS)),
    skills: field("skills", { placeholder: "none; * for every enabled skill; or names", value: job ? skillsText(job.skills) : "" }),
    grants: grantChoices(job, skills),
    tools: toolChoices(job, tools),
    enabled: h("input", { type: "checkbox", name: "enabled", id: "job-enabled", checked: job ? job.enabled : true }),
  };
  const zones = typeof Intl.supportedValuesOf === "function" ? Intl.supportedValuesOf("timeZone") : [];
  const next = h("div", { class: "preview", id: "cron-preview", "aria-live": "polite" });
  const update = () => preview(fields.cron.value, fields.time_zone.value, next);
  fields.cron.addEventListener("input", update);
  fields.time_zone.addEventListener("input", update);
  update();

  const labelled = (text, control, hint) => h("label", { for: control.id }, text, control,
    hint ? h("span", { class: "muted" }, hint) : null);
  const submit = h("button", { type: "submit", class: "primary" }, job ? "Save" : "Create");
  const form = h("form", { class: "panel editor", id: "job-editor" },
    h("h2", {}, job ? `Edit ${job.name}` : "New job"),
    labelled("Name", fields.name),
    h("div", { class: "pair" },
      labelled("Cron (minute hour day month weekday)", fields.cron),
      labelled("Time zone", fields.time_zone)),
    h("datalist", { id: "time-zones" }, zones.map((z) => h("option", { value: z }))),
    h("h3", {}, `Next five times, in your time zone (${LOCAL})`), next,
    labelled("Steps (JSON)", fields.steps, 'Each {"tool": name, "arguments": {…}} or {"prompt": text}, run in order.'),
    labelled("Skills the job may use", fields.skills),
    fields.tools,
    fields.grants,
    h("label", { class: "check", for: "job-enabled" }, fields.enabled, "Enabled (runs on its schedule)"),
    h("div", { class: "actions" }, submit,
      job ? h("button", { type: "button", class: "danger", onclick: async () => {
        if (!window.confirm(`Delete the job ${job.name} and its history?`)) return;
        try {
          await del(`/api/jobs/${job.id}`);
          await done(null, `Deleted ${job.name}.`);
        } catch (error) {
          showError(error, "Deleting the job");
        }
      } }, "Delete") : null,
      h("button", { type: "button", class: "quiet", onclick: () => done(null) }, "Cancel")));

  form.addEventListener("submit", busy(submit, async (event) => {
    event.preventDefault();
    let steps;
    try {
      steps = JSON.parse(fields.steps.value || "[]");
    } catch (error) {
      showError(new Error(`The steps are not valid JSON: ${error.message}`), "Saving the job");
      return;
    }
    const body = {
      name: fields.name.value.trim(),
      cron: fields.cron.value.trim(),
      time_zone: fields.time_zone.value.trim() || "UTC",
      steps,
      skills: skillsFrom(fields.skills.value),
      grants: {
        tools: [...fields.tools.querySelectorAll("input:checked")].map((box) => box.value),
        skills: [...fields.grants.querySelectorAll("input:checked")].map((box) => box.value),
        hosts: job ? job.grants.hosts || [] : [],
      },
      enabled: fields.enabled.checked,
      // As read: a job changed since (elsewhere) is refused, not overwritten.
      ...(job ? { updated_at: job.updated_at } : {}),
    };
    try {
      const saved = job ? await put(`/api/jobs/${job.id}`, body) : await post("/api/jobs", body);
      await done(saved, `${job ? "Saved" : "Created"} ${saved.name}; next run ${inZone(saved.next_run_at)}.`);
    } catch (error) {
      showError(error, "Saving the job");
    }
  }));
  return form;
}

// Each ended step: its tool and how it ended, linked to its script's run when it had one.
function stepsDone(run) {
  const ended = run.steps || [];
  if (!ended.length) return "—";
  return ended.map((step) => {
    const what = `${step.step}. ${step.tool || step.kind || "step"} ${String(step.status || "?").replaceAll("_", " ")}`;
    return h("div", {}, step.run_id ? h("a", { href: `#/runs/${step.run_id}` }, what) : what);
  });
}

// The skill versions its steps pin (`name@<hash>`); one the skill moved on from is marked: that
// step fails until the skill is rolled back to it or the pin is moved (its skill page has both).
function pinned(pins) {
  if (!pins || !pins.length) return null;
  return h("ul", { class: "pins" }, pins.map((pin) => h("li", { dataset: { pin: pin.skill, lagging: String(pin.lagging) } },
    `step ${pin.step} pins `, h("a", { href: `#/skills/${pin.skill}` }, pin.skill), "@", h("code", {}, hash8(pin.hash)),
    pin.lagging
      ? h("span", { class: "error" }, pin.current_hash ? ` — lags behind ${hash8(pin.current_hash)}` : " — the skill is gone")
      : h("span", { class: "muted" }, " (current)"))));
}

export async function page({ main, onFeed }) {
  try {
    await list("/api/jobs");
  } catch (error) {
    if (error.status !== 404) throw error;
    replace(main, unavailable("Jobs", "GET /api/jobs", "Scheduled jobs show up here once the server has the jobs routes."));
    return;
  }
  const note = h("p", { class: "notice", role: "status", hidden: true });
  const jobs = h("div", { id: "jobs" });
  const side = h("div", { id: "job-side" });
  let historyOf = null; // the job whose history is on show, kept fresh by the feed

  function tell(message) {
    replace(note, message || "");
    note.hidden = !message;
  }

  async function edit(job) {
    historyOf = null;
    tell(null);
    const [{ items: skills }, { items: tools }] = await Promise.all([
      listAll("/api/skills"), listAll("/api/settings/tools").catch(() => ({ items: [] })),
    ]);
    replace(side, editor(job, skills, tools, async (saved, message) => {
      replace(side);
      tell(message);
      await load();
      if (saved) await history(saved);
    }));
    side.querySelector("input").focus();
  }

  async function history(job) {
    historyOf = job;
    const { items } = await list(`/api/jobs/${job.id}/runs`);
    if (historyOf !== job) return;
    replace(side, h("section", { class: "panel", id: "job-history", dataset: { jobId: job.id } },
      h("h2", {}, `History of ${job.name}`),
      items.length ? table(["Started", "Trigger", "State", "Steps", "Error"],
        items.map((run) => h("tr", { dataset: { jobRunId: run.id, status: run.status } },
          h("td", {}, inZone(run.started_at || run.created_at)),
          h("td", {}, run.trigger),
          h("td", {}, status(run.status),
            run.approval_id ? [" ", h("a", { href: "#/approvals" }, "answer it")] : null),
          h("td", {}, stepsDone(run)),
          h("td", { class: "wide" }, run.error_message ? `${run.error_message} (${run.error_code})` : ""))))
        : h("p", { class: "empty" }, "It has not run yet.")));
  }

  async function runNow(job, button) {
    await busy(button, async () => {
      try {
        const started = await post(`/api/jobs/${job.id}/run`);
        tell(`Started ${job.name} (run ${started.job_run_id.slice(0, 8)}).`);
      } catch (error) {
        showError(error, `Running ${job.name}`);
      }
      await history(job);
    })();
  }

  async function load() {
    const { items } = await list("/api/jobs");
    replace(jobs, items.length ? table(["Job", "Schedule", "Next run", "Steps", ""],
      items.map((job) => {
        const run = h("button", { type: "button" }, "Run now");
        run.addEventListener("click", () => runNow(job, run));
        return h("tr", { dataset: { jobId: job.id } },
          h("td", {}, h("strong", {}, job.name), job.enabled ? "" : h("span", { class: "muted" }, " (disabled)")),
          h("td", {}, h("code", {}, job.cron), " ", h("span", { class: "muted" }, job.time_zone)),
          h("td", {}, job.next_run_at ? inZone(job.next_run_at) : "—"),
          h("td", {}, job.steps.map((step) => step.tool || "prompt").join(" → "), pinned(job.pins)),
          h("td", { class: "actions" }, run,
            h("button", { type: "button", onclick: () => edit(job).catch((e) => showError(e, "Editing the job")) }, "Edit"),
            h("button", { type: "button", onclick: () => history(job).catch((e) => showError(e, "History")) }, "History")));
      }))
      : h("p", { class: "empty" }, "No jobs yet."));
  }

  replace(main, h("h1", {}, "Jobs"),
    h("p", { class: "muted", id: "time-zone-note" }, `Times are in your browser's time zone, ${LOCAL}; `
      + "each job's schedule runs on its own zone's clock."),
    h("div", { class: "actions" }, h("button", { type: "button", class: "primary", onclick: () => edit(null).catch((e) => showError(e, "New job")) }, "New job")),
    note, jobs, side);
  onFeed((event) => {
    const ours = event.kind === "job_run.state" || event.kind === "reconnected";
    if (!ours) return;
    load().catch(showError);
    if (historyOf && (event.kind === "reconnected" || event.data.job_id === historyOf.id)) {
      history(historyOf).catch(showError);
    }
  });
  await load();
}

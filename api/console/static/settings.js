// Settings: every tool with its tier; what runs without asking (change tools, the change skills'
// current versions, hosts read_web_page reads); and whether run_command runs through a shell.
// Each change is saved at once with PUT /api/settings, which takes the whole list. Below them,
// the model sources (sources.js).

import { get, listAll, put } from "./api.js";
import { sourcesSection } from "./sources.js";
import { busy, h, hash8, replace, showError, table } from "./ui.js";

const HOST = "host:";
const SKILL = "skill:";

// Why a tool has no box: run_skill_script takes each skill's tier; destructive calls ask.
const NOT_OFFERED = { run_skill_script: "each skill's tier: see below", destructive: "never: it always asks" };

function tierBadge(tier) {
  return h("span", { class: `tier tier-${tier}` }, tier);
}

// One line of what the tool does: the first sentence, the rest in its tooltip.
function summary(text) {
  const first = String(text || "").split(/(?<=\.)\s/)[0];
  return h("span", { title: text }, first);
}

export async function page({ main }) {
  const note = h("p", { class: "notice", role: "status", hidden: true });
  const tools = h("section", { id: "settings-tools" });
  const skills = h("section", { id: "settings-skills" });
  const hosts = h("section", { id: "settings-hosts" });
  const shell = h("section", { id: "settings-shell" });
  let settings;
  let toolList;
  let skillList;

  async function save(keys, runCommandShell, what) {
    note.hidden = true;
    try {
      settings = await put("/api/settings", { auto_tools: [...keys], run_command_shell: runCommandShell });
      replace(note, `Saved: ${what}.`);
      note.hidden = false;
    } catch (error) {
      showError(error, "Saving the settings");
    }
    render();
  }

  // The list with `entry` in (or out), saved.
  function toggle(entry, on, what) {
    const keys = new Set(settings.auto_tools);
    if (on) keys.add(entry);
    else keys.delete(entry);
    return save(keys, settings.run_command_shell, what);
  }

  function box(entry, label, what) {
    const input = h("input", { type: "checkbox", name: "auto", value: entry, checked: settings.auto_tools.includes(entry),
      "aria-label": label });
    input.addEventListener("change", busy(input, () =>
      toggle(entry, input.checked, `${what} ${input.checked ? "runs without asking" : "asks first"}`)));
    return input;
  }

  function renderTools() {
    replace(tools, h("h2", {}, "Tools"),
      h("p", { class: "muted" }, "Every tool an agent can call, with its tier. A change tool ticked here runs "
        + "without asking, in every chat and job; destructive tools always ask."),
      table(["Tool", "Tier", "What it does", "Run without asking"], toolList.map((tool) =>
        h("tr", { dataset: { tool: tool.name } },
          h("td", {}, h("code", {}, tool.name),
            tool.aliases.length ? h("span", { class: "muted" }, ` (also ${tool.aliases.join(", ")})`) : null),
          h("td", {}, tierBadge(tool.tier)),
          h("td", { class: "wide" }, summary(tool.description)),
          h("td", {}, tool.owner_may_allow ? box(tool.name, `Run ${tool.name} without asking`, tool.name)
            : h("span", { class: "muted" }, NOT_OFFERED[tool.name] || NOT_OFFERED[tool.tier] || "—")))),
      { class: "tool-tiers" }));
  }

  function renderSkills() {
    const change = skillList.filter((skill) => skill.tier === "change" && skill.enabled && skill.source !== "draft");
    const current = new Set(change.map((skill) => `${SKILL}${skill.name}@${hash8(skill.hash)}`));
    const earlier = settings.auto_tools.filter((key) => key.startsWith(SKILL) && !current.has(key));
    const choices = change.map((skill) => {
      const entry = `${SKILL}${skill.name}@${hash8(skill.hash)}`;
      return h("label", { class: "check" }, box(entry, `Run ${skill.name} without asking`, skill.name),
        skill.name, " ", h("code", { class: "muted" }, `@${hash8(skill.hash)}`));
    });
    for (const key of earlier) {
      choices.push(h("label", { class: "check" }, box(key, `Run ${key} without asking`, key),
        key.slice(SKILL.length), " ", h("span", { class: "muted" }, "an earlier version: it no longer matches")));
    }
    replace(skills, h("h2", {}, "Change skills"),
      h("p", { class: "muted" }, "run_skill_script takes each skill's tier. A change skill ticked here runs "
        + "without asking at this version; a new version asks again until ticked."),
      h("fieldset", { class: "grants" }, h("legend", {}, "Run without asking"),
        choices.length ? choices : h("p", { class: "muted" }, "None of your enabled skills is a change skill.")));
  }

  function renderHosts() {
    const granted = settings.auto_tools.filter((key) => key.startsWith(HOST));
    const input = h("input", { id: "host-grant", name: "host", placeholder: "docs.example.com", required: true,
      spellcheck: "false", autocomplete: "off" });
    const add = h("button", { type: "submit" }, "Allow");
    const form = h("form", { class: "inline", id: "host-form" },
      h("label", { for: "host-grant" }, "Host"), input, add);
    form.addEventListener("submit", busy(add, async (event) => {
      event.preventDefault();
      const host = input.value.trim();
      await toggle(`${HOST}${host}`, true, `${host} is read without asking`);
    }));
    replace(hosts, h("h2", {}, "Hosts"),
      h("p", { class: "muted" }, "Hosts read_web_page reads without asking, in every chat and job "
        + "(every page, port and scheme of the host; not its subdomains)."),
      granted.length ? table(["Host", ""], granted.map((key) => h("tr", { dataset: { host: key.slice(HOST.length) } },
        h("td", {}, h("code", {}, key.slice(HOST.length))),
        h("td", {}, h("button", { type: "button", class: "danger", onclick: () => {
          if (window.confirm(`Revoke ${key.slice(HOST.length)}? Reads of it ask again.`)) {
            toggle(key, false, `${key.slice(HOST.length)} asks first`);
          }
        } }, "Revoke")))))
        : h("p", { class: "empty" }, "No host is read without asking."),
      form);
  }

  function renderShell() {
    const input = h("input", { type: "checkbox", id: "run-command-shell", checked: settings.run_command_shell });
    input.addEventListener("change", busy(input, () => save(settings.auto_tools, input.checked,
      input.checked ? "run_command runs through /bin/sh -c" : "run_command runs its command without a shell")));
    replace(shell, h("h2", {}, "run_command"),
      h("label", { class: "check", for: "run-command-shell" }, input,
        "Run commands through /bin/sh -c (pipes, globs, $VARIABLES)"),
      h("p", { class: "muted" }, "Unticked, a command is split like a shell would split it and runs without one. "
        + "run_command is destructive: each call asks you first (unless a job was granted it), and the card "
        + "shows whether a shell runs it."));
  }

  function render() {
    renderTools();
    renderSkills();
    renderShell();
    renderHosts();
  }

  const sources = sourcesSection(note);
  [settings, { items: toolList }, { items: skillList }] = await Promise.all([
    get("/api/settings"), listAll("/api/settings/tools"), listAll("/api/skills"), sources.load(),
  ]);
  replace(main, h("h1", {}, "Settings"), note, tools, skills, shell, hosts, sources.section);
  render();
}

// Skills: the list, importing (zip or GitHub folder; replacing one installed, once confirmed),
// switching on and off, and a skill page that replaces or deletes it.

import { call, del, get, listAll, put, token } from "./api.js";
import { busy, definitions, h, hash8, replace, showError, table, when } from "./ui.js";

// An import sent again with ?replace=true, once the owner confirms, when the first answer was
// 409 skill_exists ("… pass replace=true to replace it").
function importForms(done) {
  const file = h("input", { id: "skill-zip", name: "file", type: "file", accept: ".zip,application/zip", required: true });
  const zipButton = h("button", { type: "submit" }, "Import zip");
  const zipForm = h("form", { class: "inline" },
    h("label", { for: "skill-zip" }, "Skill zip"), file, zipButton);
  zipForm.addEventListener("submit", busy(zipButton, async (event) => {
    event.preventDefault();
    const upload = file.files[0];
    await done((query = "") => {
      const body = new FormData();
      body.append("file", upload);
      return call("POST", `/api/skills${query}`, body);
    });
    zipForm.reset();
  }));

  const url = h("input", { id: "github-url", name: "github", type: "url", required: true, placeholder: "https://github.com/owner/repo/tree/main/skills/name" });
  const githubButton = h("button", { type: "submit" }, "Import from GitHub");
  const githubForm = h("form", { class: "inline" },
    h("label", { for: "github-url" }, "GitHub folder URL"), url, githubButton);
  githubForm.addEventListener("submit", busy(githubButton, async (event) => {
    event.preventDefault();
    const github = url.value.trim();
    await done((query = "") => call("POST", `/api/skills${query}`, { github }));
    githubForm.reset();
  }));
  return h("section", { class: "panel" }, h("h2", {}, "Import a skill"), zipForm, githubForm);
}

// Enable or Disable, sending the hash shown: if the skill changed since, the API answers 409.
// A built-in or configured skill is read-only (the API answers 403): no button is offered.
// A skill held for want of a trusted signature is enabled only after the owner confirms the
// override, which the server records.
function switchButton(skill, done) {
  if (skill.read_only) return h("span", { class: "muted read-only", title: "Built in or from a configured path; duplicate it to change it." }, "read-only");
  const doing = skill.enabled ? "Disabling" : "Enabling";
  const held = !skill.enabled && skill.signature_hold;
  const button = h("button", { type: "button", class: "switch" }, skill.enabled ? "Disable" : held ? "Enable anyway" : "Enable");
  button.addEventListener("click", busy(button, async () => {
    const body = { enabled: !skill.enabled, hash: skill.hash };
    if (held) {
      if (!confirm(`No key you trust signed ${skill.name}. Enable it anyway? The override is recorded.`)) return;
      body.override_signature = true;
    }
    try {
      await put(`/api/skills/${skill.name}/enabled`, body);
    } catch (error) {
      showError(error, `${doing} ${skill.name}`);
    }
    await done();
  }));
  return button;
}

// Where its scripts run: the owner's choice (PUT /api/skills/<name>/execution, its hash stays)
// or what SKILL.md says; `auto` runs on the Spark while one serves, else on the node a call names.
const RUNS_ON = {
  node: "a node the call names",
  spark: "the Spark (a throwaway container)",
  sandbox: "the sandbox (a micro-VM)",
  auto: "the Spark while a Spark worker serves, else the node a call names",
};

function runsOn(skill, done) {
  const shown = h("span", { id: "skill-runs-on" }, RUNS_ON[skill.execution] || skill.execution,
    skill.execution_choice ? h("span", { class: "muted" }, " (your choice)") : null);
  if (skill.read_only) return shown;
  const choice = h("select", { id: "skill-execution", "aria-label": "Where its scripts run" },
    h("option", { value: "" }, "As its SKILL.md says"),
    ["node", "spark", "sandbox"].map((value) => h("option", { value }, `On ${RUNS_ON[value]}`)));
  choice.value = skill.execution_choice || "";
  choice.addEventListener("change", busy(choice, async () => {
    try {
      await put(`/api/skills/${skill.name}/execution`, { execution: choice.value || null });
    } catch (error) {
      showError(error, `Choosing where ${skill.name} runs`);
    }
    await done();
  }));
  return h("span", {}, shown, " ", choice);
}

// Who signed it, as the owner's trusted keys say (the Keys page), and whether it is held.
function signedBy(skill) {
  const said = skill.signature_status === "trusted" ? skill.signed_by
    : skill.signature_status === "untrusted" ? h("span", {}, "a key you don't trust: ", h("code", {}, skill.signer_fingerprint))
      : h("span", { class: "muted" }, "unsigned");
  return h("span", { id: "skill-signed-by" }, said,
    skill.signature_hold ? h("span", { class: "warning" }, " — held: no key you trust signed it") : null);
}

// A description kept to two lines in the table (a real one runs to 1,024 characters); the
// full text is its tooltip, a click on it unfolds it, and the skill's page shows it whole.
function description(text) {
  const shown = h("div", { class: "clamp", title: text, tabindex: 0, role: "button", "aria-expanded": "false" }, text);
  const toggle = () => shown.setAttribute("aria-expanded", String(shown.classList.toggle("open")));
  shown.addEventListener("click", toggle);
  shown.addEventListener("keydown", (event) => {
    if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      toggle();
    }
  });
  return shown;
}

function row(skill, load) {
  return h("tr", { dataset: { skill: skill.name } },
    h("td", {}, h("a", { href: `#/skills/${skill.name}` }, skill.name)),
    h("td", { class: "wide" }, description(skill.description)),
    h("td", {}, skill.tier),
    h("td", {}, skill.execution),
    h("td", {}, h("code", {}, hash8(skill.hash))),
    h("td", {}, skill.source),
    h("td", {}, skill.enabled ? "enabled" : "disabled"),
    h("td", {}, switchButton(skill, load)));
}

export async function page({ main }) {
  const note = h("p", { class: "notice", role: "status", hidden: true });
  const skills = h("div", { id: "skills" });

  async function load() {
    const { items } = await listAll("/api/skills");
    replace(skills, table(["Name", "Description", "Tier", "Runs on", "Hash", "Source", "State", ""],
      items.map((skill) => row(skill, load))));
  }

  function tell(...message) {
    replace(note, ...message);
    note.hidden = false;
  }

  async function imported(request, replacing = false) {
    note.hidden = true;
    try {
      const { data } = await request(replacing ? "?replace=true" : "");
      tell(`${replacing ? "Replaced" : "Imported"} ${data.name}@${hash8(data.hash)} (${data.files.length} files, ${data.enabled ? "enabled" : "disabled"}).`);
    } catch (error) {
      if (error.code === "skill_exists" && !replacing) offerReplace(request, error);
      else showError(error, "Import");
    }
    await load();
  }

  // The skill is installed already: say so, and offer to replace it (asked first).
  function offerReplace(request, error) {
    const name = (/skill named '([^']+)'/.exec(error.message) || [])[1] || "the installed skill";
    const button = h("button", { type: "button", class: "danger", id: "replace-skill" }, `Replace ${name}`);
    button.addEventListener("click", busy(button, async () => {
      const question = `Replace ${name} with this import? Its files are replaced; grants of its `
        + "current version stop matching, and its runs so far keep the version they ran.";
      if (window.confirm(question)) await imported(request, true);
    }));
    tell(`${error.message} `, button);
  }

  replace(main, h("h1", {}, "Skills"), importForms(imported), note, skills);
  await load();
}

// What an owner should know before enabling: what the import bent, and the skill's nature.
function notes(skill) {
  const found = [...(skill.warnings || [])];
  if (skill.tier === "destructive") found.push("Destructive: every call asks you, even in a chat that has other grants.");
  if (skill.execution === "spark") found.push("Runs in a container on the Spark host.");
  if (!skill.enabled) found.push("Disabled: agents don't see it.");
  if (skill.locked) found.push("Locked: it can't be edited.");
  if (skill.read_only) found.push("Read-only: built in or from a configured path; duplicate it to change it.");
  return found;
}

function listed(id, title, intro, items) {
  if (!items.length) return null;
  return h("section", { class: "warnings", id },
    h("h2", {}, `${title} (${items.length})`),
    intro ? h("p", {}, intro) : null,
    h("ul", {}, items.map((item) => h("li", {}, item))));
}

// A new version from a zip, installed under this skill's name once the owner confirms.
function replaceForm(skill, done) {
  const file = h("input", { id: "replace-zip", name: "file", type: "file", accept: ".zip,application/zip", required: true });
  const button = h("button", { type: "submit" }, "Replace");
  const form = h("form", { class: "inline", id: "replace-form" },
    h("label", { for: "replace-zip" }, "Replace with a zip"), file, button);
  form.addEventListener("submit", busy(button, async (event) => {
    event.preventDefault();
    const question = `Replace ${skill.name}@${hash8(skill.hash)} with ${file.files[0].name}? `
      + "Grants of this version stop matching; runs so far keep the version they ran.";
    if (!window.confirm(question)) return;
    const body = new FormData();
    body.append("file", file.files[0]);
    const query = new URLSearchParams({ replace: "true", name: skill.name });
    try {
      await call("POST", `/api/skills?${query}`, body);
    } catch (error) {
      showError(error, `Replacing ${skill.name}`);
      return;
    }
    await done();
  }));
  return form;
}

function deleteButton(skill) {
  const button = h("button", { type: "button", class: "danger", id: "delete-skill" }, "Delete");
  button.addEventListener("click", busy(button, async () => {
    const question = `Delete ${skill.name}? Agents can no longer load or run it, and its `
      + "grants stop matching. Its runs so far stay listed.";
    if (!window.confirm(question)) return;
    try {
      await del(`/api/skills/${skill.name}`);
    } catch (error) {
      showError(error, `Deleting ${skill.name}`);
      return;
    }
    location.hash = "#/skills";
  }));
  return button;
}

async function fileText(name, path) {
  const response = await fetch(`/api/skills/${name}/files/${path}`, { headers: { Authorization: `Bearer ${token()}` } });
  if (!response.ok) {
    const body = await response.json().catch(() => ({ message: `The server answered ${response.status}.` }));
    throw Object.assign(new Error(body.message), body);
  }
  return response.text();
}

// Its versions, newest first, each with who made it and how; a kept one that is not current
// offers Rollback (asked to confirm), which makes it current: grants name hashes, so that
// version's grants hold again. A read-only skill has no rollback.
function versions(skill, items, done) {
  const rows = items.map((version) => {
    let action = null;
    if (version.current) action = h("span", { class: "muted" }, "current");
    else if (!skill.read_only && version.kept) {
      const button = h("button", { type: "button", class: "rollback" }, "Rollback");
      button.addEventListener("click", busy(button, async () => {
        if (!window.confirm(`Roll ${skill.name} back to ${hash8(version.hash)}? It becomes the current version, with that version's grants.`)) return;
        try {
          await call("POST", `/api/skills/${skill.name}/rollback`, { hash: version.hash });
        } catch (error) {
          showError(error, `Rolling ${skill.name} back`);
        }
        await done();
      }));
      action = button;
    }
    return h("tr", { dataset: { version: version.hash } },
      h("td", {}, h("code", { title: version.hash }, hash8(version.hash))),
      h("td", {}, when(version.created_at)),
      h("td", {}, version.author || "—"),
      h("td", {}, version.source || "—"),
      h("td", {}, version.signed_by || "—"),
      h("td", {}, version.pinned ? "pinned by a job" : ""),
      h("td", {}, action));
  });
  return h("section", { id: "skill-versions" },
    h("h2", {}, `Versions (${items.length})`),
    table(["Hash", "When", "By", "Source", "Signed by", "", ""], rows));
}

export async function skillPage(context, name) {
  const { main } = context;
  const skill = await get(`/api/skills/${name}`);
  const { items: kept } = await listAll(`/api/skills/${name}/versions`);
  const viewer = h("pre", { id: "file", class: "file" });
  const viewing = h("h2", {}, "SKILL.md");
  async function open(path) {
    replace(viewing, path);
    try {
      replace(viewer, await fileText(name, path));
    } catch (error) {
      showError(error, path);
    }
  }
  replace(main,
    context.back("#/skills", "Skills"),
    h("h1", {}, skill.name),
    h("p", { class: "description" }, skill.description),
    h("div", { class: "actions", id: "skill-actions" }, switchButton(skill, () => skillPage(context, name)),
      skill.read_only ? null : deleteButton(skill)),
    skill.read_only ? null : replaceForm(skill, () => skillPage(context, name)),
    definitions([
      ["State", h("span", { id: "skill-state" }, skill.enabled ? "enabled" : "disabled")],
      ["Tier", skill.tier],
      ["Runs on", runsOn(skill, () => skillPage(context, name))],
      ["Hash", h("code", { class: "hash" }, skill.hash)],
      ["Signed by", signedBy(skill)],
      ["Revision", skill.revision],
      ["Source", skill.origin ? `${skill.source} (${skill.origin})` : skill.source],
      ["Author", skill.author],
      ["Size", `${skill.file_count} files, ${skill.size_bytes} bytes`],
      ["Updated", when(skill.updated_at)],
    ]),
    listed("skill-secrets", "Secrets",
      skill.secrets_allowed === false
        ? h("span", {}, "This version may not have its secrets yet: allow it on the ",
          h("a", { href: "#/secrets" }, "Secrets"), " page.")
        : "Its scripts get these as environment variables; values are never shown.",
      (skill.secrets || []).map((secret) => h("span", {}, h("code", {}, secret.name),
        secret.set ? " — set" : h("span", { class: "muted" }, " — not set")))),
    listed("skill-warnings", "Warnings", null, notes(skill)),
    listed("lint-warnings", "Review warnings",
      "Heuristics that say where to look in the scripts before enabling; they prove nothing either way.",
      skill.lint_warnings || []),
    versions(skill, kept, () => skillPage(context, name)),
    h("h2", {}, "Files"),
    h("ul", { class: "files" }, skill.files.map((file) => h("li", {},
      h("a", { href: `#/skills/${name}`, onclick: (event) => { event.preventDefault(); open(file.path); } }, file.path),
      h("span", { class: "muted" }, ` ${file.size} B`)))),
    viewing,
    viewer);
  if (skill.files.some((file) => file.path === "SKILL.md")) await open("SKILL.md");
}

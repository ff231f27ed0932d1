// Skills: the list, importing (zip or GitHub folder), switching on and off, and a skill page.

import { call, get, list, put, token } from "./api.js";
import { busy, definitions, h, hash8, replace, showError, when } from "./ui.js";

function importForms(done) {
  const file = h("input", { id: "skill-zip", name: "file", type: "file", accept: ".zip,application/zip", required: true });
  const zipButton = h("button", { type: "submit" }, "Import zip");
  const zipForm = h("form", { class: "inline" },
    h("label", { for: "skill-zip" }, "Skill zip"), file, zipButton);
  zipForm.addEventListener("submit", busy(zipButton, async (event) => {
    event.preventDefault();
    const body = new FormData();
    body.append("file", file.files[0]);
    await done(() => call("POST", "/api/skills", body));
    zipForm.reset();
  }));

  const url = h("input", { id: "github-url", name: "github", type: "url", required: true, placeholder: "https://github.com/owner/repo/tree/main/skills/name" });
  const githubButton = h("button", { type: "submit" }, "Import from GitHub");
  const githubForm = h("form", { class: "inline" },
    h("label", { for: "github-url" }, "GitHub folder URL"), url, githubButton);
  githubForm.addEventListener("submit", busy(githubButton, async (event) => {
    event.preventDefault();
    await done(() => call("POST", "/api/skills", { github: url.value.trim() }));
    githubForm.reset();
  }));
  return h("section", { class: "panel" }, h("h2", {}, "Import a skill"), zipForm, githubForm);
}

function row(skill, toggle) {
  const label = skill.enabled ? "Disable" : "Enable";
  return h("tr", { dataset: { skill: skill.name } },
    h("td", {}, h("a", { href: `#/skills/${skill.name}` }, skill.name)),
    h("td", { class: "wide" }, skill.description),
    h("td", {}, skill.tier),
    h("td", {}, skill.execution),
    h("td", {}, h("code", {}, hash8(skill.hash))),
    h("td", {}, skill.source),
    h("td", {}, skill.enabled ? "enabled" : "disabled"),
    h("td", {}, h("button", { type: "button", onclick: () => toggle(skill) }, label)));
}

export async function page({ main }) {
  const note = h("p", { class: "notice", role: "status", hidden: true });
  const table = h("div", { id: "skills" });

  async function load() {
    const { items } = await list("/api/skills");
    replace(table, h("table", {},
      h("thead", {}, h("tr", {}, ["Name", "Description", "Tier", "Runs on", "Hash", "Source", "State", ""].map((t) => h("th", {}, t)))),
      h("tbody", {}, items.map((skill) => row(skill, toggle)))));
  }

  async function toggle(skill) {
    try {
      // The hash shown is the one reviewed: if the skill changed since, the API answers 409.
      await put(`/api/skills/${skill.name}/enabled`, { enabled: !skill.enabled, hash: skill.hash });
    } catch (error) {
      showError(error, `${skill.enabled ? "Disabling" : "Enabling"} ${skill.name}`);
    }
    await load();
  }

  async function imported(request) {
    note.hidden = true;
    try {
      const { data } = await request();
      replace(note, `Imported ${data.name}@${hash8(data.hash)} (${data.files.length} files, ${data.enabled ? "enabled" : "disabled"}).`);
      note.hidden = false;
    } catch (error) {
      showError(error, "Import");
    }
    await load();
  }

  replace(main, h("h1", {}, "Skills"), importForms(imported), note, table);
  await load();
}

// Warnings an owner should read before enabling: from the API when it sends them, else the header.
function warnings(skill) {
  const found = [...(skill.warnings || [])];
  if (skill.tier === "destructive") found.push("Destructive: every call asks you, even in a chat that has other grants.");
  if (skill.execution === "spark") found.push("Runs in a container on the Spark host.");
  if (!skill.enabled) found.push("Disabled: agents don't see it.");
  if (skill.locked) found.push("Locked: it can't be edited.");
  if (skill.read_only) found.push("Read-only: built in or from a configured path; duplicate it to change it.");
  return found;
}

async function fileText(name, path) {
  const response = await fetch(`/api/skills/${name}/files/${path}`, { headers: { Authorization: `Bearer ${token()}` } });
  if (!response.ok) {
    const body = await response.json().catch(() => ({ message: `The server answered ${response.status}.` }));
    throw Object.assign(new Error(body.message), body);
  }
  return response.text();
}

export async function skillPage({ main }, name) {
  const skill = await get(`/api/skills/${name}`);
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
  const found = warnings(skill);
  replace(main,
    h("p", {}, h("a", { href: "#/skills" }, "← Skills")),
    h("h1", {}, skill.name),
    h("p", {}, skill.description),
    definitions([
      ["State", skill.enabled ? "enabled" : "disabled"],
      ["Tier", skill.tier],
      ["Runs on", skill.execution],
      ["Hash", h("code", { class: "hash" }, skill.hash)],
      ["Revision", skill.revision],
      ["Source", skill.origin ? `${skill.source} (${skill.origin})` : skill.source],
      ["Author", skill.author],
      ["Size", `${skill.file_count} files, ${skill.size_bytes} bytes`],
      ["Updated", when(skill.updated_at)],
    ]),
    found.length ? h("section", { class: "warnings" }, h("h2", {}, "Warnings"), h("ul", {}, found.map((w) => h("li", {}, w)))) : null,
    h("h2", {}, "Files"),
    h("ul", { class: "files" }, skill.files.map((file) => h("li", {},
      h("a", { href: `#/skills/${name}`, onclick: (event) => { event.preventDefault(); open(file.path); } }, file.path),
      h("span", { class: "muted" }, ` ${file.size} B`)))),
    viewing,
    viewer);
  if (skill.files.some((file) => file.path === "SKILL.md")) await open("SKILL.md");
}


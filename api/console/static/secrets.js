// Secrets: the owner's secrets by name (never a value), replaced or deleted here, and the skills
// that declare some, each allowed for its current version with one button.

import { del, get, put } from "./api.js";
import { busy, h, hash8, replace, showError, table, when } from "./ui.js";

const enc = encodeURIComponent;

export async function page({ main }) {
  const skills = h("div", { id: "secret-skills" });
  const secrets = h("div", { id: "secrets" });
  const name = h("input", { id: "secret-name", name: "name", placeholder: "API_TOKEN", required: true,
    pattern: "[A-Z][A-Z0-9_]{0,63}", autocomplete: "off" });
  const value = h("input", { id: "secret-value", name: "value", type: "password", required: true,
    autocomplete: "new-password" });
  const skill = h("input", { id: "secret-skill", name: "skill", placeholder: "(any allowed skill)" });
  const button = h("button", { type: "submit" }, "Set");
  const form = h("form", { class: "inline", id: "secret-form" },
    h("label", { for: "secret-name" }, "Name"), name,
    h("label", { for: "secret-value" }, "Value"), value,
    h("label", { for: "secret-skill" }, "Skill"), skill, button);
  form.addEventListener("submit", busy(button, async (event) => {
    event.preventDefault();
    const body = { value: value.value };
    if (skill.value.trim()) body.skill = skill.value.trim();
    try {
      await put(`/api/secrets/${enc(name.value.trim())}`, body);
      form.reset();
    } catch (error) {
      showError(error, "Setting the secret");
    }
    await load();
  }));

  // Replacing asks for the new value in a password field of its own row.
  function replaceButton(item) {
    return h("button", { type: "button", onclick: () => {
      name.value = item.name;
      skill.value = item.skill || "";
      value.focus();
    } }, "Replace");
  }

  function deleteButton(item) {
    return h("button", { type: "button", class: "danger", onclick: async () => {
      const query = item.skill ? `?skill=${enc(item.skill)}` : "";
      try {
        await del(`/api/secrets/${enc(item.name)}${query}`);
      } catch (error) {
        showError(error, "Deleting the secret");
      }
      await load();
    } }, "Delete");
  }

  function allowButton(row) {
    const label = row.allowed ? "Withdraw" : `Allow ${hash8(row.hash)}`;
    return h("button", { type: "button", class: row.allowed ? "danger" : "", onclick: async () => {
      try {
        if (row.allowed) await del(`/api/secrets/skills/${enc(row.skill)}`);
        else await put(`/api/secrets/skills/${enc(row.skill)}`, { hash: row.hash });
      } catch (error) {
        showError(error, "Allowing the skill");
      }
      await load();
    } }, label);
  }

  function render(found) {
    replace(secrets, found.secrets.length === 0
      ? h("p", { class: "muted" }, "No secrets yet.")
      : table(["Name", "Skill", "Set", "Allowed", "", ""],
        found.secrets.map((item) => h("tr", {},
          h("td", {}, h("code", {}, item.name)),
          h("td", {}, item.skill || "any allowed skill"),
          h("td", {}, when(item.updated_at)),
          h("td", {}, item.allowed === null ? "—" : item.allowed ? "yes" : "no"),
          h("td", {}, replaceButton(item)),
          h("td", {}, deleteButton(item))))));
    replace(skills, found.skills.length === 0 ? "" : h("section", {},
      h("h2", {}, "Skills that declare secrets"),
      h("p", { class: "muted" },
        "A version may have its secrets only once you allow it; any edit needs a new allow."),
      table(["Skill", "Version", "Declares", "Missing", ""],
        found.skills.map((row) => h("tr", {},
          h("td", {}, h("a", { href: `#/skills/${row.skill}` }, row.skill)),
          h("td", {}, h("code", {}, hash8(row.hash))),
          h("td", {}, row.declared.join(" ")),
          h("td", {}, row.missing.join(" ") || "—"),
          h("td", {}, allowButton(row)))))));
  }

  async function load() {
    render(await get("/api/secrets"));
  }

  replace(main, h("h1", {}, "Secrets"),
    h("p", { class: "muted" }, "Values are kept encrypted and never shown again."),
    form, secrets, skills);
  await load();
}

// Keys: the SSH keys trusted to sign skills (skillfleet.sig), and whether skills need a
// trusted signature (the owner's require_signature).

import { del, get, listAll, post, put } from "./api.js";
import { busy, h, replace, showError, table, when } from "./ui.js";

function trustForm(done) {
  const name = h("input", { id: "key-name", name: "name", placeholder: "dev@example.org" });
  const key = h("textarea", { id: "key-text", name: "public_key", rows: 3, required: true,
    placeholder: "ssh-ed25519 AAAA… (a .pub file's line, or an allowed_signers line)" });
  const button = h("button", { type: "submit" }, "Trust key");
  const form = h("form", { class: "inline", id: "trust-key" },
    h("label", { for: "key-name" }, "Name (left empty: the allowed_signers line's principal)"), name,
    h("label", { for: "key-text" }, "Public key"), key, button);
  form.addEventListener("submit", busy(button, async (event) => {
    event.preventDefault();
    try {
      await post("/api/trusted-keys", { name: name.value.trim() || null, public_key: key.value.trim() });
      form.reset();
    } catch (error) {
      showError(error, "Trusting the key");
    }
    await done();
  }));
  return h("section", { class: "panel" }, h("h2", {}, "Trust a key"), form);
}

function requirement(settings, done) {
  const box = h("input", { id: "require-signature", type: "checkbox" });
  box.checked = settings.require_signature;
  box.addEventListener("change", busy(box, async () => {
    try {
      await put("/api/settings", { auto_tools: settings.auto_tools, require_signature: box.checked });
    } catch (error) {
      showError(error, "Changing the requirement");
    }
    await done();
  }));
  return h("section", { class: "panel" },
    h("label", { for: "require-signature" }, box,
      " Require a trusted signature: skills no key here signed import disabled and are enabled only with an override."));
}

export async function page({ main }) {
  const keys = h("div", { id: "trusted-keys" });
  const switches = h("div", {});

  async function load() {
    const [{ items }, settings] = await Promise.all([listAll("/api/trusted-keys"), get("/api/settings")]);
    replace(switches, requirement(settings, load));
    replace(keys, items.length
      ? table(["Name", "Type", "Fingerprint", "Comment", "Added", ""], items.map((key) => h("tr", { dataset: { key: key.name } },
        h("td", {}, key.name),
        h("td", {}, `${key.key_type} (${key.bits} bits)`),
        h("td", {}, h("code", {}, key.fingerprint)),
        h("td", {}, key.comment || "—"),
        h("td", {}, when(key.created_at)),
        h("td", {}, h("button", { type: "button", class: "danger", onclick: async () => {
          try {
            await del(`/api/trusted-keys/${encodeURIComponent(key.name)}`);
          } catch (error) {
            showError(error, "Removing the key");
          }
          await load();
        } }, "Remove")))))
      : h("p", { class: "muted" }, "No key is trusted yet: every signed skill shows as untrusted."));
  }

  replace(main, h("h1", {}, "Trusted keys"),
    h("p", {}, "Authors sign a skill with ", h("code", {}, "skillfleet skills sign DIR --key KEY"),
      "; a skill signed by a key here shows its name."),
    switches, trustForm(load), keys);
  await load();
}

// Settings' model sources: the OpenAI-compatible servers turns may run on (never a key shown
// back), added here (a LiteLLM source may take a virtual key minted for the owner) and each
// removed once confirmed.

import { del, listAll, post } from "./api.js";
import { busy, h, replace, showError, table, when } from "./ui.js";

function keyOf(source) {
  if (source.virtual_key) return source.virtual_key_minted ? "virtual key (minted)" : "virtual key (minted when first used)";
  return source.api_key_set ? "kept (never shown)" : "none";
}

function addForm(added) {
  const name = h("input", { id: "source-name", name: "name", required: true, placeholder: "openai", spellcheck: "false",
    autocomplete: "off", pattern: "[a-z0-9]+(-[a-z0-9]+)*", maxlength: 64 });
  const kind = h("select", { id: "source-kind", name: "kind" },
    h("option", { value: "openai" }, "openai (any OpenAI-compatible server)"), h("option", { value: "litellm" }, "litellm"));
  const url = h("input", { id: "source-url", name: "base_url", type: "url", placeholder: "https://api.openai.com/v1",
    spellcheck: "false", autocomplete: "off" });
  const key = h("input", { id: "source-key", name: "api_key", type: "password", autocomplete: "off", spellcheck: "false" });
  const virtual = h("input", { id: "source-virtual", name: "virtual_key", type: "checkbox" });
  const virtualLabel = h("label", { class: "check", for: "source-virtual", hidden: true }, virtual,
    "Virtual key: minted for you with the operator's master key");
  const submit = h("button", { type: "submit", class: "primary" }, "Add source");
  const form = h("form", { id: "source-form", class: "sources-form" },
    h("label", { for: "source-name" }, "Name", name),
    h("label", { for: "source-kind" }, "Kind", kind),
    h("label", { for: "source-url" }, "Base URL", url),
    h("label", { for: "source-key" }, "API key", key),
    virtualLabel, submit);
  function fit() {
    virtualLabel.hidden = kind.value !== "litellm";
    if (virtualLabel.hidden) virtual.checked = false;
    key.disabled = virtual.checked; // the key is the minted one
    url.required = !virtual.checked; // a virtual key's source defaults to the operator's LiteLLM
  }
  kind.addEventListener("change", fit);
  virtual.addEventListener("change", fit);
  fit();
  form.addEventListener("submit", busy(submit, async (event) => {
    event.preventDefault();
    const body = { name: name.value.trim(), kind: kind.value, virtual_key: virtual.checked };
    if (url.value.trim()) body.base_url = url.value.trim();
    if (key.value && !virtual.checked) body.api_key = key.value;
    try {
      await post("/api/model-sources", body);
    } catch (error) {
      showError(error, `Adding ${body.name}`);
      return;
    } finally {
      key.value = ""; // a key is not kept on the page, sent or not
    }
    form.reset();
    fit();
    await added(body.name);
  }));
  return form;
}

export function sourcesSection(note) {
  const section = h("section", { id: "settings-sources" });

  async function said(text) {
    replace(note, text);
    note.hidden = false;
    await load();
  }

  function remove(source) {
    if (!window.confirm(`Remove the model source ${source.name}? Its key is deleted with it.`)) return;
    del(`/api/model-sources/${encodeURIComponent(source.name)}`)
      .then(() => said(`Removed the model source ${source.name}.`))
      .catch((error) => showError(error, `Removing ${source.name}`));
  }

  async function load() {
    const { items } = await listAll("/api/model-sources");
    replace(section, h("h2", {}, "Model sources"),
      h("p", { class: "muted" }, "OpenAI-compatible servers your chats and jobs may run on; the model and its "
        + "reasoning effort are picked on the Chat page. A key is kept encrypted and never shown back."),
      items.length ? table(["Name", "Kind", "Base URL", "Key", "Added", ""], items.map((source) =>
        h("tr", { dataset: { source: source.name } },
          h("td", {}, h("code", {}, source.name)),
          h("td", {}, source.kind),
          h("td", { class: "wide" }, h("code", {}, source.base_url)),
          h("td", {}, keyOf(source)),
          h("td", {}, when(source.created_at)),
          h("td", {}, h("button", { type: "button", class: "danger", onclick: () => remove(source) }, "Remove")))),
      { id: "sources" })
        : h("p", { class: "empty" }, "No model source yet."),
      h("h3", {}, "Add a source"),
      addForm((name) => said(`Added the model source ${name}.`)));
  }

  return { section, load };
}

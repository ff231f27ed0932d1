// The model picker: the owner's sources and the models each lists (or why it can't), the
// reasoning effort and the context tier; a choice is saved at once as the default model
// (PUT /api/settings/model).

import { get, listAll, put } from "./api.js";
import { h, replace, showError } from "./ui.js";

const EFFORTS = ["none", "minimal", "low", "medium", "high"];
// The context tiers and the tokens of history each leaves room for (docs/turns.md).
const CONTEXTS = [["small", "8,192 tokens"], ["medium", "32,768 tokens"], ["large", "131,072 tokens"]];

async function modelsOf(source) {
  try {
    return await get(`/api/model-sources/${encodeURIComponent(source.name)}/models`);
  } catch (error) {
    return { source: source.name, models: [], error: { code: error.code, message: error.message } };
  }
}

function modelSelect(lists, current) {
  const chosen = current.source ? JSON.stringify([current.source, current.model]) : "";
  const select = h("select", { id: "model-choice", name: "model" },
    chosen ? null : h("option", { value: "", selected: true }, "Choose a model"),
    lists.map(({ source, models }) => {
      const names = [...models];
      // The model in use shows even when its source can't list it now.
      if (source === current.source && current.model && !names.includes(current.model)) names.unshift(current.model);
      return h("optgroup", { label: source }, names.map((model) => {
        const value = JSON.stringify([source, model]);
        return h("option", { value, selected: value === chosen }, model);
      }));
    }));
  return select;
}

function effortSelect(current) {
  return h("select", { id: "reasoning-effort", name: "reasoning_effort" },
    h("option", { value: "", selected: !current.reasoning_effort }, "default (not sent)"),
    EFFORTS.map((effort) => h("option", { value: effort, selected: current.reasoning_effort === effort }, effort)));
}

function contextSelect(current) {
  const chosen = current.context == null ? "" : String(current.context);
  const known = CONTEXTS.some(([tier]) => tier === chosen);
  return h("select", { id: "context-tier", name: "context" },
    h("option", { value: "", selected: !chosen }, "whole history"),
    CONTEXTS.map(([tier, size]) => h("option", { value: tier, selected: chosen === tier }, `${tier} (${size})`)),
    // A number of tokens set through the API or the CLI shows as it is.
    chosen && !known ? h("option", { value: chosen, selected: true }, `${chosen} tokens`) : null);
}

// Each source that can't list its models, with its reason.
function problems(lists) {
  const failed = lists.filter((list) => list.error);
  if (!failed.length) return null;
  return h("ul", { class: "source-problems" }, failed.map((list) =>
    h("li", { dataset: { source: list.source } }, h("b", {}, list.source), ": ", list.error.message,
      h("span", { class: "muted" }, ` (${list.error.code})`))));
}

export function picker() {
  const area = h("section", { id: "model-picker", class: "model-picker", "aria-label": "Model" },
    h("span", { class: "muted" }, "Loading the models…"));
  const note = h("span", { class: "muted saved", role: "status" });
  let current;

  async function save(model, effort, context) {
    replace(note, "");
    if (!model.value) return;
    const [source, name] = JSON.parse(model.value);
    const tier = context.value === "" ? null : /^\d+$/.test(context.value) ? Number(context.value) : context.value;
    const body = { source, model: name, reasoning_effort: effort.value || null, context: tier };
    try {
      current = await put("/api/settings/model", body);
      const effortNote = body.reasoning_effort ? `, reasoning effort ${body.reasoning_effort}` : "";
      const contextNote = body.context ? `, context ${body.context}` : "";
      replace(note, `Saved: ${name} on ${source}${effortNote}${contextNote}.`);
    } catch (error) {
      showError(error, "Choosing the model");
    }
  }

  async function load() {
    const [{ items: sources }, setting] = await Promise.all([listAll("/api/model-sources"), get("/api/settings/model")]);
    current = setting || {};
    if (!sources.length) {
      replace(area, h("p", { class: "muted" }, "No model source yet: add one on ",
        h("a", { href: "#/settings" }, "Settings"), "."));
      return;
    }
    const lists = await Promise.all(sources.map(modelsOf));
    const model = modelSelect(lists, current);
    const effort = effortSelect(current);
    const context = contextSelect(current);
    for (const select of [model, effort, context]) select.addEventListener("change", () => save(model, effort, context));
    replace(area,
      h("div", { class: "picker-line" },
        h("label", { for: "model-choice" }, "Model"), model,
        h("label", { for: "reasoning-effort" }, "Reasoning effort"), effort,
        h("label", { for: "context-tier" }, "Context"), context, note),
      problems(lists));
  }

  load().catch((error) => {
    replace(area, h("p", { class: "muted" }, "The models could not be listed."));
    showError(error, "Listing the models");
  }).finally(() => {
    area.dataset.loaded = "true";
  });
  return area;
}

// The model picker: the owner's sources and the models each lists (or why it can't), and the
// reasoning effort; a choice is saved at once as the default model (PUT /api/settings/model).

import { get, listAll, put } from "./api.js";
import { h, replace, showError } from "./ui.js";

const EFFORTS = ["none", "minimal", "low", "medium", "high"];

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

  async function save(model, effort) {
    replace(note, "");
    if (!model.value) return;
    const [source, name] = JSON.parse(model.value);
    const body = { source, model: name, reasoning_effort: effort.value || null, context: current.context ?? null };
    try {
      current = await put("/api/settings/model", body);
      replace(note, `Saved: ${name} on ${source}${body.reasoning_effort ? `, reasoning effort ${body.reasoning_effort}` : ""}.`);
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
    model.addEventListener("change", () => save(model, effort));
    effort.addEventListener("change", () => save(model, effort));
    replace(area,
      h("div", { class: "picker-line" },
        h("label", { for: "model-choice" }, "Model"), model,
        h("label", { for: "reasoning-effort" }, "Reasoning effort"), effort, note),
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

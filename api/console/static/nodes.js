// Nodes: each managed server's heartbeat, features and held skill versions; sync on demand.

import { listAll, post } from "./api.js";
import { ago, busy, h, hash8, replace, showError, table } from "./ui.js";

export async function page({ main, onLeave }) {
  const nodes = h("div", { id: "nodes" });
  const note = h("p", { class: "notice", role: "status", hidden: true });
  replace(main, h("h1", {}, "Nodes"), note, nodes);

  async function sync(name, button) {
    await busy(button, async () => {
      try {
        const answer = await post(`/api/nodes/${name}/sync`);
        replace(note, `Asked ${name} to sync; ${answer.receivers} agent(s) listening.`);
        note.hidden = false;
      } catch (error) {
        showError(error, `Syncing ${name}`);
      }
    })();
  }

  async function load() {
    const { items } = await listAll("/api/nodes");
    if (!items.length) {
      replace(nodes, h("p", { class: "empty" }, "No node has registered or beaten yet."));
      return;
    }
    replace(nodes, table(["Node", "State", "Last heartbeat", "Features", "Skills held", ""],
      items.map((node) => {
        const button = h("button", { type: "button" }, "Sync now");
        button.addEventListener("click", () => sync(node.name, button));
        return h("tr", { dataset: { node: node.name } },
          h("td", {}, node.name, node.registered ? "" : h("span", { class: "muted" }, " (not registered)")),
          h("td", {}, state(node)),
          h("td", {}, ago(node.last_heartbeat)),
          h("td", {}, node.features.join(", ") || "—"),
          h("td", {}, Object.entries(node.hashes).map(([skill, hashes]) =>
            h("div", {}, h("code", {}, `${skill}@${hashes.map(hash8).join(", ")}`)))),
          h("td", {}, button));
      })));
  }

  // A node whose workers beat but serve nothing is not alive: it says why instead.
  function state(node) {
    const shown = { alive: "alive", not_serving: "not serving", stale: "silent", down: "silent" };
    const badge = h("span", { class: `status status-${node.health}` }, shown[node.health] || node.health);
    const why = node.workers.map((worker) => worker.reason).find((reason) => reason);
    return node.health === "not_serving" && why ? [badge, h("div", { class: "muted" }, why)] : badge;
  }

  const timer = setInterval(() => load().catch(() => {}), 10_000); // heartbeats are not events
  onLeave(() => clearInterval(timer));
  await load();
}

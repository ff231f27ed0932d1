// Tokens: create an agent token (shown once) and revoke tokens (asked first; the one this
// console uses says so), where the server has the routes.

import { del, list, post } from "./api.js";
import { busy, h, replace, showError, table, unavailable, when } from "./ui.js";

export async function page({ main }) {
  let items;
  try {
    ({ items } = await list("/api/tokens"));
  } catch (error) {
    if (error.status !== 404) throw error;
    replace(main, unavailable("Tokens", "GET /api/tokens",
      "Create tokens on the server with `skillfleet tokens create --owner NAME`."));
    return;
  }
  const shown = h("div", { id: "new-token" });
  const tokens = h("div", { id: "tokens" });
  const label = h("input", { id: "token-label", name: "label", placeholder: "what it is for" });
  const button = h("button", { type: "submit" }, "Create agent token");
  const form = h("form", { class: "inline" }, h("label", { for: "token-label" }, "Label"), label, button);
  form.addEventListener("submit", busy(button, async (event) => {
    event.preventDefault();
    try {
      const created = await post("/api/tokens", { role: "agent", label: label.value.trim() || null });
      replace(shown, h("section", { class: "panel notice" },
        h("p", {}, "Copy this agent token now; it is shown only once."),
        h("code", { class: "secret" }, created.token)));
      form.reset();
    } catch (error) {
      showError(error, "Creating a token");
    }
    await load();
  }));

  function render() {
    // The id is what `skillfleet tokens revoke` takes.
    replace(tokens, table(["Id", "Label", "Role", "Created", "Last used", "Expires", ""],
      items.map((item) => h("tr", {},
        h("td", {}, h("code", {}, String(item.id))),
        h("td", {}, item.label || "—"),
        h("td", {}, item.resource ? `${item.role} · MCP host (OAuth)` : item.role || item.kind || "owner"),
        h("td", {}, when(item.created_at)),
        h("td", {}, when(item.last_used_at)),
        h("td", {}, item.expires_at ? when(item.expires_at) : "never"),
        h("td", {}, item.in_use ? h("span", { class: "status in-use" }, "this console") : null,
          h("button", { type: "button", class: "danger", onclick: () => revoke(item) }, "Revoke"))))));
  }

  // Revoking asks first; the token this console signed in with says that it signs it out.
  async function revoke(item) {
    const what = `token ${item.id}${item.label ? ` (${item.label})` : ""}`;
    const question = item.in_use
      ? `Revoke ${what}? This console is signed in with it: revoking it signs you out here.`
      : `Revoke ${what}? Whatever uses it is refused from its next request.`;
    if (!window.confirm(question)) return;
    try {
      await del(`/api/tokens/${item.id}`);
    } catch (error) {
      showError(error, "Revoking");
      await load();
      return;
    }
    if (!item.in_use) await load();
    else window.dispatchEvent(new CustomEvent("skillfleet:unauthorized",
      { detail: { message: "You revoked the token this console was signed in with." } }));
  }

  async function load() {
    ({ items } = await list("/api/tokens"));
    render();
  }

  replace(main, h("h1", {}, "Tokens"), form, shown, tokens);
  render();
}

// The memory page: wires the panels to the gateway's memory routes.

import { call, setToken } from "./api.js";
import { newThreadId, sendMessage } from "./chat.js";
import { el, replaceChildren, whileBusy } from "./dom.js";
import { arrange, categoryOptions, focusFact, renderFacts } from "./facts.js";
import { renderHistory } from "./history.js";
import { OPERATIONS as OP, attempt, attemptAll, setHandlers, showNotice } from "./messages.js";
import { focusSummary, renderSummaries } from "./summaries.js";
import { exportMemory, importMemory } from "./transfer.js";

const $ = (id) => document.getElementById(id);

const SEARCH_LIMIT = 50;

const state = {
  agent: agentFromHash(), // null selects the default bucket
  memory: null, // the document as last read; its revision guards edits and deletes
  search: null, // {query, results} while search results are shown
  supports: {}, // optional operation → whether the backend has it (from the status route)
  threadId: newThreadId(),
};

/** Whether the backend has `operation`; unknown (no status yet) counts as yes. */
function supports(operation) {
  return state.supports[operation] !== false;
}

// -- reading ----------------------------------------------------------------------------------

function memoryQuery(extra = {}) {
  return { agent_name: state.agent, ...extra };
}

async function loadMemory(method = "GET", path = "/api/memory") {
  state.memory = await call(method, path, { query: memoryQuery() });
  if (state.search !== null) state.search.results = await searchResults(state.search.query);
  showSummaries(state.memory);
  showFacts();
  return true;
}

async function loadHistory() {
  const { changes } = await call("GET", "/api/memory/history", { query: memoryQuery() });
  renderHistory($("history-list"), changes, supports("revert_change") ? revert : null);
}

async function loadStatus() {
  const status = await call("GET", "/api/memory/status");
  state.supports = status.supports;
  $("server-status").textContent = `Backend ${status.manager_class} · user ${status.user}`;
  replaceChildren($("agent-list"), ...status.agents.map((name) => el("option", { value: name })));
  showSupport();
  return true;
}

async function loadConfig() {
  $("config-view").textContent = JSON.stringify(await call("GET", "/api/memory/config"), null, 2);
}

async function searchResults(query) {
  const found = await call("GET", "/api/memory/search", {
    query: memoryQuery({ q: query, category: $("category-filter").value, limit: SEARCH_LIMIT }),
  });
  return found.results;
}

/** Everything the page shows, read again (at start, and after a token is entered). */
async function refreshAll() {
  // The status first: it says which controls the backend supports, and a refused token stops
  // here instead of failing every other request too.
  if ((await attempt(OP.status, loadStatus)) === undefined) {
    $("server-status").textContent = "Not connected: see the message below.";
    return;
  }
  await attemptAll([[OP.load, () => loadMemory()], ...historyTask(), [OP.config, loadConfig]]);
}

// -- showing ----------------------------------------------------------------------------------

/** Hide the controls of operations the backend lacks, each replaced by a note saying so. */
function showSupport() {
  for (const node of document.querySelectorAll("[data-needs]")) {
    const available = supports(node.dataset.needs);
    const note = node.nextElementSibling?.classList.contains("unsupported")
      ? node.nextElementSibling
      : null;
    node.hidden = !available;
    if (available) note?.remove();
    else if (note === null) {
      const text = `This backend does not support ${node.dataset.feature}.`;
      node.after(el("p", { class: "unsupported muted" }, text));
    }
  }
}

function showSummaries(memory) {
  renderSummaries($("summaries"), memory, supports("update_summary") ? saveSummary : null);
}

function showFacts() {
  const searching = state.search !== null;
  // Nothing read yet, or the backend cannot read the document (search may still work).
  if (state.memory === null && !searching) return;
  const facts = searching ? state.search.results : state.memory.facts;
  const category = $("category-filter").value;
  const shown = arrange(facts, category, $("sort-select").value);
  renderFacts($("fact-list"), shown, {
    save: supports("update_fact") ? save : null,
    remove: supports("delete_fact") ? remove : null,
  });
  $("search-clear").hidden = !searching;
  $("sort-select").querySelector('option[value="relevance"]').hidden = !searching;
  $("facts-caption").textContent = caption(shown.length, facts.length, category);
}

function caption(shown, total, category) {
  const revision = state.memory === null ? "" : ` · memory revision ${state.memory.revision}`;
  if (state.search !== null) {
    const results = `${shown} result${shown === 1 ? "" : "s"}`;
    return `${results} for “${state.search.query}”${revision}`;
  }
  if (total === 0) return `No facts yet: add one above, or chat with the agent.${revision}`;
  const filtered = category ? ` in ${category} (of ${total})` : "";
  return `${shown} fact${shown === 1 ? "" : "s"}${filtered}${revision}`;
}

function bucketLabel(agent) {
  return agent === null ? "the default bucket" : `agent ${agent}`;
}

// -- changing facts and summaries -------------------------------------------------------------

async function create(event) {
  event.preventDefault();
  const form = event.currentTarget;
  const body = {
    content: form.elements.content.value.trim(),
    category: form.elements.category.value,
    confidence: Number(form.elements.confidence.value),
  };
  const request = () => call("POST", "/api/memory/facts", { query: memoryQuery(), json: body });
  const answer = await whileBusy(event.submitter, () => attempt(OP.create, request));
  if (answer === undefined) return;
  form.elements.content.value = "";
  showNotice(
    answer.merged
      ? `The backend merged this into an existing fact: ${answer.detail}`
      : `Fact added to ${bucketLabel(state.agent)}.`,
  );
  await afterChange();
  form.elements.content.focus();
}

/**
 * The query of a write that must fail (409) if the memory changed since the page read it; a
 * backend without revisions refuses a condition, so none is sent to it.
 */
function guarded() {
  if (!supports("expected_revision")) return memoryQuery();
  return memoryQuery({ expected_revision: state.memory.revision });
}

async function save(fact, changes) {
  const done = await attempt(OP.update, () =>
    call("PATCH", `/api/memory/facts/${encodeURIComponent(fact.id)}`, {
      query: guarded(),
      json: changes,
    }),
  );
  if (done === undefined) return;
  showNotice("Fact saved.");
  await afterChange();
  focusFact($("fact-list"), fact.id);
}

async function remove(fact) {
  const done = await attempt(OP.delete, () =>
    call("DELETE", `/api/memory/facts/${encodeURIComponent(fact.id)}`, { query: guarded() }),
  );
  if (done === undefined) return;
  showNotice("Fact deleted. To bring it back, revert the deletion in the history.");
  await afterChange();
  $("facts-heading").focus();
}

async function saveSummary(part, section, text) {
  const path = `/api/memory/summaries/${part}/${section}`;
  const done = await attempt(OP.summary, () =>
    call("PUT", path, { query: guarded(), json: { text } }),
  );
  if (done === undefined) return;
  showNotice("Summary saved.");
  await afterChange();
  focusSummary($("summaries"), part, section);
}

async function revert(entry) {
  const change = await attempt(OP.revert, () =>
    call("POST", `/api/memory/history/${encodeURIComponent(entry.change_id)}/revert`),
  );
  if (change === undefined) return;
  showNotice(`Reverted: ${entry.reason}.`);
  await afterChange();
  $("history-heading").scrollIntoView({ block: "nearest" });
}

/** What the Reload button of a conflict does: read the stored memory again, bypassing caches. */
async function reloadAll() {
  await loadMemory("POST", "/api/memory/reload");
  if (supports("get_history")) await loadHistory();
  return true;
}

async function afterChange() {
  await attemptAll([[OP.load, () => loadMemory()], ...historyTask()]);
}

function historyTask() {
  return supports("get_history") ? [[OP.history, loadHistory]] : [];
}

// -- searching, filtering, sorting ------------------------------------------------------------

async function search(event) {
  event.preventDefault();
  const query = $("search-input").value.trim();
  if (query === "") {
    clearSearch();
    return;
  }
  const results = await attempt(OP.search, () => searchResults(query));
  if (results === undefined) return;
  state.search = { query, results };
  $("sort-select").value = "relevance";
  showFacts();
}

function clearSearch() {
  state.search = null;
  $("search-input").value = "";
  if ($("sort-select").value === "relevance") $("sort-select").value = "updated";
  showFacts();
}

async function filterByCategory() {
  // A search filters on the server, so the best matches of that category are not cut off.
  if (state.search !== null) {
    const results = await attempt(OP.search, () => searchResults(state.search.query));
    if (results !== undefined) state.search.results = results;
  }
  showFacts();
}

// -- agent buckets ----------------------------------------------------------------------------

function agentFromHash() {
  const agent = new URLSearchParams(window.location.hash.slice(1)).get("agent");
  return agent || null;
}

async function switchAgent(event) {
  event.preventDefault();
  state.agent = $("agent-input").value.trim() || null;
  state.search = null;
  $("search-input").value = "";
  // Nothing of the previous bucket stays on screen, even if the new one fails to load.
  state.memory = null;
  $("bucket-name").textContent = bucketLabel(state.agent);
  $("fact-list").replaceChildren();
  $("facts-caption").textContent = "";
  const hash = state.agent === null ? "" : `#agent=${encodeURIComponent(state.agent)}`;
  window.history.replaceState(null, "", `${window.location.pathname}${hash}`);
  showNotice(`Showing ${bucketLabel(state.agent)}.`);
  await afterChange();
}

// -- import and export ------------------------------------------------------------------------

async function exportAs(format) {
  const name = await attempt(OP.export, () => exportMemory(format, state.agent));
  if (name !== undefined) showNotice(`Exported ${bucketLabel(state.agent)} as ${name}.`);
}

async function importFile(event) {
  event.preventDefault();
  const input = $("import-file");
  const [file] = input.files;
  const memory = await whileBusy(event.submitter, () =>
    attempt(OP.import, () => importMemory(file, state.agent)),
  );
  if (memory === undefined) return;
  input.value = "";
  showNotice(`Imported ${file.name} into ${bucketLabel(state.agent)}.`);
  await afterChange();
}

// -- chat -------------------------------------------------------------------------------------

function newThread() {
  state.threadId = newThreadId();
  $("chat-thread").textContent = state.threadId;
  $("chat-log").replaceChildren();
}

async function chat(event) {
  event.preventDefault();
  const input = $("chat-input");
  const message = input.value.trim();
  if (message === "") return;
  input.value = "";
  await whileBusy(event.submitter, () =>
    attempt(OP.chat, () => sendMessage($("chat-log"), state.threadId, message, state.agent)),
  );
  input.focus();
}

// -- start ------------------------------------------------------------------------------------

function askForToken() {
  $("token-form").hidden = false;
  $("token-input").focus();
}

async function useToken(event) {
  event.preventDefault();
  setToken($("token-input").value.trim());
  $("token-input").value = "";
  $("token-form").hidden = true;
  showNotice("Token saved for this tab.");
  await refreshAll();
}

function start() {
  setHandlers({ reload: reloadAll, unauthorized: askForToken });
  $("add-category").append(...categoryOptions("context"));
  $("category-filter").append(...categoryOptions(null));
  $("agent-input").value = state.agent ?? "";
  $("bucket-name").textContent = bucketLabel(state.agent);
  $("chat-thread").textContent = state.threadId;

  $("agent-form").addEventListener("submit", switchAgent);
  $("token-form").addEventListener("submit", useToken);
  $("add-form").addEventListener("submit", create);
  $("search-form").addEventListener("submit", search);
  $("search-clear").addEventListener("click", clearSearch);
  $("category-filter").addEventListener("change", filterByCategory);
  $("sort-select").addEventListener("change", showFacts);
  $("history-refresh").addEventListener("click", () => attempt(OP.history, loadHistory));
  $("export-json").addEventListener("click", () => exportAs("json"));
  $("export-markdown").addEventListener("click", () => exportAs("markdown"));
  $("import-form").addEventListener("submit", importFile);
  $("chat-new").addEventListener("click", newThread);
  $("chat-form").addEventListener("submit", chat);

  document.body.dataset.ready = "loading";
  refreshAll().finally(() => {
    document.body.dataset.ready = "true";
  });
}

start();

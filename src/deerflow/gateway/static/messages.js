// What the page tells the user: one status line for successes, one alert for failures, each
// failure worded by its HTTP status and the operation that failed.

import { hasToken } from "./api.js";
import { el, replaceChildren } from "./dom.js";

/**
 * Each operation as a verb phrase (for failures) and a feature name (for 501); `unavailable`
 * replaces both texts when the route itself is missing (404, 405) or not implemented (501).
 */
export const OPERATIONS = {
  load: { doing: "load the memory", feature: "reading memory" },
  reload: { doing: "reload the memory", feature: "reloading memory" },
  create: { doing: "add the fact", feature: "adding facts" },
  update: { doing: "save the fact", feature: "editing facts" },
  delete: { doing: "delete the fact", feature: "deleting facts" },
  summary: { doing: "save the summary", feature: "editing summaries" },
  search: { doing: "search", feature: "search" },
  history: { doing: "load the history", feature: "history" },
  revert: { doing: "revert the change", feature: "reverting changes" },
  export: { doing: "export", feature: "export" },
  import: { doing: "import", feature: "import" },
  status: { doing: "load the server status", feature: "status" },
  config: { doing: "load the configuration", feature: "showing the configuration" },
  // 404/405 here mean the server has no chat route at all, not an unknown id.
  chat: { doing: "chat", feature: "chat", unavailable: "Chat is not available on this server" },
};

// 409 codes that are refusals of the request itself, not a race with another writer.
const REFUSAL_CODES = new Set(["duplicate_fact", "fact_evicted"]);

export const CONFLICT_TEXT = "The memory changed since you loaded it: reload and retry.";

let reloadHandler = async () => {};
let unauthorizedHandler = () => {};

/** What the Reload button of a conflict does, and what a 401 does (ask for a token). */
export function setHandlers({ reload, unauthorized }) {
  reloadHandler = reload;
  unauthorizedHandler = unauthorized;
}

/** Whether a 409 means the stored memory moved on since the page read it. */
export function isConflict(error) {
  return error.status === 409 && !REFUSAL_CODES.has(error.code);
}

/**
 * The sentence shown for a failed operation.
 * @param {import("./api.js").ApiError} error
 * @param {{doing: string, feature: string}} operation
 */
export function describe(error, operation) {
  const { status, detail } = error;
  if (isConflict(error)) return CONFLICT_TEXT;
  if (operation.unavailable && [404, 405, 501].includes(status)) {
    return `${operation.unavailable} (HTTP ${status}: ${detail}).`;
  }
  switch (status) {
    case 0:
      return detail;
    case 400:
    case 422:
      return `Could not ${operation.doing}: ${detail}`;
    case 401:
      return hasToken()
        ? `The access token was refused (${detail}): enter a valid one above.`
        : "This server needs an access token: enter it above.";
    case 403:
      return `Not allowed to ${operation.doing}: ${detail}`;
    case 404:
      return (
        `Could not ${operation.doing}: ${detail}. ` +
        "It may have been removed: reload to see the current memory."
      );
    case 409:
      return `Could not ${operation.doing}: ${detail}`;
    case 501:
      return `This backend does not support ${operation.feature}. (${detail})`;
    case 503:
      return `Memory is unavailable right now, so the page could not ${operation.doing}: ${detail}`;
    default:
      return `Could not ${operation.doing}: the server answered ${status}: ${detail}`;
  }
}

/** Show a success in the status line and clear any earlier failure. */
export function showNotice(text) {
  replaceChildren(alertBox(), null);
  alertBox().hidden = true;
  replaceChildren(noticeBox(), text);
}

/** Show a failure; conflicts and unknown ids get a Reload button. */
export function showError(error, operation) {
  if (error.status === 401) unauthorizedHandler();
  const box = alertBox();
  const offerReload = isConflict(error) || (error.status === 404 && !operation.unavailable);
  replaceChildren(
    box,
    el("p", { class: "alert-text" }, describe(error, operation)),
    offerReload && el("button", { type: "button", id: "reload-button", onclick: reload }, "Reload"),
  );
  box.dataset.status = String(error.status);
  box.hidden = false;
  replaceChildren(noticeBox(), null);
}

/** Run `action`; on an ApiError show it for `operation` and return undefined. */
export async function attempt(operation, action) {
  try {
    return await action();
  } catch (error) {
    if (error?.name !== "ApiError") throw error;
    showError(error, operation);
    return undefined;
  }
}

/**
 * Run `tasks` (`[operation, action]` pairs) at the same time; if some fail, show the first
 * failure in list order, so the message does not depend on which answer came last.
 */
export async function attemptAll(tasks) {
  const settled = await Promise.allSettled(tasks.map(([, action]) => action()));
  const failures = settled.flatMap((result, index) =>
    result.status === "rejected" ? [[result.reason, tasks[index][0]]] : [],
  );
  const unexpected = failures.find(([error]) => error?.name !== "ApiError");
  if (unexpected !== undefined) throw unexpected[0];
  if (failures.length > 0) showError(...failures[0]);
}

async function reload() {
  const ok = await attempt(OPERATIONS.reload, reloadHandler);
  if (ok !== undefined) showNotice("Reloaded: you now see the current memory.");
}

function noticeBox() {
  return document.getElementById("notice");
}

function alertBox() {
  return document.getElementById("alert");
}

// The only module that talks to the gateway. Every failure becomes an ApiError carrying the
// HTTP status and the `{error, detail}` body of every error, so callers decide by status and code.

const TOKEN_KEY = "deerflow.token";

export class ApiError extends Error {
  /**
   * @param {number} status HTTP status, 0 when the server could not be reached
   * @param {string} code the body's `error` code
   * @param {string} detail the body's `detail` text
   */
  constructor(status, code, detail) {
    super(detail);
    this.name = "ApiError";
    this.status = status;
    this.code = code;
    this.detail = detail;
  }
}

/** Remember the bearer token for this browser tab (token auth); an empty value forgets it. */
export function setToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** Whether a bearer token is being sent. */
export function hasToken() {
  return sessionStorage.getItem(TOKEN_KEY) !== null;
}

/** A same-origin URL with the non-empty `query` values set. */
export function apiUrl(path, query = {}) {
  const url = new URL(path, window.location.origin);
  for (const [name, value] of Object.entries(query)) {
    if (value !== null && value !== undefined && value !== "") {
      url.searchParams.set(name, String(value));
    }
  }
  return url;
}

/**
 * Send a request and return the successful Response.
 * @param {string} method
 * @param {string} path
 * @param {{query?: object, json?: unknown, form?: FormData}} [options] at most one body:
 *   `json` is serialised, `form` goes as multipart
 * @throws {ApiError} on a network failure or any status outside 2xx
 */
export async function send(method, path, { query = {}, json, form } = {}) {
  const headers = new Headers({ Accept: "application/json" });
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.set("Authorization", `Bearer ${token}`);
  const init = { method, headers };
  if (json !== undefined) {
    headers.set("Content-Type", "application/json");
    init.body = JSON.stringify(json);
  } else if (form !== undefined) {
    init.body = form;
  }
  let response;
  try {
    response = await fetch(apiUrl(path, query), init);
  } catch (error) {
    throw new ApiError(0, "unreachable", `The server could not be reached (${error.message}).`);
  }
  if (!response.ok) throw await errorOf(response);
  return response;
}

/** Send a request and return its JSON body (null for 204). */
export async function call(method, path, options) {
  const response = await send(method, path, options);
  return response.status === 204 ? null : response.json();
}

async function errorOf(response) {
  let code = `http_${response.status}`;
  let detail = response.statusText || `HTTP ${response.status}`;
  try {
    const body = await response.json();
    if (typeof body.error === "string") code = body.error;
    if (body.detail !== undefined) detail = detailText(body.detail);
  } catch {
    // Not a JSON body (a proxy's error page, say): the status text is all there is.
  }
  return new ApiError(response.status, code, detail);
}

/** FastAPI-style validation details are lists of `{loc, msg}`; show them as one line. */
function detailText(detail) {
  if (typeof detail === "string") return detail;
  if (Array.isArray(detail)) {
    return detail
      .map((item) => {
        const where = Array.isArray(item.loc) ? item.loc.filter((p) => p !== "body").join(".") : "";
        return where ? `${where}: ${item.msg}` : String(item.msg ?? JSON.stringify(item));
      })
      .join("; ");
  }
  return JSON.stringify(detail);
}

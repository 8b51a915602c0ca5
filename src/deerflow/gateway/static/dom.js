// Building DOM nodes from data. Text always goes through textContent, never innerHTML:
// fact contents come from conversations and must never be read as markup.

/**
 * Create an element.
 * @param {string} tag
 * @param {Record<string, unknown>} [props] attributes; `on*` functions become listeners,
 *   booleans toggle the attribute, `dataset` is an object of data-* values.
 * @param {...(Node|string|null|undefined|false)} children
 */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      node.addEventListener(name.slice(2).toLowerCase(), value);
    } else if (name === "dataset") {
      Object.assign(node.dataset, value);
    } else if (value === true) {
      node.setAttribute(name, "");
    } else {
      node.setAttribute(name, String(value));
    }
  }
  append(node, children);
  return node;
}

/** Append children, skipping empty ones; strings become text nodes. */
export function append(node, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
}

/** Replace every child of `node`. */
export function replaceChildren(node, ...children) {
  node.replaceChildren();
  append(node, children);
}

/** A `<time>` element showing an ISO-8601 stamp in the reader's locale. */
export function timeEl(iso) {
  const date = new Date(iso);
  const shown = Number.isNaN(date.getTime())
    ? iso || "unknown"
    : date.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
  return el("time", { datetime: iso }, shown);
}

/** Run `action` with `control` disabled, so a double click cannot send the request twice. */
export async function whileBusy(control, action) {
  control.disabled = true;
  try {
    return await action();
  } finally {
    control.disabled = false;
  }
}

/** Save `blob` as a file named `name` through a temporary link. */
export function download(blob, name) {
  const href = URL.createObjectURL(blob);
  const link = el("a", { href, download: name, hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
  // Revoked later: Chromium starts the download asynchronously after click().
  setTimeout(() => URL.revokeObjectURL(href), 60_000);
}

// The audit log: one item per change, what it did in words, and a Revert button.

import { el, replaceChildren, timeEl, whileBusy } from "./dom.js";

/**
 * Show `entries` (newest first) in `list`.
 * @param {HTMLElement} list
 * @param {object[]} entries `{change_id, at, actor, reason, reverts, before, after}`
 * @param {((entry: object) => Promise<void>) | null} revert null: the backend cannot revert
 */
export function renderHistory(list, entries, revert) {
  if (entries.length === 0) {
    replaceChildren(list, el("li", { class: "muted" }, "No changes yet."));
    return;
  }
  const undoneBy = new Map(
    entries.filter((entry) => entry.reverts).map((entry) => [entry.reverts, entry.change_id]),
  );
  replaceChildren(
    list,
    ...entries.map((entry) => changeItem(entry, undoneBy.get(entry.change_id), revert)),
  );
}

function changeItem(entry, undoneBy, revert) {
  return el(
    "li",
    { class: "change", dataset: { changeId: entry.change_id } },
    el(
      "p",
      { class: "change-head" },
      timeEl(entry.at),
      el("span", { class: "badge" }, entry.actor),
      el("span", { class: "change-reason" }, entry.reason),
    ),
    el("ul", { class: "change-lines" }, ...describeChange(entry).map((line) => el("li", {}, line))),
    undoneBy && el("p", { class: "muted" }, `Reverted by ${undoneBy}.`),
    !undoneBy &&
      revert &&
      el(
        "button",
        {
          type: "button",
          class: "revert",
          "aria-label": `Revert ${entry.reason} of ${entry.at}`,
          onclick: (event) => whileBusy(event.currentTarget, () => revert(entry)),
        },
        "Revert",
      ),
  );
}

/** One line per fact or summary the change touched. */
export function describeChange(entry) {
  const before = new Map(entry.before.facts.map((fact) => [fact.id, fact]));
  const after = new Map(entry.after.facts.map((fact) => [fact.id, fact]));
  const lines = [];
  for (const [id, old] of before) {
    const now = after.get(id);
    if (now === undefined) lines.push(`Removed: ${old.content}`);
    else lines.push(`Changed: ${factChange(old, now)}`);
  }
  for (const [id, fact] of after) {
    if (!before.has(id)) lines.push(`Added: ${fact.content}`);
  }
  for (const [part, sections] of Object.entries(entry.after.summaries ?? {})) {
    for (const [section, text] of Object.entries(sections)) {
      const old = entry.before.summaries?.[part]?.[section] ?? "";
      lines.push(`Summary ${part}.${section}: ${old || "(empty)"} → ${text || "(empty)"}`);
    }
  }
  return lines;
}

function factChange(old, now) {
  const parts = [old.content === now.content ? now.content : `${old.content} → ${now.content}`];
  if (old.category !== now.category) parts.push(`category ${old.category} → ${now.category}`);
  if (old.confidence !== now.confidence) {
    parts.push(`confidence ${old.confidence} → ${now.confidence}`);
  }
  return parts.join("; ");
}

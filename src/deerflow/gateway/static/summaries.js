// The user's summaries: one entry per section, each with an inline editor.

import { el, replaceChildren, whileBusy } from "./dom.js";

// The document's summary sections (the server validates the names too).
export const SUMMARY_SECTIONS = {
  user: {
    title: "About the user",
    sections: {
      workContext: "Work context",
      personalContext: "Personal context",
      topOfMind: "Top of mind",
    },
  },
  history: {
    title: "Background",
    sections: {
      recentMonths: "Recent months",
      earlierContext: "Earlier context",
      longTermBackground: "Long-term background",
    },
  },
};

/**
 * Show the summaries of `memory` in `container`.
 * @param {HTMLElement} container
 * @param {object} memory the memory document
 * @param {((part: string, section: string, text: string) => Promise<void>) | null} save null:
 *   the backend cannot edit summaries
 */
export function renderSummaries(container, memory, save) {
  const groups = Object.entries(SUMMARY_SECTIONS).map(([part, { title, sections }]) =>
    el(
      "div",
      { class: "summary-group" },
      el("h3", {}, title),
      el(
        "dl",
        {},
        ...Object.entries(sections).map(([section, label]) => {
          const entry = el("div", { class: "summary", dataset: { part, section } });
          const text = memory[part]?.[section]?.summary ?? "";
          showSection(entry, { part, section, label, text }, save);
          return entry;
        }),
      ),
    ),
  );
  replaceChildren(container, ...groups);
}

/** Put the keyboard focus on one section's Edit button (after a save). */
export function focusSummary(container, part, section) {
  const entry = container.querySelector(`[data-part="${part}"][data-section="${section}"]`);
  entry?.querySelector("button.edit")?.focus();
}

function showSection(entry, summary, save) {
  replaceChildren(
    entry,
    el("dt", {}, summary.label),
    el(
      "dd",
      { class: summary.text ? "summary-text" : "summary-text muted" },
      summary.text || "Nothing yet.",
    ),
    save &&
      el(
        "dd",
        {},
        el(
          "button",
          {
            type: "button",
            class: "edit",
            "aria-label": `Edit summary: ${summary.label}`,
            onclick: () => showEditor(entry, summary, save),
          },
          "Edit",
        ),
      ),
  );
}

function showEditor(entry, summary, save) {
  const id = `summary-${summary.part}-${summary.section}`;
  const text = el("textarea", { id, name: "text", rows: 4 });
  text.value = summary.text;
  const close = () => {
    showSection(entry, summary, save);
    entry.querySelector("button.edit").focus();
  };
  const submit = async (event) => {
    event.preventDefault();
    if (text.value.trim() === summary.text) close();
    else await whileBusy(event.submitter, () => save(summary.part, summary.section, text.value));
  };
  const saveButton = el("button", { type: "submit" }, "Save");
  const form = el(
    "form",
    {
      class: "summary-form editing",
      "aria-label": `Edit summary: ${summary.label}`,
      autocomplete: "off",
      onsubmit: submit,
      onkeydown: (event) => {
        if (event.key === "Escape") close();
        // Ctrl+Enter saves, as Enter does in the one-line fields.
        const saves = event.key === "Enter" && (event.ctrlKey || event.metaKey);
        if (saves) form.requestSubmit(saveButton);
      },
    },
    el("label", { for: id }, "New text"),
    text,
    el("p", { class: "hint" }, "Leave it empty to clear this section. Ctrl+Enter saves."),
    el(
      "div",
      { class: "button-row" },
      saveButton,
      el("button", { type: "button", onclick: close }, "Cancel"),
    ),
  );
  replaceChildren(entry, el("dt", {}, summary.label), el("dd", {}, form));
  text.focus();
}

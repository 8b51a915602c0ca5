// The fact list: sorting, filtering, one card per fact, and the inline editor.

import { el, replaceChildren, timeEl, whileBusy } from "./dom.js";

// docs/data-format.md; the server validates too, this only fills the pickers.
export const CATEGORIES = [
  "preference",
  "knowledge",
  "context",
  "behavior",
  "goal",
  "correction",
  "identity",
  "constraint",
  "decision",
  "other",
];

const SORT_KEYS = {
  confidence: (fact) => fact.confidence,
  updated: (fact) => fact.updatedAt,
  created: (fact) => fact.createdAt,
};

/** Facts of `category` (all when empty), in `order`; "relevance" keeps the server's order. */
export function arrange(facts, category, order) {
  const kept = category ? facts.filter((fact) => fact.category === category) : [...facts];
  const key = SORT_KEYS[order];
  if (key === undefined) return kept;
  // Highest confidence and newest first; the id breaks ties so the order is stable.
  return kept.sort((a, b) => compare(key(b), key(a)) || compare(a.id, b.id));
}

function compare(a, b) {
  if (a < b) return -1;
  return a > b ? 1 : 0;
}

/** `<option>`s for every category, `selected` chosen. */
export function categoryOptions(selected) {
  return CATEGORIES.map((name) => el("option", { value: name, selected: name === selected }, name));
}

/**
 * Show `facts` in `list`.
 * @param {HTMLElement} list
 * @param {object[]} facts
 * @param {{save: ((fact: object, changes: object) => Promise<void>) | null,
 *          remove: ((fact: object) => Promise<void>) | null}} actions null: the backend cannot
 */
export function renderFacts(list, facts, actions) {
  replaceChildren(list, ...facts.map((fact) => factItem(fact, actions)));
}

/** Put the keyboard focus on one fact's Edit button (after a save), if the fact is shown. */
export function focusFact(list, factId) {
  const item = [...list.children].find((node) => node.dataset.factId === factId);
  item?.querySelector("button.edit")?.focus();
}

function factItem(fact, actions) {
  const item = el("li", { class: "fact", dataset: { factId: fact.id } });
  showCard(item, fact, actions);
  return item;
}

function showCard(item, fact, actions) {
  const name = shortName(fact.content);
  const button = (label, props) => el("button", { type: "button", ...props }, label);
  replaceChildren(
    item,
    el("p", { class: "fact-content" }, fact.content),
    el(
      "p",
      { class: "fact-meta" },
      el("span", { class: "badge" }, fact.category),
      el("span", {}, `confidence ${fact.confidence.toFixed(2)}`),
      el("span", {}, "updated ", timeEl(fact.updatedAt)),
      el("span", {}, "created ", timeEl(fact.createdAt)),
      fact.score !== undefined && el("span", {}, `score ${fact.score.toFixed(3)}`),
    ),
    el(
      "div",
      { class: "fact-actions" },
      actions.save &&
        button("Edit", {
          class: "edit",
          "aria-label": `Edit fact: ${name}`,
          onclick: () => showEditor(item, fact, actions),
        }),
      actions.remove &&
        button("Delete", {
          class: "delete danger",
          "aria-label": `Delete fact: ${name}`,
          onclick: (event) => whileBusy(event.currentTarget, () => actions.remove(fact)),
        }),
    ),
  );
}

function showEditor(item, fact, actions) {
  const prefix = `edit-${fact.id}`;
  const content = el("input", { id: `${prefix}-content`, name: "content", required: true });
  content.value = fact.content;
  const category = el("select", { id: `${prefix}-category`, name: "category" });
  category.append(...categoryOptions(fact.category));
  const confidence = el("input", {
    id: `${prefix}-confidence`,
    name: "confidence",
    type: "number",
    min: 0,
    max: 1,
    step: "any",
    required: true,
  });
  confidence.value = String(fact.confidence);

  const close = () => {
    showCard(item, fact, actions);
    item.querySelector("button.edit").focus();
  };
  const submit = async (event) => {
    event.preventDefault();
    const changes = changedFields(fact, {
      content: content.value.trim(),
      category: category.value,
      confidence: Number(confidence.value),
    });
    if (Object.keys(changes).length === 0) close();
    else await whileBusy(event.submitter, () => actions.save(fact, changes));
  };
  const form = el(
    "form",
    {
      class: "fact-form editing",
      "aria-label": `Edit fact: ${shortName(fact.content)}`,
      autocomplete: "off",
      onsubmit: submit,
      onkeydown: (event) => {
        if (event.key === "Escape") close();
      },
    },
    field(content, "Content", true),
    field(category, "Category"),
    field(confidence, "Confidence (0 to 1)"),
    el("button", { type: "submit" }, "Save"),
    el("button", { type: "button", onclick: close }, "Cancel"),
  );
  replaceChildren(item, form);
  content.focus();
}

function field(control, text, wide = false) {
  return el(
    "div",
    { class: wide ? "field wide" : "field" },
    el("label", { for: control.id }, text),
    control,
  );
}

function changedFields(fact, values) {
  return Object.fromEntries(Object.entries(values).filter(([name, value]) => fact[name] !== value));
}

function shortName(content) {
  return content.length > 60 ? `${content.slice(0, 57)}…` : content;
}

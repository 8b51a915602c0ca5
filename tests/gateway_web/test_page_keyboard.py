"""The page works from the keyboard: labelled controls, a sensible tab order, a visible focus,
Enter submits, Escape cancels an edit."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Page, expect

from tests.gateway_web.conftest import Screenshot
from tests.gateway_web.harness import Gateway, fact_item, reload

# The focused element: its id, else its accessible name, else its text; and whether the focus
# ring is visible (an outline at least 2px wide).
_FOCUSED = """() => {
  const node = document.activeElement;
  const style = getComputedStyle(node);
  return {
    name: node.id || node.getAttribute("aria-label") || node.textContent.trim(),
    ring: style.outlineStyle !== "none" && parseFloat(style.outlineWidth) >= 2,
  };
}"""

# Shown form controls that have neither a <label> nor an aria-label, and buttons without a name.
_UNLABELLED = """() => [...document.querySelectorAll("input, select, textarea, button")]
  .filter((node) => node.offsetParent !== null)
  .filter((node) => node.tagName === "BUTTON"
    ? !(node.getAttribute("aria-label") || node.textContent.trim())
    : node.labels.length === 0 && !node.getAttribute("aria-label"))
  .map((node) => node.outerHTML)"""


def tab(page: Page) -> dict[str, Any]:
    page.keyboard.press("Tab")
    focused: dict[str, Any] = page.evaluate(_FOCUSED)
    return focused


def test_tab_order_follows_the_page_with_a_visible_focus(
    page: Page, gateway: Gateway, screenshot: Screenshot
) -> None:
    gateway.add_fact("Prefers tea", "preference", 0.9)
    reload(page)

    stops = [tab(page) for _ in range(29)]
    assert [stop["name"] for stop in stops] == [
        "Skip to facts",
        "agent-input",
        "Open",
        "Edit summary: Work context",
        "Edit summary: Personal context",
        "Edit summary: Top of mind",
        "Edit summary: Recent months",
        "Edit summary: Earlier context",
        "Edit summary: Long-term background",
        "add-content",
        "add-category",
        "add-confidence",
        "Add fact",
        "search-input",
        "Search",
        "category-filter",
        "sort-select",
        "Edit fact: Prefers tea",
        "Delete fact: Prefers tea",
        "history-refresh",
        "Revert create_fact of "
        + gateway.http.get("/api/memory/history").json()["changes"][0]["at"],
        "chat-new",
        "chat-log",
        "chat-input",
        "Send",
        "export-json",
        "export-markdown",
        "import-file",
        "Import",
    ]
    assert [stop["name"] for stop in stops if not stop["ring"]] == []
    screenshot(page, "focus-on-import")


def test_skip_link_jumps_to_the_facts(page: Page) -> None:
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to facts")).to_be_visible()
    page.keyboard.press("Enter")
    expect(page.locator("#facts-heading")).to_be_focused()


def test_keyboard_only_add_edit_cancel_delete_and_revert(
    page: Page, gateway: Gateway, screenshot: Screenshot
) -> None:
    page.get_by_label("Content").focus()
    page.keyboard.type("Prefers tea")
    page.keyboard.press("Enter")
    expect(fact_item(page, "Prefers tea")).to_have_count(1)
    expect(page.get_by_label("Content")).to_be_focused()

    edit = fact_item(page, "Prefers tea").get_by_role("button", name="Edit")
    edit.focus()
    page.keyboard.press("Enter")
    editor = page.get_by_role("form", name="Edit fact: Prefers tea")
    expect(editor.get_by_label("Content")).to_be_focused()
    page.keyboard.type(" with milk")
    page.keyboard.press("Escape")
    # Escape leaves the fact as it was and gives the focus back to its Edit button.
    expect(editor).to_have_count(0)
    expect(fact_item(page, "Prefers tea").get_by_role("button", name="Edit")).to_be_focused()
    assert gateway.contents() == {"Prefers tea"}

    page.keyboard.press("Enter")
    page.keyboard.press("End")
    page.keyboard.type(" with milk")
    page.keyboard.press("Enter")
    expect(fact_item(page, "Prefers tea with milk")).to_have_count(1)
    assert gateway.contents() == {"Prefers tea with milk"}
    edit = fact_item(page, "Prefers tea with milk").get_by_role("button", name="Edit")
    expect(edit).to_be_focused()
    screenshot(page, "edited-by-keyboard")

    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    expect(fact_item(page, "Prefers tea with milk")).to_have_count(0)
    assert gateway.contents() == set()

    page.locator("#history-list li.change").first.get_by_role("button", name="Revert").focus()
    page.keyboard.press("Enter")
    expect(fact_item(page, "Prefers tea with milk")).to_have_count(1)
    assert gateway.contents() == {"Prefers tea with milk"}


def test_every_shown_control_is_labelled(page: Page, gateway: Gateway) -> None:
    gateway.add_fact("Prefers tea", "preference", 0.9)
    reload(page)
    assert page.evaluate(_UNLABELLED) == []

    fact_item(page, "Prefers tea").get_by_role("button", name="Edit").click()
    assert page.evaluate(_UNLABELLED) == []

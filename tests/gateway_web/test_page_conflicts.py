"""Another writer changes the memory while the page shows it: the page says so (409), never
overwrites the other change, and its Reload button shows the current memory."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.gateway_web.conftest import Screenshot
from tests.gateway_web.harness import CONFLICT_TEXT, Gateway, fact_item, reload


def test_edit_after_another_writer_gets_409_and_reload_recovers(
    page: Page, gateway: Gateway, screenshot: Screenshot
) -> None:
    fact = gateway.add_fact("Prefers tea", "preference", 0.9)
    reload(page)
    screenshot(page, "loaded")

    behind = gateway.http.patch(
        f"/api/memory/facts/{fact['id']}", json={"content": "Prefers green tea"}
    )
    assert behind.status_code == 200, behind.text

    fact_item(page, "Prefers tea").get_by_role("button", name="Edit").click()
    editor = page.get_by_role("form", name="Edit fact: Prefers tea")
    editor.get_by_label("Content").fill("Prefers black tea")
    editor.get_by_label("Content").press("Enter")
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text(CONFLICT_TEXT)
    # The other writer's change stands; the page's edit was not written.
    assert gateway.contents() == {"Prefers green tea"}
    # The user's typing is still there to copy before reloading.
    expect(editor.get_by_label("Content")).to_have_value("Prefers black tea")
    screenshot(page, "conflict")

    alert.get_by_role("button", name="Reload").click()
    expect(fact_item(page, "Prefers green tea")).to_have_count(1)
    expect(page.get_by_role("alert")).to_be_hidden()
    expect(page.locator("#notice")).to_contain_text("Reloaded")
    screenshot(page, "reloaded")

    # Retrying after the reload succeeds.
    fact_item(page, "Prefers green tea").get_by_role("button", name="Edit").click()
    editor = page.get_by_role("form", name="Edit fact: Prefers green tea")
    editor.get_by_label("Content").fill("Prefers black tea")
    editor.get_by_label("Content").press("Enter")
    expect(fact_item(page, "Prefers black tea")).to_have_count(1)
    assert gateway.contents() == {"Prefers black tea"}
    screenshot(page, "retried")


def test_delete_after_another_writer_gets_409(
    page: Page, gateway: Gateway, screenshot: Screenshot
) -> None:
    gateway.add_fact("Prefers tea", "preference", 0.9)
    reload(page)
    gateway.add_fact("Owns a cat", "identity", 0.8)

    fact_item(page, "Prefers tea").get_by_role("button", name="Delete").click()
    expect(page.get_by_role("alert")).to_contain_text(CONFLICT_TEXT)
    assert gateway.contents() == {"Prefers tea", "Owns a cat"}
    screenshot(page, "conflict")

    page.get_by_role("alert").get_by_role("button", name="Reload").click()
    expect(fact_item(page, "Owns a cat")).to_have_count(1)
    fact_item(page, "Prefers tea").get_by_role("button", name="Delete").click()
    expect(fact_item(page, "Prefers tea")).to_have_count(0)
    assert gateway.contents() == {"Owns a cat"}


def test_revert_of_a_change_overtaken_by_another_writer_gets_409(
    page: Page, gateway: Gateway, screenshot: Screenshot
) -> None:
    fact = gateway.add_fact("Prefers tea", "preference", 0.9)
    first = gateway.http.patch(
        f"/api/memory/facts/{fact['id']}", json={"content": "Prefers green tea"}
    )
    assert first.status_code == 200, first.text
    reload(page)
    later = gateway.http.patch(
        f"/api/memory/facts/{fact['id']}", json={"content": "Prefers oolong"}
    )
    assert later.status_code == 200, later.text

    # The page still shows the first edit as the newest change; undoing it would lose "oolong".
    shown = page.locator("#history-list li.change").first
    expect(shown).to_contain_text("Prefers tea → Prefers green tea")
    shown.get_by_role("button", name="Revert").click()
    expect(page.get_by_role("alert")).to_contain_text(CONFLICT_TEXT)
    assert gateway.contents() == {"Prefers oolong"}
    screenshot(page, "conflict")

    page.get_by_role("alert").get_by_role("button", name="Reload").click()
    expect(page.locator("#history-list li.change").first).to_contain_text(
        "Prefers green tea → Prefers oolong"
    )
    expect(fact_item(page, "Prefers oolong")).to_have_count(1)

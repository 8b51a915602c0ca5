"""Editing the user's summary sections on the page: save, cancel, clear, refusals, conflicts."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Locator, Page, expect

from tests.gateway_web.conftest import Screenshot
from tests.gateway_web.harness import CONFLICT_TEXT, Gateway, reload


def summary_of(page: Page, part: str, section: str) -> Locator:
    return page.locator(f"#summaries [data-part={part}][data-section={section}]")


def stored(gateway: Gateway) -> dict[str, Any]:
    answer = gateway.http.get("/api/memory")
    assert answer.status_code == 200, answer.text
    document: dict[str, Any] = answer.json()
    return document


def put_summary(gateway: Gateway, text: str) -> None:
    answer = gateway.http.put("/api/memory/summaries/user/workContext", json={"text": text})
    assert answer.status_code == 200, answer.text


def test_a_summary_section_is_edited_cancelled_and_cleared(
    page: Page, gateway: Gateway, screenshot: Screenshot
) -> None:
    put_summary(gateway, "Data engineer")
    reload(page)
    work = summary_of(page, "user", "workContext")
    expect(work).to_contain_text("Data engineer")
    expect(summary_of(page, "history", "recentMonths")).to_contain_text("Nothing yet.")

    page.get_by_role("button", name="Edit summary: Work context").click()
    editor = page.get_by_role("form", name="Edit summary: Work context")
    expect(editor.get_by_label("New text")).to_be_focused()
    expect(editor.get_by_label("New text")).to_have_value("Data engineer")
    editor.get_by_label("New text").fill("Platform lead\non the Kafka pipeline")
    screenshot(page, "editing")
    editor.get_by_role("button", name="Save").click()

    expect(page.locator("#notice")).to_have_text("Summary saved.")
    expect(work).to_contain_text("Platform lead\non the Kafka pipeline")
    expect(page.get_by_role("button", name="Edit summary: Work context")).to_be_focused()
    assert stored(gateway)["user"]["workContext"]["summary"] == (
        "Platform lead\non the Kafka pipeline"
    )
    expect(page.locator("#history-list li.change").first).to_contain_text(
        "Summary user.workContext: Data engineer → Platform lead"
    )
    screenshot(page, "saved")

    # Escape leaves the editor and writes nothing.
    revision = stored(gateway)["revision"]
    page.get_by_role("button", name="Edit summary: Work context").click()
    editor.get_by_label("New text").fill("Something else")
    editor.get_by_label("New text").press("Escape")
    expect(editor).to_have_count(0)
    expect(work).to_contain_text("Platform lead")
    assert stored(gateway)["revision"] == revision

    # Ctrl+Enter saves; an empty text clears the section.
    page.get_by_role("button", name="Edit summary: Work context").click()
    editor.get_by_label("New text").fill("")
    editor.get_by_label("New text").press("Control+Enter")
    expect(work).to_contain_text("Nothing yet.")
    assert stored(gateway)["user"]["workContext"]["summary"] == ""
    screenshot(page, "cleared")


def test_a_refused_summary_says_why_and_keeps_the_typing(
    page: Page, gateway: Gateway, screenshot: Screenshot
) -> None:
    secret = "deploy key api_key=sk-proj-4fG7hK2mN9pQ3rS8tV1wX6yZ"
    page.get_by_role("button", name="Edit summary: Top of mind").click()
    editor = page.get_by_role("form", name="Edit summary: Top of mind")
    editor.get_by_label("New text").fill(secret)
    editor.get_by_role("button", name="Save").click()

    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("Could not save the summary:")
    expect(alert).to_contain_text("secrets are never stored")
    expect(editor.get_by_label("New text")).to_have_value(secret)
    assert stored(gateway)["user"]["topOfMind"]["summary"] == ""
    screenshot(page, "refused")


def test_a_summary_edit_after_another_writer_gets_409_and_reload_recovers(
    page: Page, gateway: Gateway, screenshot: Screenshot
) -> None:
    put_summary(gateway, "Data engineer")
    reload(page)
    put_summary(gateway, "Data engineer, now on the platform team")

    page.get_by_role("button", name="Edit summary: Work context").click()
    editor = page.get_by_role("form", name="Edit summary: Work context")
    editor.get_by_label("New text").fill("Backend developer")
    editor.get_by_role("button", name="Save").click()

    alert = page.get_by_role("alert")
    expect(alert).to_contain_text(CONFLICT_TEXT)
    # The other writer's text stands; the page's was not written, and the typing is kept.
    assert stored(gateway)["user"]["workContext"]["summary"] == (
        "Data engineer, now on the platform team"
    )
    expect(editor.get_by_label("New text")).to_have_value("Backend developer")
    screenshot(page, "conflict")

    alert.get_by_role("button", name="Reload").click()
    work = summary_of(page, "user", "workContext")
    expect(work).to_contain_text("Data engineer, now on the platform team")
    page.get_by_role("button", name="Edit summary: Work context").click()
    editor.get_by_label("New text").fill("Backend developer")
    editor.get_by_role("button", name="Save").click()
    expect(work).to_contain_text("Backend developer")
    assert stored(gateway)["user"]["workContext"]["summary"] == "Backend developer"
    screenshot(page, "retried")

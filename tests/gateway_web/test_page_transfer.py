"""Export to a file and import it back, from the page."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.gateway_web.conftest import Screenshot
from tests.gateway_web.harness import Gateway, fact_item, reload


def test_exports_and_imports_into_another_bucket(
    page: Page, gateway: Gateway, screenshot: Screenshot, tmp_path: Path
) -> None:
    gateway.add_fact("Prefers tea", "preference", 0.9)
    gateway.add_fact("Owns a cat", "identity", 0.8)
    reload(page)

    with page.expect_download() as json_download:
        page.get_by_role("button", name="Export JSON").click()
    assert json_download.value.suggested_filename == "memory-default.json"
    exported = tmp_path / "memory-default.json"
    json_download.value.save_as(exported)
    document = json.loads(exported.read_text(encoding="utf-8"))
    assert {fact["content"] for fact in document["facts"]} == {"Prefers tea", "Owns a cat"}
    expect(page.locator("#notice")).to_have_text(
        "Exported the default bucket as memory-default.json."
    )

    with page.expect_download() as zip_download:
        page.get_by_role("button", name="Export Markdown (zip)").click()
    assert zip_download.value.suggested_filename == "memory-default.zip"
    archive = tmp_path / "memory-default.zip"
    zip_download.value.save_as(archive)
    with zipfile.ZipFile(archive) as zipped:
        assert len([name for name in zipped.namelist() if name.endswith(".md")]) == 2

    page.get_by_label("Agent bucket").fill("copy")
    page.get_by_label("Agent bucket").press("Enter")
    expect(page.locator("#fact-list li.fact")).to_have_count(0)
    # Summaries travel with the document (they belong to the user, shared by all buckets).
    document["user"]["workContext"]["summary"] = "Data engineer at a logistics firm"
    edited = tmp_path / "memory-edited.json"
    edited.write_text(json.dumps(document), encoding="utf-8")
    page.get_by_label("Memory file (JSON document or Markdown zip)").set_input_files(edited)
    page.get_by_role("button", name="Import", exact=True).click()
    expect(fact_item(page, "Prefers tea")).to_have_count(1)
    expect(fact_item(page, "Owns a cat")).to_have_count(1)
    expect(page.locator("#notice")).to_have_text("Imported memory-edited.json into agent copy.")
    work = page.locator("#summaries dt", has_text="Work context").locator("+ dd")
    expect(work).to_have_text("Data engineer at a logistics firm")
    assert gateway.contents(agent="copy") == {"Prefers tea", "Owns a cat"}
    screenshot(page, "imported-json")

    # The zip imports as well, replacing the bucket's facts again (one more revertible change).
    gateway.add_fact("Only in copy", agent="copy")
    reload(page)
    expect(fact_item(page, "Only in copy")).to_have_count(1)
    page.get_by_label("Memory file (JSON document or Markdown zip)").set_input_files(archive)
    page.get_by_role("button", name="Import", exact=True).click()
    expect(fact_item(page, "Only in copy")).to_have_count(0)
    assert gateway.contents(agent="copy") == {"Prefers tea", "Owns a cat"}
    expect(page.locator("#history-list li.change").first).to_contain_text("Removed: Only in copy")
    screenshot(page, "imported-zip")


def test_a_file_that_is_not_an_export_is_refused(
    page: Page, gateway: Gateway, screenshot: Screenshot, tmp_path: Path
) -> None:
    gateway.add_fact("Prefers tea", "preference", 0.9)
    reload(page)
    broken = tmp_path / "notes.json"
    broken.write_text("these are not the facts you are looking for", encoding="utf-8")

    page.get_by_label("Memory file (JSON document or Markdown zip)").set_input_files(broken)
    page.get_by_role("button", name="Import", exact=True).click()
    expect(page.get_by_role("alert")).to_contain_text("Could not import: import: not JSON")
    assert gateway.contents() == {"Prefers tea"}
    screenshot(page, "refused")

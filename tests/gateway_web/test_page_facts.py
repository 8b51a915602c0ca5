"""The page's main work: list, add, edit, delete, revert, switch agent bucket, search and sort."""

from __future__ import annotations

from playwright.sync_api import Page, expect

from tests.gateway_web.conftest import Screenshot
from tests.gateway_web.harness import Gateway, fact_item, reload, shown_contents


def test_lists_adds_edits_deletes_reverts_and_switches_bucket(
    page: Page, gateway: Gateway, screenshot: Screenshot
) -> None:
    gateway.add_fact("Prefers tea over coffee", "preference", 0.9)
    gateway.add_fact("Works on the billing service", "context", 0.6)
    gateway.add_fact("Writes Rust at work", "knowledge", 0.8, agent="coder")
    reload(page)

    # Lists the default bucket's facts, not the coder's.
    expect(page.locator("#fact-list li.fact")).to_have_count(2)
    expect(fact_item(page, "Prefers tea over coffee")).to_contain_text("preference")
    expect(fact_item(page, "Prefers tea over coffee")).to_contain_text("confidence 0.90")
    expect(fact_item(page, "Writes Rust at work")).to_have_count(0)
    expect(page.locator("#agent-list option[value=coder]")).to_have_count(1)
    screenshot(page, "listed")

    add_form = page.locator("#add-form")
    add_form.get_by_label("Content").fill("Lives in Lisbon")
    add_form.get_by_label("Category").select_option("identity")
    add_form.get_by_label("Confidence (0 to 1)").fill("0.85")
    add_form.get_by_label("Content").press("Enter")
    expect(fact_item(page, "Lives in Lisbon")).to_contain_text("identity")
    expect(page.locator("#notice")).to_have_text("Fact added to the default bucket.")
    expect(add_form.get_by_label("Content")).to_have_value("")
    added = next(f for f in gateway.facts() if f["content"] == "Lives in Lisbon")
    assert (added["category"], added["confidence"]) == ("identity", 0.85)
    screenshot(page, "added")

    fact_item(page, "Lives in Lisbon").get_by_role("button", name="Edit").click()
    editor = page.get_by_role("form", name="Edit fact: Lives in Lisbon")
    expect(editor.get_by_label("Content")).to_be_focused()
    editor.get_by_label("Content").fill("Lives in Porto")
    editor.get_by_label("Confidence (0 to 1)").fill("0.95")
    screenshot(page, "editing")
    editor.get_by_label("Content").press("Enter")
    expect(fact_item(page, "Lives in Porto")).to_contain_text("confidence 0.95")
    expect(fact_item(page, "Lives in Lisbon")).to_have_count(0)
    expect(fact_item(page, "Lives in Porto").get_by_role("button", name="Edit")).to_be_focused()
    edited = next(f for f in gateway.facts() if f["id"] == added["id"])
    assert (edited["content"], edited["confidence"]) == ("Lives in Porto", 0.95)
    screenshot(page, "edited")

    fact_item(page, "Lives in Porto").get_by_role("button", name="Delete").click()
    expect(fact_item(page, "Lives in Porto")).to_have_count(0)
    expect(page.locator("#notice")).to_contain_text("Fact deleted")
    assert "Lives in Porto" not in gateway.contents()
    newest = page.locator("#history-list li.change").first
    expect(newest).to_contain_text("Removed: Lives in Porto")
    screenshot(page, "deleted")

    newest.get_by_role("button", name="Revert").click()
    expect(fact_item(page, "Lives in Porto")).to_have_count(1)
    assert "Lives in Porto" in gateway.contents()
    expect(page.locator("#notice")).to_have_text("Reverted: delete_fact.")
    # The undo is itself in the history, and the deletion can no longer be reverted twice.
    expect(page.locator("#history-list li.change").first).to_contain_text("revert")
    expect(page.locator("#history-list li.change").nth(1)).to_contain_text("Reverted by")
    screenshot(page, "reverted")

    page.get_by_label("Agent bucket").fill("coder")
    page.get_by_label("Agent bucket").press("Enter")
    expect(page.locator("#facts-heading")).to_have_text("Facts of agent coder")
    expect(page.locator("#fact-list li.fact")).to_have_count(1)
    expect(fact_item(page, "Writes Rust at work")).to_have_count(1)
    expect(page.locator("#history-list")).not_to_contain_text("Lives in Porto")
    screenshot(page, "switched-bucket")

    # What the page adds now lands in the coder's bucket only.
    add_form.get_by_label("Content").fill("Builds with cargo")
    add_form.get_by_label("Content").press("Enter")
    expect(fact_item(page, "Builds with cargo")).to_have_count(1)
    assert "Builds with cargo" in gateway.contents(agent="coder")
    assert "Builds with cargo" not in gateway.contents()

    # The bucket survives a reload of the page (it is kept in the address).
    reload(page)
    expect(page.locator("#facts-heading")).to_have_text("Facts of agent coder")
    expect(page.get_by_label("Agent bucket")).to_have_value("coder")


def test_filters_sorts_and_searches(page: Page, gateway: Gateway, screenshot: Screenshot) -> None:
    gateway.add_fact("Prefers tea over coffee", "preference", 0.9)
    gateway.add_fact("Drinks coffee on Mondays", "behavior", 0.4)
    gateway.add_fact("Owns a cat named Miso", "identity", 0.8)
    gateway.add_fact("Prefers dark mode in editors", "preference", 0.6)
    reload(page)

    page.get_by_label("Sort by").select_option("confidence")
    assert shown_contents(page) == [
        "Prefers tea over coffee",
        "Owns a cat named Miso",
        "Prefers dark mode in editors",
        "Drinks coffee on Mondays",
    ]

    page.get_by_label("Show category").select_option("preference")
    expect(page.locator("#fact-list li.fact")).to_have_count(2)
    expect(page.locator("#facts-caption")).to_contain_text("2 facts in preference (of 4)")
    screenshot(page, "filtered")

    # The search runs on the server, with the category filter.
    page.get_by_label("Search facts").fill("coffee")
    page.get_by_label("Search facts").press("Enter")
    expect(page.locator("#fact-list li.fact")).to_have_count(1)
    expect(fact_item(page, "Prefers tea over coffee")).to_contain_text("score")
    expect(page.get_by_label("Sort by")).to_have_value("relevance")
    expect(page.locator("#facts-caption")).to_contain_text("1 result for “coffee”")
    screenshot(page, "searched-in-category")

    page.get_by_label("Show category").select_option("")
    expect(page.locator("#fact-list li.fact")).to_have_count(2)
    assert set(shown_contents(page)) == {"Prefers tea over coffee", "Drinks coffee on Mondays"}
    screenshot(page, "searched")

    # A change made while results are shown refreshes the results.
    fact_item(page, "Drinks coffee on Mondays").get_by_role("button", name="Delete").click()
    expect(page.locator("#fact-list li.fact")).to_have_count(1)

    page.get_by_role("button", name="Show all facts").click()
    expect(page.locator("#fact-list li.fact")).to_have_count(3)
    expect(page.get_by_label("Search facts")).to_have_value("")

    page.get_by_label("Search facts").fill("unicorn")
    page.get_by_label("Search facts").press("Enter")
    expect(page.locator("#facts-caption")).to_contain_text("0 results for “unicorn”")
    expect(page.locator("#fact-list li.fact")).to_have_count(0)


def test_refused_input_is_explained(page: Page, gateway: Gateway, screenshot: Screenshot) -> None:
    gateway.add_fact("Prefers tea over coffee", "preference", 0.9)
    reload(page)
    add_form = page.locator("#add-form")

    add_form.get_by_label("Content").fill("Prefers tea over coffee")
    add_form.get_by_label("Content").press("Enter")
    expect(page.get_by_role("alert")).to_contain_text("Could not add the fact:")
    expect(page.get_by_role("alert")).to_contain_text("fact_")
    # A duplicate is a refusal, not a race: no reload is offered.
    expect(page.get_by_role("button", name="Reload")).to_have_count(0)
    screenshot(page, "duplicate")

    add_form.get_by_label("Content").fill("my password is hunter2-Secret!")
    add_form.get_by_label("Content").press("Enter")
    expect(page.get_by_role("alert")).to_contain_text("secrets are never stored in memory")
    assert gateway.contents() == {"Prefers tea over coffee"}
    screenshot(page, "secret-refused")

    # The browser refuses a malformed agent name before sending anything ...
    page.get_by_label("Agent bucket").fill("no/such agent")
    page.get_by_label("Agent bucket").press("Enter")
    assert page.get_by_label("Agent bucket").evaluate("input => input.validity.valid") is False
    expect(page.locator("#facts-heading")).to_have_text("Facts of the default bucket")
    page.get_by_label("Agent bucket").fill("my_agent")  # every custom agent's name is a bucket
    assert page.get_by_label("Agent bucket").evaluate("input => input.validity.valid") is True

    # ... and the server refuses one that arrives another way (an edited address).
    page.goto("/#agent=_no_such_agent")
    page.reload()
    expect(page.get_by_role("alert")).to_contain_text("Could not load the memory: agent_name")

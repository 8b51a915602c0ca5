"""What a LangGraph graph writes through `DeerFlowStore` is on the memory page like any fact."""

from __future__ import annotations

import uuid
from pathlib import Path

from playwright.sync_api import Page, expect

from deerflow.agents.memory.langgraph_store import DeerFlowStore
from deerflow.agents.memory.manager import build_memory_manager
from tests.gateway_web.conftest import Screenshot
from tests.gateway_web.harness import fact_item, memory_config, reload


def test_a_fact_put_through_the_store_is_listed_edited_and_gone_on_the_page(
    page: Page, tmp_path: Path, screenshot: Screenshot
) -> None:
    memory = build_memory_manager(memory_config(tmp_path).memory)
    store = DeerFlowStore(memory)
    key = str(uuid.uuid4())
    namespace = ("memories", "default")

    store.put(namespace, key, {"content": "Prefers pnpm over npm", "category": "preference"})
    reload(page)
    expect(fact_item(page, "Prefers pnpm over npm")).to_contain_text("preference")
    screenshot(page, "put")

    store.put(namespace, key, {"content": "Prefers pnpm, never npm", "confidence": 0.9})
    reload(page)
    expect(fact_item(page, "Prefers pnpm, never npm")).to_contain_text("confidence 0.90")
    expect(fact_item(page, "Prefers pnpm over npm")).to_have_count(0)

    store.delete(namespace, key)
    reload(page)
    expect(page.locator("#fact-list li.fact")).to_have_count(0)
    screenshot(page, "deleted")
    memory.close()

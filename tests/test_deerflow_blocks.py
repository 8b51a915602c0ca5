"""DeerFlow's documented `memory:` blocks start here unchanged.

The blocks are DeerFlow's reference configuration for DeerMem and OpenViking, every key with its
documented default, as a DeerFlow user would carry them over. Keys this project does not have
(`token_counting`, `retrieval_adapter`, …) are warned about and ignored, as DeerFlow does.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from deerflow.agents.memory.backends.openviking import OpenVikingMemoryManager
from deerflow.agents.memory.manager import build_memory_manager
from deerflow.config import load_config

DEERMEM_BLOCK = """\
memory:
  enabled: true
  injection_enabled: true
  mode: middleware
  manager_class: deermem
  shutdown_flush_timeout_seconds: 30
  backend_config:
    storage_path: ""
    storage_class: ""
    strict_user_scope: false
    manifest_filename: memory.json
    file_lock_timeout_seconds: 10
    retrieval_adapter: fts5
    debounce_seconds: 30
    queue_max_depth: 1000
    max_facts: 100
    fact_confidence_threshold: 0.7
    fact_eviction_policy: confidence
    fact_eviction_shadow_enabled: false
    eviction_confidence_weight: 0.65
    eviction_confirmation_weight: 0.25
    eviction_access_weight: 0.10
    eviction_confirmation_half_life_days: 90
    eviction_access_half_life_days: 30
    eviction_correction_reserved_fraction: 0.10
    eviction_correction_reserved_max: 10
    eviction_audit_max_entries: 200
    max_injection_tokens: 2000
    token_counting: tiktoken
    guaranteed_categories: ["correction"]
    guaranteed_token_budget: 500
    staleness_review_enabled: true
    staleness_age_days: 90
    staleness_min_candidates: 3
    staleness_max_removals_per_cycle: 10
    staleness_protected_categories: ["correction"]
    staleness_max_lifetime_multiplier: 20.0
    staleness_max_extension_days: 3650
    consolidation_enabled: false
    consolidation_min_facts: 8
    consolidation_max_groups_per_cycle: 3
    consolidation_max_sources: 8
    watermark_max_keys: 4096
    patterns_dir: null
    prompts_dir: null
    model:
      provider: null
      model: null
      api_key: null
      base_url: null
      temperature: null
"""

OPENVIKING_BLOCK = """\
memory:
  enabled: true
  injection_enabled: true
  mode: middleware
  manager_class: openviking
  backend_config:
    base_url: http://openviking:1933
    owner_user_id: default
    api_key_env: OPENVIKING_API_KEY
    default_peer_id: deerflow
    timeout_seconds: 30
    max_seen_message_ids: 512
    startup_policy: fail_fast
    failure_policy:
      read: fail_open
      write: log_and_drop
    retrieval:
      top_k: 8
      score_threshold: null
      max_injection_chars: 12000
      content_mode: overview
      injection_query: "user profile preferences important entities events ongoing goals constraints and prior decisions"
"""  # noqa: E501  (the block is DeerFlow's, verbatim)


def test_deerflow_deermem_block_builds_and_says_what_it_ignores(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = load_config(_write(tmp_path, DEERMEM_BLOCK), environ={})
    with caplog.at_level(logging.WARNING):
        manager = build_memory_manager(config.memory, home=tmp_path / "home")
    try:
        assert isinstance(manager, DeerMemMemoryManager)
        settings = manager._config
        assert (settings.max_facts, settings.storage_class) == (100, None)
        assert settings.storage_path == str((tmp_path / "home").resolve())
        _, fact_id = manager.create_fact("Prefers uv over pip", "preference", 0.9, user_id="a")
        assert fact_id is not None
    finally:
        manager.close()
    assert "memory.backend_config.token_counting: unknown key" in caplog.text
    assert "memory.backend_config.retrieval_adapter: unknown key" in caplog.text


def test_deerflow_openviking_block_builds_with_a_warning_about_plain_http(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENVIKING_API_KEY", "ov-test-key")
    config = load_config(_write(tmp_path, OPENVIKING_BLOCK), environ={})
    with caplog.at_level(logging.WARNING):
        manager = build_memory_manager(config.memory, home=tmp_path / "home")
    try:
        assert isinstance(manager, OpenVikingMemoryManager)
        assert manager._settings.max_seen_messages == 512
        assert manager._settings.retrieval.max_injection_chars == 12000
    finally:
        manager.close()
    assert "plain http to openviking sends the OpenViking API key" in caplog.text
    assert "memory.backend_config.retrieval.content_mode: unknown key" in caplog.text


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("spelling", ["", "file", None])
def test_each_of_deerflows_spellings_of_the_default_storage_is_the_file_storage(
    tmp_path: Path, spelling: str | None
) -> None:
    manager = DeerMemMemoryManager.from_config(
        {"storage_path": str(tmp_path), "storage_class": spelling}
    )
    try:
        assert manager._config.storage_class is None
        _, fact_id = manager.create_fact("Prefers uv over pip", "preference", 0.9)
        assert list(tmp_path.glob(f"users/default/agents/__default__/facts/*/{fact_id}.md"))
    finally:
        manager.close()

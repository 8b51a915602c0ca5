"""Tests of the conformance kit itself: it passes good backends and catches broken ones."""

from __future__ import annotations

import textwrap
import time
from typing import Any, Self

import pytest

from deerflow.agents.memory.base import MemoryManager, MemoryMode
from deerflow.agents.memory.testing import (
    MemoryManagerConformanceTests,
    assert_does_not_block,
    measure_loop,
    standard_test_problems,
)

pytest_plugins = ["pytester"]

SLEEP_SECONDS = 0.3


class SleepingMemoryManager(MemoryManager):
    """Every sync method sleeps; the contract's async twins run them in a worker thread."""

    supports_search = True

    @classmethod
    def from_config(
        cls, backend_config: dict[str, Any], *, mode: MemoryMode = "middleware", **host_hooks: Any
    ) -> Self:
        return cls(backend_config=backend_config, mode=mode)

    def add(self, thread_id: str, messages: list[Any], **scope: Any) -> None:
        time.sleep(SLEEP_SECONDS)

    def get_context(self, user_id: str | None, **scope: Any) -> str:
        time.sleep(SLEEP_SECONDS)
        return ""

    def search(self, query: str, top_k: int = 5, **scope: Any) -> list[dict[str, Any]]:
        time.sleep(SLEEP_SECONDS)
        return []


class BlockingMemoryManager(SleepingMemoryManager):
    """A deliberately wrong async twin: blocking code inside `async def`."""

    async def aget_context(self, user_id: str | None, **scope: Any) -> str:
        return self.get_context(user_id, **scope)


class _DirectSuite(MemoryManagerConformanceTests):
    """The kit, with its test methods called directly rather than collected."""

    def __init__(self, manager: MemoryManager) -> None:
        self._manager_class = type(manager)
        self.instance = manager

    @pytest.fixture
    def manager(self) -> MemoryManager:
        return self.instance


class TestEventLoopCheck:
    def test_thread_offloaded_call_keeps_the_ticker_going(self) -> None:
        manager = SleepingMemoryManager.from_config({})
        report = assert_does_not_block(lambda: manager.aget_context("u1"), what="aget_context")
        assert report.elapsed >= SLEEP_SECONDS
        assert report.ticks >= 10

    def test_kit_test_passes_for_a_slow_but_offloaded_backend(self) -> None:
        manager = SleepingMemoryManager.from_config({})
        _DirectSuite(manager).test_async_methods_do_not_block_the_event_loop(manager, "u1", "t1")

    def test_blocking_async_def_is_caught(self) -> None:
        manager = BlockingMemoryManager.from_config({})
        report = measure_loop(lambda: manager.aget_context("u1"))
        assert report.ticks <= 1
        assert report.longest_stall >= SLEEP_SECONDS
        with pytest.raises(AssertionError, match="blocked the event loop"):
            assert_does_not_block(lambda: manager.aget_context("u1"), what="aget_context")

    def test_kit_test_fails_for_a_blocking_async_def(self) -> None:
        manager = BlockingMemoryManager.from_config({})
        suite = _DirectSuite(manager)
        with pytest.raises(AssertionError, match=r"BlockingMemoryManager\.aget_context blocked"):
            suite.test_async_methods_do_not_block_the_event_loop(manager, "u1", "t1")


class TestNoOverrideGuard:
    def test_untouched_subclass_passes(self) -> None:
        class Untouched(MemoryManagerConformanceTests):
            pass

        assert standard_test_problems(Untouched) == []

    def test_unmarked_override_is_caught(self) -> None:
        class Overrides(MemoryManagerConformanceTests):
            def test_add_returns_none(self, *args: Any, **kwargs: Any) -> None:
                pass

        assert standard_test_problems(Overrides) == [
            "test_add_returns_none: overridden without @pytest.mark.xfail(reason=...)"
        ]

    def test_xfail_without_reason_is_caught(self) -> None:
        class NoReason(MemoryManagerConformanceTests):
            @pytest.mark.xfail
            def test_add_returns_none(self, *args: Any, **kwargs: Any) -> None:
                pass

        assert len(standard_test_problems(NoReason)) == 1

    def test_xfail_with_reason_is_allowed(self) -> None:
        class Explained(MemoryManagerConformanceTests):
            @pytest.mark.xfail(reason="add() needs a live server in this suite")
            def test_add_returns_none(self, *args: Any, **kwargs: Any) -> None:
                pass

        assert standard_test_problems(Explained) == []

    def test_deleted_test_is_caught(self) -> None:
        class Deletes(MemoryManagerConformanceTests):
            test_add_returns_none = None  # type: ignore[assignment]

        assert standard_test_problems(Deletes) == ["test_add_returns_none: deleted"]


BROKEN_BACKENDS = textwrap.dedent(
    '''
    from pathlib import Path
    from typing import Any

    import pytest

    from deerflow.agents.memory.backends.inmemory import InMemoryMemoryManager
    from deerflow.agents.memory.errors import DuplicateFactError
    from deerflow.agents.memory.testing import MemoryManagerConformanceTests


    class LeakyManager(InMemoryMemoryManager):
        """Forgets the user in create_fact and get_memory: every user shares those facts."""

        def create_fact(self, content, category="context", confidence=0.5, *, user_id=None,
                        agent_name=None):
            return super().create_fact(content, category, confidence, agent_name=agent_name)

        def get_memory(self, *, user_id=None, agent_name=None):
            return super().get_memory(agent_name=agent_name)


    class BareNotImplementedManager(InMemoryMemoryManager):
        """Declares get_memory unsupported but raises a bare NotImplementedError."""

        def get_memory(self, *, user_id=None, agent_name=None):
            raise NotImplementedError


    class UnconditionalManager(InMemoryMemoryManager):
        """Claims conditional writes but drops the condition of update_fact."""

        def update_fact(self, fact_id, content=None, category=None, confidence=None, *,
                        user_id=None, agent_name=None, expected_revision=None):
            return super().update_fact(fact_id, content, category, confidence, user_id=user_id,
                                       agent_name=agent_name)


    class NoRevisionsManager(InMemoryMemoryManager):
        """A correct backend without revisions: each write refuses any expected_revision."""

        supports_expected_revision = False

        def create_fact(self, content, category="context", confidence=0.5, *, user_id=None,
                        agent_name=None, expected_revision=None):
            self._refuse_expected_revision("create_fact", expected_revision)
            return super().create_fact(content, category, confidence, user_id=user_id,
                                       agent_name=agent_name)

        def update_fact(self, fact_id, content=None, category=None, confidence=None, *,
                        user_id=None, agent_name=None, expected_revision=None):
            self._refuse_expected_revision("update_fact", expected_revision)
            return super().update_fact(fact_id, content, category, confidence, user_id=user_id,
                                       agent_name=agent_name)

        def delete_fact(self, fact_id, *, user_id=None, agent_name=None, expected_revision=None):
            self._refuse_expected_revision("delete_fact", expected_revision)
            return super().delete_fact(fact_id, user_id=user_id, agent_name=agent_name)

        def clear_memory(self, *, user_id=None, agent_name=None, expected_revision=None):
            self._refuse_expected_revision("clear_memory", expected_revision)
            return super().clear_memory(user_id=user_id, agent_name=agent_name)

        def import_memory(self, data, *, user_id=None, agent_name=None, expected_revision=None):
            self._refuse_expected_revision("import_memory", expected_revision)
            return super().import_memory(data, user_id=user_id, agent_name=agent_name)

        def update_summary(self, part, section, text, *, user_id=None, agent_name=None,
                           expected_revision=None):
            self._refuse_expected_revision("update_summary", expected_revision)
            return super().update_summary(part, section, text, user_id=user_id,
                                          agent_name=agent_name)

        def revert_change(self, change_id, *, user_id=None, expected_revision=None):
            self._refuse_expected_revision("revert_change", expected_revision)
            return super().revert_change(change_id, user_id=user_id)


    class SummaryIgnoresConditionManager(NoRevisionsManager):
        """Without revisions, yet update_summary writes whatever expected_revision it is given."""

        def update_summary(self, part, section, text, *, user_id=None, agent_name=None,
                           expected_revision=None):
            return InMemoryMemoryManager.update_summary(self, part, section, text,
                                                        user_id=user_id, agent_name=agent_name)


    class TestNoRevisions(MemoryManagerConformanceTests):
        @pytest.fixture
        def manager(self, tmp_path: Path) -> NoRevisionsManager:
            return NoRevisionsManager.from_config({"storage_path": str(tmp_path)})


    class TestSummaryIgnoresCondition(MemoryManagerConformanceTests):
        @pytest.fixture
        def manager(self, tmp_path: Path) -> SummaryIgnoresConditionManager:
            return SummaryIgnoresConditionManager.from_config({"storage_path": str(tmp_path)})


    class OverwritingIdsManager(InMemoryMemoryManager):
        """create_fact_with_id replaces the fact whose id is taken instead of refusing."""

        def create_fact_with_id(self, fact_id, content, category="context", confidence=0.5, *,
                                user_id=None, agent_name=None):
            try:
                return super().create_fact_with_id(fact_id, content, category, confidence,
                                                   user_id=user_id, agent_name=agent_name)
            except DuplicateFactError:
                return self.update_fact(fact_id, content, category, confidence,
                                        user_id=user_id, agent_name=agent_name)


    class TestOverwritingIds(MemoryManagerConformanceTests):
        @pytest.fixture
        def manager(self, tmp_path: Path) -> OverwritingIdsManager:
            return OverwritingIdsManager.from_config({"storage_path": str(tmp_path)})


    class TestUnconditional(MemoryManagerConformanceTests):
        @pytest.fixture
        def manager(self, tmp_path: Path) -> UnconditionalManager:
            return UnconditionalManager.from_config({"storage_path": str(tmp_path)})


    class TestLeaky(MemoryManagerConformanceTests):
        @pytest.fixture
        def manager(self, tmp_path: Path) -> LeakyManager:
            return LeakyManager.from_config({"storage_path": str(tmp_path)})


    class TestBareNotImplemented(MemoryManagerConformanceTests):
        @pytest.fixture
        def manager(self, tmp_path: Path) -> BareNotImplementedManager:
            return BareNotImplementedManager.from_config({"storage_path": str(tmp_path)})

        @property
        def supported_operations(self) -> frozenset[str]:
            return super().supported_operations - {"get_memory"}
    '''
)


def test_kit_fails_broken_backends(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_broken=BROKEN_BACKENDS)
    # the inner run does not read this project's pyproject.toml: same setting as ours
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    failed = {report.nodeid.split("::", 1)[1] for report in pytester.inline_run().getfailures()}
    for style in ("sync", "async"):
        assert f"TestLeaky::test_facts_do_not_leak_between_users[{style}]" in failed
        assert f"TestBareNotImplemented::test_get_memory_returns_empty_document[{style}]" in failed
        assert f"TestBareNotImplemented::test_errors_are_typed[{style}]" in failed
        assert (
            f"TestUnconditional::test_expected_revision_is_honoured_or_refused[{style}]" in failed
        )
        assert (
            f"TestOverwritingIds::test_a_chosen_fact_id_is_kept_and_never_overwritten[{style}]"
            in failed
        )
        assert (
            f"TestSummaryIgnoresCondition::test_expected_revision_is_honoured_or_refused[{style}]"
            in failed
        )
    assert not any(nodeid.startswith("TestLeaky::test_create_fact_") for nodeid in failed)
    # a backend without revisions that refuses every condition is correct
    assert not any(nodeid.startswith("TestNoRevisions::") for nodeid in failed)

"""The conformance suite of the `MemoryManager` contract (docs/conformance.md).

Subclass `MemoryManagerConformanceTests`, give it a `manager` fixture, and every standard
behaviour of the contract runs against your backend, in both call styles (the sync method, and
its `a`-twin under `asyncio.run`). See the class docstring for a template.
"""

from __future__ import annotations

import asyncio
import uuid
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Final, Literal

import pytest

from deerflow.agents.memory.base import (
    OPTIONAL_OPERATIONS,
    MemoryManager,
    overrides,
    provided_operations,
)
from deerflow.agents.memory.document import (
    FACT_CATEGORIES,
    MAX_TEXT_CHARS,
    empty_document,
    utc_now,
)
from deerflow.agents.memory.errors import (
    DuplicateFactError,
    FactNotFoundError,
    MemoryConflictError,
    MemoryManagerError,
    MemoryUnsupportedError,
)
from deerflow.agents.memory.extensions import FactsWithChosenIds
from deerflow.agents.memory.testing.loop import assert_does_not_block

__all__ = [
    "MESSAGES",
    "OPTIONAL_OPERATIONS",
    "Call",
    "MemoryManagerConformanceTests",
    "standard_test_problems",
]

CallStyle = Literal["sync", "async"]
Scope = tuple[str, str | None]  # (user_id, agent_name)


MESSAGES: Final = [
    {"role": "user", "content": "I always build Python projects with uv."},
    {"role": "assistant", "content": "Noted: uv for Python builds."},
]
"""A small conversation as plain dicts: the kit needs no LangChain."""

# The write methods that take `expected_revision` (`revert_change` too, but it needs a change).
_CONDITIONAL_WRITES: Final = (
    "create_fact",
    "update_fact",
    "delete_fact",
    "clear_memory",
    "import_memory",
    "update_summary",
)
# Made up, but shaped like an OpenAI API key: a summary holding it must be refused.
_CREDENTIAL: Final = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"
_HISTORY_KEYS: Final = {"change_id", "at", "actor", "reason", "before", "after"}
_DOCUMENT_KEYS: Final = {"version", "revision", "lastUpdated", "user", "history", "facts"}


class Call:
    """Calls one operation of a manager in one call style.

    `call("get_memory", user_id="u")` runs `manager.get_memory(...)` in the sync style, and
    `asyncio.run(manager.aget_memory(...))` in the async style.
    """

    def __init__(self, manager: MemoryManager, style: CallStyle) -> None:
        self.manager = manager
        self.style = style

    def __call__(self, operation: str, *args: Any, **kwargs: Any) -> Any:
        if self.style == "sync":
            return getattr(self.manager, operation)(*args, **kwargs)
        return asyncio.run(getattr(self.manager, f"a{operation}")(*args, **kwargs))


def standard_test_problems(cls: type) -> list[str]:
    """Standard tests that `cls` deletes, or overrides without `@pytest.mark.xfail(reason=...)`."""
    problems = []
    for name in dir(MemoryManagerConformanceTests):
        if not name.startswith("test_"):
            continue
        test = getattr(cls, name, None)
        if not callable(test):
            problems.append(f"{name}: deleted")
        elif test is not getattr(MemoryManagerConformanceTests, name) and not any(
            mark.name == "xfail" and mark.kwargs.get("reason")
            for mark in getattr(test, "pytestmark", [])
        ):
            problems.append(f"{name}: overridden without @pytest.mark.xfail(reason=...)")
    return problems


def _probe(operation: str, user_id: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Arguments that make a valid call of `operation`, for checking that it is unsupported."""
    args: dict[str, tuple[Any, ...]] = {
        "search": ("anything",),
        "import_memory": (dict(empty_document()),),
        "create_fact": ("The user drinks green tea.",),
        "update_fact": ("fact_0", "The user drinks black tea."),
        "delete_fact": ("fact_0",),
        "revert_change": ("change_0",),
        "update_summary": ("user", "workContext", "Works on the data platform."),
    }
    return args.get(operation, ()), {"user_id": user_id}


def _document_facts(doc: Any) -> list[dict[str, Any]]:
    """Assert `doc` is a memory document with valid facts; return the facts."""
    assert isinstance(doc, dict), f"expected a memory document (dict), got {type(doc).__name__}"
    assert doc.keys() >= _DOCUMENT_KEYS, f"document lacks keys {_DOCUMENT_KEYS - doc.keys()}"
    assert isinstance(doc["revision"], int)
    assert isinstance(doc["facts"], list)
    for fact in doc["facts"]:
        _assert_fact(fact)
    return doc["facts"]


def _assert_fact(fact: Any) -> None:
    assert isinstance(fact, dict), f"expected a fact dict, got {type(fact).__name__}"
    for key in ("id", "content", "createdAt", "updatedAt", "source"):
        assert isinstance(fact.get(key), str), f"fact {key!r} must be a string: {fact!r}"
    assert fact.get("category") in FACT_CATEGORIES, f"unknown category in {fact!r}"
    assert isinstance(fact.get("confidence"), float | int), f"bad confidence in {fact!r}"
    assert 0 <= fact["confidence"] <= 1, f"confidence outside 0..1 in {fact!r}"


def _contents(facts: list[dict[str, Any]]) -> list[str]:
    return [fact["content"] for fact in facts]


class MemoryManagerConformanceTests(ABC):
    """Standard tests of a `MemoryManager` backend. Subclass it and provide `manager`.

    Template::

        from pathlib import Path

        import pytest

        from deerflow.agents.memory.testing import MemoryManagerConformanceTests
        from my_pkg.memory import MyMemoryManager


        class TestMyMemoryManager(MemoryManagerConformanceTests):
            @pytest.fixture
            def manager(self, tmp_path: Path) -> MyMemoryManager:
                return MyMemoryManager.from_config({"storage_path": str(tmp_path)})

    The fixture must return a fresh, EMPTY manager (use `yield` and `close()` if it holds
    resources). Tests use fresh uuid-based user ids, so they do not depend on one another.

    Capabilities come from the class under test: `supports_search` is its class flag, and an
    operation of `OPTIONAL_OPERATIONS` is supported when the class overrides it. Override
    `supported_operations` to say otherwise. An unsupported operation must raise
    `MemoryUnsupportedError` naming the backend and the operation; the kit asserts that instead
    of skipping. A test that needs another operation to set up its data skips when that one is
    unsupported.

    A standard test that cannot pass for a good reason may be overridden only with
    `@pytest.mark.xfail(reason="...")`; `test_no_overrides_DO_NOT_OVERRIDE` enforces this.
    """

    _manager_class: type[MemoryManager]

    @abstractmethod
    @pytest.fixture
    def manager(self, *args: Any, **kwargs: Any) -> MemoryManager | Iterator[MemoryManager]:
        """Return (or yield) a fresh, empty manager, typically built on `tmp_path`."""

    # -- capabilities ----------------------------------------------------------------------------

    @property
    def manager_class(self) -> type[MemoryManager]:
        """The class under test: the type of the `manager` fixture's value."""
        return self._manager_class

    @property
    def supports_search(self) -> bool:
        """Whether `search()` works; defaults to the class flag."""
        return self.manager_class.supports_search

    @property
    def supported_operations(self) -> frozenset[str]:
        """The optional operations the backend provides; defaults to those it overrides."""
        provided = provided_operations(self.manager_class)
        return frozenset((provided - {"search"}) | ({"search"} if self.supports_search else set()))

    # -- fixtures --------------------------------------------------------------------------------

    @pytest.fixture(autouse=True)
    def _bind_manager_class(self, manager: MemoryManager) -> None:
        self._manager_class = type(manager)

    @pytest.fixture(params=["sync", "async"])
    def call(self, request: pytest.FixtureRequest, manager: MemoryManager) -> Call:
        """Run an operation in the sync or the async call style."""
        style: CallStyle = request.param
        return Call(manager, style)

    @pytest.fixture
    def user_id(self) -> str:
        return f"kit-user-{uuid.uuid4().hex}"

    @pytest.fixture
    def other_user_id(self) -> str:
        return f"kit-user-{uuid.uuid4().hex}"

    @pytest.fixture
    def thread_id(self) -> str:
        return f"kit-thread-{uuid.uuid4().hex}"

    @pytest.fixture
    def token(self) -> str:
        """A word no other test uses, to put into fact contents and queries."""
        return f"kit{uuid.uuid4().hex[:12]}"

    # -- helpers ---------------------------------------------------------------------------------

    def unsupported(self, call: Call, operation: str, user_id: str) -> bool:
        """When `operation` is unsupported, assert it raises properly and return True."""
        if operation in self.supported_operations:
            return False
        args, kwargs = _probe(operation, user_id)
        with pytest.raises(MemoryUnsupportedError) as info:
            call(operation, *args, **kwargs)
        message, backend = str(info.value), self.manager_class.__name__
        assert backend in message, f"the error must name the backend {backend!r}: {message!r}"
        assert operation in message, f"the error must name the operation {operation!r}: {message!r}"
        return True

    def require(self, *operations: str) -> None:
        """Skip when an operation needed to set up the test is unsupported."""
        missing = [op for op in operations if op not in self.supported_operations]
        if missing:
            name = self.manager_class.__name__
            pytest.skip(f"needs {', '.join(missing)}, which {name} does not support")

    def create(
        self, call: Call, content: str, user_id: str, agent_name: str | None = None, **kw: Any
    ) -> str:
        """Create a fact through the API and return its id."""
        doc, fact_id = call("create_fact", content, user_id=user_id, agent_name=agent_name, **kw)
        facts = _document_facts(doc)
        if fact_id is None:
            fact_id = next((f["id"] for f in facts if f["content"] == content), None)
        assert isinstance(fact_id, str), "create_fact returned no id and no fact with the content"
        return fact_id

    def facts(
        self, call: Call, user_id: str, agent_name: str | None = None
    ) -> list[dict[str, Any]]:
        """The facts `get_memory` shows for one scope."""
        return _document_facts(call("get_memory", user_id=user_id, agent_name=agent_name))

    def views(self, call: Call, scope: Scope, token: str) -> dict[str, str]:
        """What each supported read path shows of `scope`, as text."""
        user_id, agent_name = scope
        found = {"get_context": call("get_context", user_id, agent_name=agent_name, query=token)}
        for operation in ("get_memory", "export_memory", "reload_memory"):
            if operation in self.supported_operations:
                found[operation] = repr(call(operation, user_id=user_id, agent_name=agent_name))
        if self.supports_search:
            found["search"] = repr(call("search", token, user_id=user_id, agent_name=agent_name))
        return found

    def assert_only_owner_sees(
        self, call: Call, token: str, owner: Scope, strangers: list[Scope]
    ) -> None:
        """Assert a fact containing `token` shows in `owner` and in none of `strangers`."""
        structured = {k: v for k, v in self.views(call, owner, token).items() if k != "get_context"}
        if structured:
            assert any(token in text for text in structured.values()), (
                f"the owner {owner} cannot see its own fact through {sorted(structured)}"
            )
        for stranger in strangers:
            leaks = [
                path for path, text in self.views(call, stranger, token).items() if token in text
            ]
            assert not leaks, f"a fact of {owner} is visible to {stranger} through {leaks}"

    # -- required: flags, construction, mandatory and harmless-default methods -----------------

    def test_flags_agree_with_implementation(self) -> None:
        """`supports_search` is True exactly when the class overrides `search()`.

        Troubleshooting: set `supports_search: ClassVar[bool] = True` on a backend that
        implements `search()`, and leave it False otherwise.
        """
        cls = self.manager_class
        assert cls.supports_search == overrides(cls, "search")
        assert isinstance(cls.requires_passive_writes_in_tool_mode, bool)

    def test_from_config_returns_an_instance(self, manager: MemoryManager) -> None:
        """`from_config` is the backend's own and builds an instance of the class.

        Troubleshooting: implement the classmethod `from_config(backend_config, *, mode,
        **host_hooks)` and return `cls(...)`; ignore host hooks you do not use.
        """
        cls = self.manager_class
        assert overrides(cls, "from_config")
        built = cls.from_config(manager.backend_config)
        try:
            assert isinstance(built, cls)
            assert built.mode == "middleware"
        finally:
            built.close()

    def test_tool_mode_needs_search(self, manager: MemoryManager) -> None:
        """`mode="tool"` is refused with ValueError when the backend has no `search()`.

        Troubleshooting: build the instance through `cls(...)` so the contract's check runs;
        do not bypass validation.
        """
        cls = self.manager_class
        if not self.supports_search:
            with pytest.raises(ValueError):  # noqa: PT011 - the type is the contract
                cls.from_config(manager.backend_config, mode="tool")
            return
        try:
            built = cls.from_config(manager.backend_config, mode="tool")
        except ValueError:
            return  # a backend with search may still be middleware-only
        try:
            assert built.mode == "tool"
        finally:
            built.close()

    def test_read_failures_are_fatal_for_config_is_pure(self) -> None:
        """`read_/write_failures_are_fatal_for_config` answer a bool from the config alone.

        Troubleshooting: keep it a classmethod without I/O or construction; it is asked before
        any manager exists.
        """
        cls = self.manager_class
        for config in ({}, {"failure_policy": {"read": "fail_closed", "write": "raise"}}):
            for ask in (
                cls.read_failures_are_fatal_for_config,
                cls.write_failures_are_fatal_for_config,
            ):
                answer = ask(config)
                assert isinstance(answer, bool)
                assert answer == ask(config)

    def test_add_returns_none(self, call: Call, user_id: str, thread_id: str) -> None:
        """`add()` accepts plain message dicts and returns None.

        Troubleshooting: `add` queues a write; it must not require LangChain message objects
        nor return a value.
        """
        assert call("add", thread_id, list(MESSAGES), user_id=user_id) is None

    def test_add_nowait_returns_none(self, call: Call, user_id: str, thread_id: str) -> None:
        """`add_nowait()` accepts plain message dicts and returns None.

        Troubleshooting: the default calls `add`; if you override it, flush at once and return
        None.
        """
        result = call("add_nowait", thread_id, list(MESSAGES), user_id=user_id, agent_name="kit")
        assert result is None

    def test_get_context_unknown_user_is_text(self, call: Call, user_id: str) -> None:
        """`get_context()` for a user with no memory returns a str ("" is fine).

        Troubleshooting: return "" instead of None or raising when nothing is stored.
        """
        assert isinstance(call("get_context", user_id), str)
        assert isinstance(call("get_context", user_id, agent_name="kit", query="tea"), str)

    def test_shutdown_flush_returns_bool(self, call: Call) -> None:
        """`shutdown_flush(5)` returns a bool.

        Troubleshooting: return True when nothing is left queued, False on timeout.
        """
        assert isinstance(call("shutdown_flush", 5), bool)

    def test_warm_returns_bool_or_none(self, call: Call) -> None:
        """`warm()` returns a bool, or None when there is nothing to warm.

        Troubleshooting: report readiness as a bool; do not raise for a cold optional cache.
        """
        assert call("warm") in (True, False, None)

    def test_cancel_pending_returns_int(self, call: Call, user_id: str) -> None:
        """`cancel_pending()` returns how many queued writes it dropped, an int.

        Troubleshooting: return 0 when your backend does not queue writes.
        """
        count = call("cancel_pending", user_id=user_id)
        assert isinstance(count, int)
        assert count >= 0

    def test_close_does_not_raise(self, call: Call) -> None:
        """`close()` releases resources without raising.

        Troubleshooting: make `close` tolerate resources that were never opened.
        """
        call("shutdown_flush", 5)
        call("close")

    def test_errors_are_typed(self, call: Call, user_id: str) -> None:
        """Every tested failure raises a `MemoryManagerError` subclass or ValueError.

        Troubleshooting: map vendor and storage exceptions to the errors of
        `deerflow.agents.memory.errors`, and bad input to ValueError; never let a bare
        NotImplementedError, KeyError or client exception escape.
        """
        supported = self.supported_operations
        # Unsupported operations fail, and so do update_fact/delete_fact of an unknown id.
        probes = [
            (op, *_probe(op, user_id))
            for op in OPTIONAL_OPERATIONS
            if op not in supported or op in ("update_fact", "delete_fact")
        ]
        if "create_fact" in supported:
            call("create_fact", "The user drinks green tea.", user_id=user_id)
            probes += [
                ("create_fact", ("The user drinks green tea.",), {"user_id": user_id}),
                ("create_fact", ("x", "nonsense"), {"user_id": user_id}),
                ("create_fact", ("x", "context", 1.5), {"user_id": user_id}),
                ("create_fact", ("  ",), {"user_id": user_id}),
            ]
        for operation, args, kwargs in probes:
            try:
                call(operation, *args, **kwargs)
            except (MemoryManagerError, ValueError):
                continue
            except Exception as exc:
                pytest.fail(f"{operation}{args} raised {type(exc).__name__}: {exc}")
            pytest.fail(f"{operation}{args} raised nothing; an error was expected")

    def test_async_methods_do_not_block_the_event_loop(
        self, manager: MemoryManager, user_id: str, thread_id: str
    ) -> None:
        """`aget_context`, `aadd` and `asearch` let the event loop run while they wait.

        Troubleshooting: do not override an `a`-method with an `async def` that calls blocking
        code; the contract's default already runs the sync method in a worker thread.
        """
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "aget_context": lambda: manager.aget_context(user_id, query="tea"),
            "aadd": lambda: manager.aadd(thread_id, list(MESSAGES), user_id=user_id),
        }
        if self.supports_search:
            calls["asearch"] = lambda: manager.asearch("tea", user_id=user_id)
        for name, make_call in calls.items():
            assert_does_not_block(make_call, what=f"{self.manager_class.__name__}.{name}")

    def test_facts_do_not_leak_between_users(
        self, call: Call, user_id: str, other_user_id: str, token: str
    ) -> None:
        """A fact of one user is invisible to another user through every read path.

        Troubleshooting: scope every read (get_memory, search, get_context, export) by user_id;
        a missing filter in one path shows up here.
        """
        self.require("create_fact")
        self.create(call, f"The user's locker code word is {token}.", user_id)
        self.create(call, f"The user's desk code word is {token}.", user_id, agent_name="kit")
        strangers: list[Scope] = [(other_user_id, None), (other_user_id, "kit")]
        self.assert_only_owner_sees(call, token, (user_id, None), strangers)

    def test_facts_do_not_leak_between_agents(self, call: Call, user_id: str, token: str) -> None:
        """A fact of one agent bucket is invisible in the default bucket and in other agents.

        Troubleshooting: key facts by (user_id, agent_name), with agent_name None meaning the
        default bucket, and filter every read path by both.
        """
        self.require("create_fact")
        self.create(call, f"The project code word is {token}.", user_id, agent_name="kit-a")
        strangers: list[Scope] = [(user_id, None), (user_id, "kit-b")]
        self.assert_only_owner_sees(call, token, (user_id, "kit-a"), strangers)

    def test_no_overrides_DO_NOT_OVERRIDE(self) -> None:
        """No standard test is deleted, or overridden without `@pytest.mark.xfail(reason=...)`.

        Troubleshooting: to opt out of a standard test, override it with
        `@pytest.mark.xfail(reason="why")` so the gap is visible in every run.
        """
        problems = standard_test_problems(type(self))
        assert not problems, "standard tests changed:\n" + "\n".join(problems)

    # -- optional: search ------------------------------------------------------------------------

    def test_search_unknown_user_returns_list(self, call: Call, user_id: str) -> None:
        """`search()` for a user with no memory returns an empty list.

        Troubleshooting: return [] when nothing matches instead of None or raising.
        """
        if self.unsupported(call, "search", user_id):
            return
        assert call("search", "tea", user_id=user_id) == []

    def test_search_finds_created_fact(self, call: Call, user_id: str, token: str) -> None:
        """A created fact is found by `search()`, as a fact dict, results best first.

        Troubleshooting: index facts on create (synchronously, or flush before returning), and
        return the public fact dicts, with an optional `score` in descending order.
        """
        if self.unsupported(call, "search", user_id):
            return
        self.require("create_fact")
        self.create(call, f"The user keeps {token} notes in a blue notebook.", user_id)
        self.create(call, "The user drinks green tea.", user_id)
        results = call("search", f"{token} notebook", user_id=user_id)
        assert isinstance(results, list)
        for fact in results:
            _assert_fact(fact)
        assert any(token in content for content in _contents(results)), results
        scores = [fact["score"] for fact in results if "score" in fact]
        assert scores == sorted(scores, reverse=True), f"results not best first: {scores}"

    def test_search_filters_category_before_top_k(
        self, call: Call, user_id: str, token: str
    ) -> None:
        """`search()` honours `category` before cutting to `top_k`, and never exceeds `top_k`.

        Troubleshooting: filter by category in the query (or before truncating), not after
        taking the top k results.
        """
        if self.unsupported(call, "search", user_id):
            return
        self.require("create_fact")
        query = f"{token} alpha beta gamma"
        for variant in ("one", "two"):
            self.create(call, f"{query} {variant}", user_id, category="preference")
        self.create(call, f"{token} knowledge", user_id, category="knowledge")
        results = call("search", query, 1, user_id=user_id, category="knowledge")
        assert _contents(results) == [f"{token} knowledge"]
        assert len(call("search", query, 1, user_id=user_id)) == 1
        results = call("search", query, 5, user_id=user_id, category="preference")
        assert results
        assert {fact["category"] for fact in results} == {"preference"}

    # -- optional: documents ---------------------------------------------------------------------

    def test_get_memory_returns_empty_document(self, call: Call, user_id: str) -> None:
        """`get_memory()` for a user with no memory returns a memory document with no facts.

        Troubleshooting: start from `deerflow.agents.memory.document.empty_document()`.
        """
        if self.unsupported(call, "get_memory", user_id):
            return
        assert self.facts(call, user_id) == []

    def test_export_memory_returns_document(self, call: Call, user_id: str) -> None:
        """`export_memory()` returns a memory document.

        Troubleshooting: export the same shape `get_memory` returns, so `import_memory` takes it.
        """
        if self.unsupported(call, "export_memory", user_id):
            return
        assert _document_facts(call("export_memory", user_id=user_id)) == []

    def test_reload_memory_shows_stored_facts(self, call: Call, user_id: str, token: str) -> None:
        """`reload_memory()` returns the stored document, including a created fact.

        Troubleshooting: drop caches, then read from storage; do not return an empty document.
        """
        if self.unsupported(call, "reload_memory", user_id):
            return
        self.require("create_fact")
        self.create(call, f"The user's reload word is {token}.", user_id)
        doc = call("reload_memory", user_id=user_id)
        assert f"The user's reload word is {token}." in _contents(_document_facts(doc))

    def test_import_memory_replaces_bucket(self, call: Call, user_id: str, token: str) -> None:
        """`import_memory()` stores the document's facts and returns the new document.

        Troubleshooting: accept full public fact dicts; validate them and keep their content.
        """
        if self.unsupported(call, "import_memory", user_id):
            return
        self.require("get_memory")
        now = utc_now()
        fact = {
            "id": f"fact_{uuid.uuid4().hex}",
            "content": f"The user's imported word is {token}.",
            "category": "knowledge",
            "confidence": 0.7,
            "createdAt": now,
            "updatedAt": now,
            "source": "import",
        }
        data: dict[str, Any] = {**empty_document(), "facts": [fact]}
        returned = _document_facts(call("import_memory", data, user_id=user_id))
        assert _contents(returned) == [fact["content"]]
        assert _contents(self.facts(call, user_id)) == [fact["content"]]

    def test_import_memory_refuses_a_mistyped_document(
        self, call: Call, user_id: str, token: str
    ) -> None:
        """A document with a value of the wrong type raises ValueError and changes nothing.

        Troubleshooting: check the document with `parse_import_document` (from
        `deerflow.agents.memory.manager`) before changing anything; `{"user": []}` must not
        import as "no summaries".
        """
        if self.unsupported(call, "import_memory", user_id):
            return
        self.require("create_fact", "get_memory")
        self.create(call, f"The user's kept word is {token}.", user_id)
        mistyped: list[dict[str, Any]] = [
            {"user": []},
            {"history": 0},
            {"facts": "x"},
            {"facts": [], "revision": "five"},
        ]
        for data in mistyped:
            with pytest.raises(ValueError):  # noqa: PT011 - the type is the contract
                call("import_memory", data, user_id=user_id)
        assert _contents(self.facts(call, user_id)) == [f"The user's kept word is {token}."]

    def test_export_clear_import_round_trip(self, call: Call, user_id: str, token: str) -> None:
        """export → clear → import brings back the facts' contents.

        Troubleshooting: `export_memory` must return what `import_memory` accepts, and
        `import_memory` must not drop facts it did not create itself.
        """
        self.require("create_fact", "export_memory", "clear_memory", "import_memory", "get_memory")
        contents = {f"The user's first word is {token}.", f"The user's second word is {token}."}
        for content in contents:
            self.create(call, content, user_id)
        exported = call("export_memory", user_id=user_id)
        call("clear_memory", user_id=user_id)
        assert self.facts(call, user_id) == []
        call("import_memory", exported, user_id=user_id)
        assert set(_contents(self.facts(call, user_id))) == contents

    def test_clear_memory_empties_bucket(
        self, call: Call, user_id: str, other_user_id: str, token: str
    ) -> None:
        """`clear_memory()` empties one agent bucket, or all of the user's buckets, and no more.

        Troubleshooting: with agent_name, clear that bucket only; without, clear every bucket
        of the user; never touch another user.
        """
        if self.unsupported(call, "clear_memory", user_id):
            return
        self.require("create_fact", "get_memory")
        self.create(call, f"Default bucket word {token}.", user_id)
        self.create(call, f"Agent bucket word {token}.", user_id, agent_name="kit")
        self.create(call, f"Other user word {token}.", other_user_id)
        doc = call("clear_memory", user_id=user_id, agent_name="kit")
        assert _document_facts(doc) == []
        assert self.facts(call, user_id, "kit") == []
        assert _contents(self.facts(call, user_id)) == [f"Default bucket word {token}."]
        call("clear_memory", user_id=user_id)
        assert self.facts(call, user_id) == []
        assert _contents(self.facts(call, other_user_id)) == [f"Other user word {token}."]

    # -- optional: facts -------------------------------------------------------------------------

    def test_create_fact_shows_in_get_memory(self, call: Call, user_id: str, token: str) -> None:
        """A created fact appears in `get_memory()` with the given fields.

        Troubleshooting: return the document and the new id; store category and confidence as
        given.
        """
        if self.unsupported(call, "create_fact", user_id):
            return
        self.require("get_memory")
        content = f"The user's favourite word is {token}."
        fact_id = self.create(call, content, user_id, category="preference", confidence=0.8)
        [fact] = [f for f in self.facts(call, user_id) if f["id"] == fact_id]
        assert (fact["content"], fact["category"]) == (content, "preference")
        assert fact["confidence"] == pytest.approx(0.8)

    def test_create_fact_rejects_invalid_input(self, call: Call, user_id: str) -> None:
        """Unknown category, confidence 1.5, empty content, content over `MAX_TEXT_CHARS` and
        content with a bidirectional override raise ValueError.

        Troubleshooting: validate with `validate_content`, `validate_category` and
        `validate_confidence` from `deerflow.agents.memory.document`.
        """
        if self.unsupported(call, "create_fact", user_id):
            return
        invalid: tuple[tuple[Any, ...], ...] = (
            ("x", "nonsense"),
            ("x", "context", 1.5),
            ("  ",),
            ("x" * (MAX_TEXT_CHARS + 1),),
            ("Prefers \u202etea",),
        )
        for args in invalid:
            with pytest.raises(ValueError):  # noqa: PT011 - the type is the contract
                call("create_fact", *args, user_id=user_id)

    def test_create_fact_rejects_duplicate(self, call: Call, user_id: str, token: str) -> None:
        """Creating the same content twice raises `DuplicateFactError`.

        Troubleshooting: compare the new content with the bucket's facts before storing.
        """
        if self.unsupported(call, "create_fact", user_id):
            return
        self.create(call, f"The user's duplicate word is {token}.", user_id)
        with pytest.raises(DuplicateFactError):
            call("create_fact", f"The user's duplicate word is {token}.", user_id=user_id)

    def test_update_fact_changes_only_given_fields(
        self, call: Call, user_id: str, token: str
    ) -> None:
        """`update_fact()` changes the given fields, keeps the others, and validates them.

        Troubleshooting: treat None as "unchanged"; validate new values like `create_fact`.
        """
        if self.unsupported(call, "update_fact", user_id):
            return
        self.require("create_fact", "get_memory")
        content = f"The user's update word is {token}."
        fact_id = self.create(call, content, user_id, category="preference", confidence=0.6)
        call("update_fact", fact_id, confidence=0.9, user_id=user_id)
        [fact] = [f for f in self.facts(call, user_id) if f["id"] == fact_id]
        assert (fact["content"], fact["category"]) == (content, "preference")
        assert fact["confidence"] == pytest.approx(0.9)
        call("update_fact", fact_id, content=f"Updated {token}.", user_id=user_id)
        [fact] = [f for f in self.facts(call, user_id) if f["id"] == fact_id]
        assert (fact["content"], fact["category"]) == (f"Updated {token}.", "preference")
        assert fact["confidence"] == pytest.approx(0.9)
        with pytest.raises(ValueError):  # noqa: PT011 - the type is the contract
            call("update_fact", fact_id, category="nonsense", user_id=user_id)

    @pytest.mark.parametrize("operation", ["update_fact", "delete_fact"])
    def test_unknown_fact_id_raises_fact_not_found(
        self, call: Call, user_id: str, operation: str
    ) -> None:
        """`update_fact()` and `delete_fact()` of an unknown id raise `FactNotFoundError`.

        Troubleshooting: raise `FactNotFoundError(fact_id)` (it is also a KeyError), not a
        bare KeyError or a silent no-op.
        """
        if self.unsupported(call, operation, user_id):
            return
        args, kwargs = _probe(operation, user_id)
        with pytest.raises(FactNotFoundError) as info:
            call(operation, f"fact_{uuid.uuid4().hex}", *args[1:], **kwargs)
        assert isinstance(info.value, KeyError)

    def test_delete_fact_removes_it(self, call: Call, user_id: str, token: str) -> None:
        """A deleted fact is gone from `get_memory()`, and deleting it again is not found.

        Troubleshooting: delete from storage and from any index or cache.
        """
        if self.unsupported(call, "delete_fact", user_id):
            return
        self.require("create_fact", "get_memory")
        fact_id = self.create(call, f"The user's delete word is {token}.", user_id)
        _document_facts(call("delete_fact", fact_id, user_id=user_id))
        assert fact_id not in {fact["id"] for fact in self.facts(call, user_id)}
        with pytest.raises(FactNotFoundError):
            call("delete_fact", fact_id, user_id=user_id)

    # -- optional: summaries ---------------------------------------------------------------------

    def test_update_summary_replaces_one_section(
        self, call: Call, user_id: str, token: str
    ) -> None:
        """`update_summary()` changes one section and nothing else; "" empties it; unknown names,
        bad text and credential-looking text are refused.

        Troubleshooting: check the edit with `validate_summary` (the section, the content rules,
        no credential), compare `expected_revision` with the revision inside the same write, and
        count the write as one revision.
        """
        if self.unsupported(call, "update_summary", user_id):
            return
        self.require("get_memory")
        text = f"Works on the {token} pipeline."
        before = call("get_memory", user_id=user_id)
        doc = call("update_summary", "user", "workContext", text, user_id=user_id)
        _document_facts(doc)
        after = call("get_memory", user_id=user_id)
        assert doc["user"]["workContext"]["summary"] == text
        assert after["user"]["workContext"]["summary"] == text
        for part in ("user", "history"):
            for section, value in before[part].items():
                if (part, section) != ("user", "workContext"):
                    assert after[part][section]["summary"] == value["summary"]
        assert after["revision"] > before["revision"]

        # the condition itself is `test_expected_revision_is_honoured_or_refused`'s
        condition = (
            {"expected_revision": after["revision"]}
            if self.manager_class.supports_expected_revision
            else {}
        )
        emptied = call("update_summary", "user", "workContext", "", user_id=user_id, **condition)
        assert emptied["user"]["workContext"]["summary"] == ""
        for part, section, bad_text, problem in (
            ("users", "workContext", "x y", "part"),
            ("user", "recentMonths", "x y", "section"),
            ("history", "recentMonths", "bell \x07 here", "control character"),
            ("user", "personalContext", f"Deploys with {_CREDENTIAL}.", "secret"),
        ):
            with pytest.raises(ValueError, match=problem):
                call("update_summary", part, section, bad_text, user_id=user_id)
        stored = call("get_memory", user_id=user_id)["user"]["personalContext"]["summary"]
        assert stored == before["user"]["personalContext"]["summary"], "a credential was stored"

    # -- optional: the FactsWithChosenIds extension ----------------------------------------------

    def test_a_chosen_fact_id_is_kept_and_never_overwritten(
        self, call: Call, user_id: str, token: str
    ) -> None:
        """`create_fact_with_id()` (the `FactsWithChosenIds` extension the LangGraph store needs)
        stores the fact under the caller's id; an id taken in the bucket raises
        `DuplicateFactError` whose `existing_fact_id` is that id, and the stored fact stays; the
        same id in another bucket is another fact.

        Troubleshooting: check that the id is free in the bucket inside the write that creates
        it (again when the create is redone on a newer revision).
        """
        manager = call.manager
        if not isinstance(manager, FactsWithChosenIds):
            return
        self.require("get_memory")
        fact_id = f"fact_{uuid.uuid4().hex}"
        content = f"The user's chosen-id word is {token}."
        doc = manager.create_fact_with_id(fact_id, content, "preference", 0.8, user_id=user_id)
        assert {f["id"]: f["content"] for f in _document_facts(doc)} == {fact_id: content}
        with pytest.raises(DuplicateFactError) as info:
            manager.create_fact_with_id(fact_id, f"Another word is {token}.", user_id=user_id)
        assert info.value.existing_fact_id == fact_id
        stored = self.facts(call, user_id)
        assert [(f["id"], f["content"]) for f in stored] == [(fact_id, content)]
        other = f"The kit agent's word is {token}."
        doc = manager.create_fact_with_id(fact_id, other, user_id=user_id, agent_name="kit")
        assert [(f["id"], f["content"]) for f in _document_facts(doc)] == [(fact_id, other)]
        assert self.facts(call, user_id) == stored

    # -- optional: conditional writes ------------------------------------------------------------

    def test_expected_revision_is_honoured_or_refused(
        self, call: Call, user_id: str, token: str
    ) -> None:
        """A write given a stale `expected_revision` changes nothing; a backend without
        revisions refuses any `expected_revision` rather than ignoring it.

        Troubleshooting: with `supports_expected_revision = True`, compare the revision in the
        same atomic step as the write and raise `MemoryConflictError`; otherwise call
        `self._refuse_expected_revision(operation, expected_revision)` first in each write.
        """
        writes = [op for op in _CONDITIONAL_WRITES if op in self.supported_operations]
        if not writes:
            return
        self.require("create_fact", "get_memory")
        fact_id = self.create(call, f"The user's guarded word is {token}.", user_id)
        args = {
            "create_fact": (f"The user's second guarded word is {token}.",),
            "update_fact": (fact_id, f"The user's changed word is {token}."),
            "delete_fact": (fact_id,),
            "clear_memory": (),
            "import_memory": (dict(empty_document()),),
            "update_summary": ("user", "workContext", f"Works on the {token} guard."),
        }
        if not self.manager_class.supports_expected_revision:
            for operation in writes:
                with pytest.raises(MemoryUnsupportedError) as info:
                    call(operation, *args[operation], user_id=user_id, expected_revision=0)
                assert "expected_revision" in str(info.value)
            return
        stale = call("get_memory", user_id=user_id)["revision"]
        self.create(call, f"The user's meanwhile word is {token}.", user_id)
        before = call("get_memory", user_id=user_id)
        for operation in writes:
            with pytest.raises(MemoryConflictError):
                call(operation, *args[operation], user_id=user_id, expected_revision=stale)
            assert call("get_memory", user_id=user_id) == before, f"a stale {operation} wrote"
        if "update_fact" not in writes:
            return
        current = before["revision"]
        call("update_fact", *args["update_fact"], user_id=user_id, expected_revision=current)
        after = call("get_memory", user_id=user_id)
        assert after["revision"] > current
        assert f"The user's changed word is {token}." in _contents(after["facts"])

    # -- optional: history -----------------------------------------------------------------------

    def test_get_history_records_changes(self, call: Call, user_id: str, token: str) -> None:
        """`get_history()` lists changes, newest first, with the documented keys.

        Troubleshooting: record `{change_id, at, actor, reason, before, after}` per change.
        """
        if self.unsupported(call, "get_history", user_id):
            return
        assert call("get_history", user_id=user_id) == []
        self.require("create_fact")
        self.create(call, f"The user's history word is {token}.", user_id)
        history = call("get_history", user_id=user_id)
        assert history, "a created fact left no history entry"
        for entry in history:
            assert entry.keys() >= _HISTORY_KEYS, (
                f"history entry lacks {_HISTORY_KEYS - entry.keys()}"
            )

    def test_revert_change_restores_deleted_fact(
        self, call: Call, user_id: str, token: str
    ) -> None:
        """Reverting the newest change, a delete, brings the fact back.

        Troubleshooting: `get_history` must list newest first, and `revert_change` must
        restore the `before` state of the change.
        """
        if self.unsupported(call, "revert_change", user_id):
            return
        self.require("create_fact", "delete_fact", "get_history", "get_memory")
        content = f"The user's revert word is {token}."
        fact_id = self.create(call, content, user_id)
        call("delete_fact", fact_id, user_id=user_id)
        newest = call("get_history", user_id=user_id)[0]
        assert isinstance(call("revert_change", newest["change_id"], user_id=user_id), dict)
        assert content in _contents(self.facts(call, user_id))

"""The worked example of docs/backends.md, executed: it loads both ways and works as documented."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from deerflow.agents.memory.manager import (
    MemoryManager,
    MemoryUnsupportedError,
    build_memory_manager,
)
from deerflow.config import MemoryConfig
from tests.backend_fixtures import add_backend_folder, add_module

DOC = Path(__file__).resolve().parents[1] / "docs" / "backends.md"
CLASS_NAME = "JsonlNotesMemoryManager"


def worked_example() -> str:
    text = DOC.read_text(encoding="utf-8")
    match = re.search(
        r"<!-- worked-example:start -->\n```python\n(.*?)```\n<!-- worked-example:end -->",
        text,
        re.S,
    )
    assert match, "docs/backends.md lost its worked example markers"
    return match.group(1)


@pytest.fixture(params=["folder", "colon path", "dotted path"])
def manager(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> MemoryManager:
    source = worked_example()
    if request.param == "folder":
        add_backend_folder(monkeypatch, tmp_path, "jsonl_notes", source)
        manager_class = "jsonl_notes"
    else:
        add_module(monkeypatch, tmp_path, "my_notes", source)
        sep = ":" if request.param == "colon path" else "."
        manager_class = f"my_notes{sep}{CLASS_NAME}"
    memory = MemoryConfig(manager_class=manager_class, backend_config={"max_context_chars": 60})
    return build_memory_manager(memory, home=tmp_path / "home")


def test_example_loads_and_remembers_per_user(manager: MemoryManager, tmp_path: Path) -> None:
    assert type(manager).__name__ == CLASS_NAME
    assert manager.backend_config["storage_path"] == str((tmp_path / "home").resolve())
    manager.add("t1", [HumanMessage("I use pnpm"), AIMessage("Noted.")], user_id="alice")
    manager.add("t2", [{"role": "user", "content": "My cat is called Miso"}], user_id="alice")
    context = manager.get_context("alice")
    assert context == "Things the user said:\n- I use pnpm\n- My cat is called Miso"
    assert manager.get_context("bob") == ""
    assert (tmp_path / "home" / "jsonl-notes" / "alice.jsonl").exists()


def test_example_budget_keeps_the_newest_lines(manager: MemoryManager) -> None:
    for i in range(10):
        manager.add("t", [HumanMessage(f"message number {i}")], user_id="carol")
    context = manager.get_context("carol")
    assert context.endswith("- message number 9")
    assert "message number 0" not in context
    assert len(context.split("\n", 1)[1]) <= 60


OPTIONAL_CALLS: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "search": (("pnpm",), {}),
    "get_memory": ((), {}),
    "reload_memory": ((), {}),
    "clear_memory": ((), {}),
    "import_memory": (({"facts": []},), {}),
    "export_memory": ((), {}),
    "create_fact": (("likes tea",), {}),
    "update_fact": (("fact_1",), {"content": "x"}),
    "delete_fact": (("fact_1",), {}),
    "get_history": ((), {}),
    "revert_change": (("change_1",), {}),
    "update_summary": (("user", "workContext", "x"), {}),
}


@pytest.mark.parametrize("operation", sorted(OPTIONAL_CALLS))
def test_every_optional_operation_is_unsupported_by_name(
    manager: MemoryManager, operation: str
) -> None:
    args, kwargs = OPTIONAL_CALLS[operation]
    with pytest.raises(MemoryUnsupportedError) as sync_info:
        getattr(manager, operation)(*args, **kwargs)
    with pytest.raises(MemoryUnsupportedError) as async_info:
        asyncio.run(getattr(manager, "a" + operation)(*args, **kwargs))
    for info in (sync_info, async_info):
        assert str(info.value) == f"Memory backend '{CLASS_NAME}' does not support '{operation}'."
        assert isinstance(info.value, NotImplementedError)
        assert (info.value.backend, info.value.operation) == (CLASS_NAME, operation)


def test_example_rejects_unknown_keys_with_the_dotted_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_module(monkeypatch, tmp_path, "my_notes", worked_example())
    memory = MemoryConfig(
        manager_class=f"my_notes:{CLASS_NAME}",
        backend_config={"max_context_char": 10, "strict": True},
    )
    with pytest.raises(ValueError, match=r"memory\.backend_config\.max_context_char: unknown key"):
        build_memory_manager(memory, home=tmp_path)


def comparison_table() -> dict[str, dict[str, str]]:
    """The built-in backends' comparison: {row label: {backend name: cell}}."""
    section = DOC.read_text(encoding="utf-8").split("## Built-in backends", 1)[1]
    lines = [line for line in section.split("\n## ", 1)[0].splitlines() if line.startswith("|")]
    # A cell may hold an escaped bar (`fail_open` \| `fail_closed`).
    split = (re.split(r"(?<!\\)\|", line.strip().strip("|")) for line in lines)
    header, _rule, *rows = ([cell.strip() for cell in cells] for cells in split)
    names = [re.sub(r"`(\w+)`.*", r"\1", cell) for cell in header[1:]]
    return {row[0]: dict(zip(names, row[1:], strict=True)) for row in rows}


def documented_operations(cell: str, all_of: tuple[str, ...]) -> set[str]:
    """The operations of `all_of` a cell says a backend has: "yes", "no", or some by name."""
    if cell.startswith("yes"):
        return set(all_of)
    if cell == "no":
        return set()
    return {operation for operation in all_of if operation.split("_")[0] in cell}


@pytest.mark.parametrize("backend", sorted(comparison_table()["Where memory lives"]))
def test_the_comparison_table_says_what_each_backend_provides(backend: str) -> None:
    from deerflow.agents.memory.langgraph_store.store import REQUIRED_OPERATIONS
    from deerflow.agents.memory.manager import provided_operations, resolve_manager_class

    table, cls = comparison_table(), resolve_manager_class(backend)
    provided = provided_operations(cls)
    searches = table["`search` / tool mode"][backend].split()[0]
    assert searches == ("yes" if cls.supports_search else "no")
    rows = {
        "Read, create, update, delete facts": ("get_memory", "create_fact", "update_fact",
                                               "delete_fact"),
        "Export, import, clear": ("export_memory", "import_memory", "clear_memory"),
        "History and revert": ("get_history", "revert_change"),
    }  # fmt: skip
    for label, operations in rows.items():
        assert documented_operations(table[label][backend], operations) == provided & set(
            operations
        ), label
    store = table["LangGraph store ([langgraph.md](langgraph.md))"][backend]
    has_store = set(REQUIRED_OPERATIONS) <= provided and hasattr(cls, "create_fact_with_id")
    assert store == ("yes" if has_store else "no")


def test_the_contract_tables_list_each_methods_parameters() -> None:
    """A signature the guide writes out in full (it shows the `*`) names the code's parameters,
    in order, so a backend written from the table takes every keyword the host passes."""
    import inspect

    section = DOC.read_text(encoding="utf-8").split("## 2. The contract", 1)[1]
    section = section.split("\n## ", 1)[0]
    written = re.findall(r"^\| `(\w+)\(([^)`]*\*[^)`]*)\)", section, flags=re.M)
    written += re.findall(r", `(\w+)\(([^)`]*\*[^)`]*)\)", section)
    assert {"add", "get_context", "search", "get_history", "revert_change"} <= {
        name for name, _ in written
    }
    for name, params in written:
        listed = [p.split("=")[0].strip().lstrip("*") for p in params.split(",")]
        listed = [p for p in listed if p]
        parameters = inspect.signature(getattr(MemoryManager, name)).parameters
        code = [p for p in parameters if p != "self"]
        assert listed == code, f"{name}: the guide lists {listed}, the contract takes {code}"

"""`deerflow memory`: each command drives one library call; effects are seen through the library."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from rich.console import Console
from typer.testing import CliRunner, Result

from deerflow.agents.memory.extensions import AgentListing
from deerflow.agents.memory.manager import (
    DuplicateFactError,
    FactEvictedError,
    FactNotFoundError,
    MemoryAccessError,
    MemoryConflictError,
    MemoryCorruptionError,
    MemoryManager,
    MemoryManagerError,
    MemoryReadError,
    MemoryUnsupportedError,
    build_memory_manager,
)
from deerflow.cli import memory_cmd, memory_render, memory_session
from deerflow.cli.app import app
from deerflow.config import load_config
from tests.postgres_server import postgres_backend_config

REPO_ROOT = Path(__file__).resolve().parents[1]
SECRET_CONTENT = "my api key is sk-proj-4fG7hK2mN9pQ3rS8tV1wX6yZ0aB5cD"
WIDE = {"COLUMNS": "200"}


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(
        "memory:\n  manager_class: deermem\n  backend_config:\n"
        f"    storage_path: {tmp_path / 'store'}\n",
        encoding="utf-8",
    )
    return path


@pytest.fixture
def library(config_file: Path) -> Iterator[MemoryManager]:
    """A manager of its own on the same storage: how the tests see what a command did."""
    manager = build_memory_manager(load_config(config_file).memory)
    yield manager
    manager.close()


@pytest.fixture
def run(config_file: Path) -> Any:
    def invoke(*args: str, input: str | None = None) -> Result:
        return CliRunner().invoke(
            app, ["memory", *args, "-c", str(config_file)], input=input, env=WIDE
        )

    return invoke


def contents(library: MemoryManager, agent: str | None = None, user: str = "default") -> set[str]:
    document = library.get_memory(user_id=user, agent_name=agent)
    return {fact["content"] for fact in document["facts"]}


def summaries(**texts: str) -> dict[str, Any]:
    """A document with these summary sections and no facts."""
    user = ("workContext", "personalContext", "topOfMind")
    history = ("recentMonths", "earlierContext", "longTermBackground")
    return {
        "user": {name: {"summary": texts.get(name, "")} for name in user},
        "history": {name: {"summary": texts.get(name, "")} for name in history},
        "facts": [],
    }


def add(library: MemoryManager, content: str, agent: str | None = None, **kw: Any) -> str:
    _, fact_id = library.create_fact(content, agent_name=agent, **kw)
    assert fact_id is not None
    return fact_id


# -- reading --------------------------------------------------------------------------------------


def test_show_prints_summaries_and_facts_as_written(run: Any, library: MemoryManager) -> None:
    library.import_memory(summaries(workContext="Data engineer on a Kafka pipeline"))
    fact_id = add(library, "Writes [bold]not markup[/bold] in notes", category="preference")

    result = run("show")

    assert result.exit_code == 0, result.output
    assert "Data engineer on a Kafka pipeline" in result.output
    assert fact_id in result.output, "ids are shown in full"
    assert "[bold]not markup[/bold]" in result.output, "stored text is escaped, not rendered"


def test_show_json_is_the_library_document(run: Any, library: MemoryManager) -> None:
    add(library, "Prefers uv over pip")
    add(library, "Reviews code for the infra team", agent="reviewer")

    result = run("show", "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == library.get_memory()
    reviewer = json.loads(run("show", "--json", "--agent", "reviewer").stdout)
    assert [f["content"] for f in reviewer["facts"]] == ["Reviews code for the infra team"]


def test_a_narrow_terminal_keeps_ids_whole(library: MemoryManager) -> None:
    fact_id = add(library, "Prefers uv over pip")
    terminal = Console(file=io.StringIO(), width=80, force_terminal=True)
    terminal.print(memory_render.document_view(library.get_memory(), user="default", agent=None))
    shown = terminal.file.getvalue()  # type: ignore[attr-defined]
    assert fact_id in shown
    assert "Prefers uv over pip" in shown


def test_search_filters_by_category_and_limits(run: Any, library: MemoryManager) -> None:
    add(library, "Deploys services with Kubernetes", category="knowledge")
    add(library, "Prefers Kubernetes over Nomad", category="preference")
    add(library, "Likes tea")

    everything = json.loads(run("search", "Kubernetes", "--json").stdout)
    preferences = json.loads(
        run("search", "Kubernetes", "--category", "preference", "--json").stdout
    )
    one = json.loads(run("search", "Kubernetes", "--limit", "1", "--json").stdout)

    assert {f["content"] for f in everything} == {
        "Deploys services with Kubernetes",
        "Prefers Kubernetes over Nomad",
    }
    assert all({"id", "content", "category", "confidence", "score"} <= set(f) for f in everything)
    assert [f["content"] for f in preferences] == ["Prefers Kubernetes over Nomad"]
    assert len(one) == 1
    table = run("search", "Kubernetes")
    assert table.exit_code == 0, table.output
    assert "Prefers Kubernetes over Nomad" in table.output


# -- single facts ---------------------------------------------------------------------------------


def test_facts_add_stores_the_fact(run: Any, library: MemoryManager) -> None:
    result = run(
        "facts", "add", "Prefers pnpm", "--category", "preference", "--confidence", "0.9", "--json"
    )

    assert result.exit_code == 0, result.output
    output = json.loads(result.stdout)
    stored = library.get_memory()["facts"]
    assert output["fact_id"] == stored[0]["id"]
    assert output["fact"] == stored[0]
    assert output["revision"] == library.get_memory()["revision"] == 1  # as every write answers
    assert (stored[0]["content"], stored[0]["category"], stored[0]["confidence"]) == (
        "Prefers pnpm",
        "preference",
        0.9,
    )


def test_facts_add_goes_to_the_selected_agent_and_user(run: Any, library: MemoryManager) -> None:
    result = run("facts", "add", "Reviews Go code", "--agent", "reviewer", "--user", "alice")
    assert result.exit_code == 0, result.output
    assert contents(library, "reviewer", user="alice") == {"Reviews Go code"}
    assert contents(library, user="alice") == set()
    assert contents(library, "reviewer") == set()


def test_facts_edit_changes_only_the_given_fields(run: Any, library: MemoryManager) -> None:
    fact_id = add(library, "Uses vim", category="preference", confidence=0.6)

    result = run("facts", "edit", fact_id, "--content", "Uses neovim", "--json")

    assert result.exit_code == 0, result.output
    (fact,) = library.get_memory()["facts"]
    assert (fact["content"], fact["category"], fact["confidence"]) == (
        "Uses neovim",
        "preference",
        0.6,
    )
    assert json.loads(result.stdout)["fact"] == fact
    assert run("facts", "edit", fact_id, "--confidence", "0.95").exit_code == 0
    assert library.get_memory()["facts"][0]["confidence"] == 0.95


def test_facts_edit_without_changes_is_invalid_input(run: Any, library: MemoryManager) -> None:
    fact_id = add(library, "Uses vim")
    result = run("facts", "edit", fact_id)
    assert result.exit_code == 2
    assert "invalid input: nothing to change" in result.stderr


def test_facts_rm_with_yes_deletes(run: Any, library: MemoryManager) -> None:
    keep = add(library, "Keep me")
    gone = add(library, "Delete me")

    result = run("facts", "rm", gone, "--yes", "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"deleted": gone, "revision": 3}
    assert [f["id"] for f in library.get_memory()["facts"]] == [keep]


def test_a_write_at_a_stale_expected_revision_changes_nothing(
    run: Any, library: MemoryManager
) -> None:
    fact_id = add(library, "Uses vim")
    seen = library.get_memory()["revision"]
    add(library, "Written by someone else meanwhile")
    stale = ("--expected-revision", str(seen))

    edited = run("facts", "edit", fact_id, "--content", "Uses neovim", *stale)
    removed = run("facts", "rm", fact_id, "--yes", *stale)
    cleared = run("clear", "--yes", *stale)
    added = run("facts", "add", "Uses tmux", *stale)

    for result in (edited, removed, cleared, added):
        assert result.exit_code == 4, result.output
        assert "conflict" in result.stderr
    assert contents(library) == {"Uses vim", "Written by someone else meanwhile"}
    current = str(library.get_memory()["revision"])
    result = run("facts", "edit", fact_id, "--content", "Uses neovim", "--json", "-n", current)
    assert result.exit_code == 2  # no short form: a revision is never typed by accident
    result = run(
        "facts",
        "edit",
        fact_id,
        "--content",
        "Uses neovim",
        "--json",
        "--expected-revision",
        current,
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["revision"] == int(current) + 1
    added = run("facts", "add", "Uses tmux", "--json", "--expected-revision", str(int(current) + 1))
    assert added.exit_code == 0, added.output
    assert "Uses tmux" in contents(library)


# -- errors by type -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "exit_code", "code"),
    [
        (("facts", "edit", "fact_0123456789abcdef", "--content", "x"), 3, "fact_not_found"),
        (("facts", "rm", "fact_0123456789abcdef", "--yes"), 3, "fact_not_found"),
        (("facts", "add", "Prefers uv over pip"), 4, "duplicate_fact"),
        (("facts", "add", SECRET_CONTENT), 2, "invalid_input"),
        (("facts", "add", "x y z", "--category", "gossip"), 2, "invalid_input"),
        (("facts", "add", "x y z", "--confidence", "1.5"), 2, "invalid_input"),
        (("facts", "edit", "not-a-fact-id", "--content", "x"), 2, "invalid_input"),
        (("show", "--agent", "bad name!"), 2, "invalid_input"),
        (("revert", "chg_nope", "--yes"), 2, "invalid_input"),
    ],
)
def test_errors_exit_by_type(
    run: Any, library: MemoryManager, args: tuple[str, ...], exit_code: int, code: str
) -> None:
    add(library, "Prefers uv over pip")
    before = library.get_memory()

    plain = run(*args)
    as_json = run(*args, "--json")

    assert plain.exit_code == exit_code, plain.output
    assert plain.stdout == ""
    assert len(plain.stderr.strip().splitlines()) == 1, "one line on stderr"
    assert as_json.exit_code == exit_code
    error = json.loads(as_json.stdout)
    assert set(error) == {"error", "detail"}
    assert error["error"] == code
    assert library.get_memory() == before, "nothing changed"
    assert "sk-proj-4fG7" not in plain.stderr + as_json.stdout


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("search", "uv", "--limit", "0"), "--limit"),
        (("history", "--limit", "0"), "--limit"),
        (("audit", "--stale-days", "0"), "--stale-days"),
        (("audit", "--similarity", "1.5"), "--similarity"),
    ],
)
def test_an_option_out_of_range_is_named_as_typed(
    run: Any, args: tuple[str, ...], option: str
) -> None:
    """The error names the option the user typed, not the library parameter behind it."""
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{option}'" in " ".join(result.stderr.split())


def test_reindex_on_a_backend_without_it_exits_5(tmp_path: Path) -> None:
    config = tmp_path / "inmemory.yaml"
    config.write_text("memory:\n  manager_class: inmemory\n", encoding="utf-8")

    result = CliRunner().invoke(app, ["memory", "reindex", "-c", str(config)])
    as_json = CliRunner().invoke(app, ["memory", "reindex", "--json", "-c", str(config)])

    assert result.exit_code == 5
    assert "does not support 'reindex'" in result.stderr
    assert as_json.exit_code == 5
    assert json.loads(as_json.stdout)["error"] == "unsupported"


def test_a_broken_install_without_its_embedding_model_is_a_memory_error(
    config_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deerflow.agents.memory.backends.deermem.deermem.embeddings import Embedder

    monkeypatch.setattr(Embedder.__init__, "__defaults__", (tmp_path / "deleted-model",))
    plain = CliRunner().invoke(app, ["memory", "show", "-c", str(config_file)], env=WIDE)
    as_json = CliRunner().invoke(app, ["memory", "show", "--json", "-c", str(config_file)])

    assert plain.exit_code == 1
    assert plain.stderr.startswith("memory error: embedding model not found in ")
    assert "reinstall the package" in plain.stderr
    assert "Traceback" not in plain.output
    assert as_json.exit_code == 1
    assert json.loads(as_json.stdout)["error"] == "memory_error"


def test_a_bad_config_is_invalid_config(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("memory:\n  manager_class: no-such-backend\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["memory", "show", "-c", str(config)])
    as_json = CliRunner().invoke(app, ["memory", "show", "--json", "-c", str(config)])
    assert result.exit_code == 2
    assert "Refusing to fall back" in result.stderr
    assert as_json.exit_code == 2
    assert json.loads(as_json.stdout)["error"] == "invalid_config"


def _memory_error_types() -> list[type[Exception]]:
    found: list[type[Exception]] = []
    pending: list[type[Exception]] = [MemoryManagerError]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


@pytest.mark.parametrize(
    ("error", "exit_code"),
    [
        (ValueError("bad"), 2),
        (FactNotFoundError("fact_00000000"), 3),
        (DuplicateFactError("same"), 4),
        (FactEvictedError("evicted"), 4),
        (MemoryConflictError("raced"), 4),
        (MemoryUnsupportedError("X", "op"), 5),
        (MemoryCorruptionError("broken"), 6),
        (MemoryReadError("down"), 1),
        (MemoryAccessError("nope"), 1),
        (MemoryManagerError("other"), 1),
    ],
)
def test_handle_errors_maps_by_type(error: Exception, exit_code: int) -> None:
    with pytest.raises(typer.Exit) as raised, memory_session.handle_errors(json_output=False):
        raise error
    assert raised.value.exit_code == exit_code


def test_every_memory_error_type_has_an_exit_code() -> None:
    for cls in _memory_error_types():
        assert memory_session.error_exit(cls.__new__(cls)) is not None, cls.__name__


def test_unknown_errors_are_not_swallowed() -> None:
    with pytest.raises(ZeroDivisionError), memory_session.handle_errors(json_output=True):
        raise ZeroDivisionError


# -- confirmation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("facts", "rm", "{fact_id}"),
        ("import", "{export}"),
        ("clear",),
        ("clear", "--agent", "writer"),
        ("revert", "{change_id}"),
    ],
)
def test_destructive_commands_refuse_without_yes_and_a_terminal(
    run: Any, library: MemoryManager, tmp_path: Path, args: tuple[str, ...]
) -> None:
    fact_id = add(library, "Prefers uv over pip")
    export = tmp_path / "export.json"
    export.write_text(json.dumps(summaries()), encoding="utf-8")
    change_id = library.get_history()[0]["change_id"]
    before = library.get_memory()
    history = library.get_history()
    filled = [a.format(fact_id=fact_id, export=export, change_id=change_id) for a in args]

    result = run(*filled)

    assert result.exit_code == 1, result.output
    assert "pass --yes" in result.stderr
    assert library.get_memory() == before
    assert library.get_history() == history


def test_a_real_process_with_an_open_pipe_refuses_instead_of_waiting(
    config_file: Path, library: MemoryManager, tmp_path: Path
) -> None:
    """stdin is a pipe nobody writes to: a prompt would wait forever; the command refuses."""
    fact_id = add(library, "Prefers uv over pip")
    stderr = tmp_path / "stderr.txt"
    with stderr.open("wb") as err:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "deerflow",
                "memory",
                "facts",
                "rm",
                fact_id,
                "-c",
                str(config_file),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=tmp_path,
        )
        try:
            assert process.wait(timeout=60) == 1
        finally:
            process.kill()
            assert process.stdin is not None
            process.stdin.close()
    assert "pass --yes" in stderr.read_text(encoding="utf-8")
    assert contents(library) == {"Prefers uv over pip"}


def test_a_person_at_a_terminal_is_asked(
    run: Any, library: MemoryManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory_session, "stdin_is_interactive", lambda: True)
    fact_id = add(library, "Prefers uv over pip")

    declined = run("facts", "rm", fact_id, input="n\n")
    assert declined.exit_code == 1
    assert contents(library) == {"Prefers uv over pip"}

    accepted = run("facts", "rm", fact_id, input="y\n")
    assert accepted.exit_code == 0, accepted.output
    assert f"Delete {fact_id}?" in accepted.stderr, "the prompt goes to stderr"
    assert contents(library) == set()


# -- whole buckets --------------------------------------------------------------------------------


def test_export_json_to_stdout_and_to_a_file(
    run: Any, library: MemoryManager, tmp_path: Path
) -> None:
    add(library, "Prefers uv over pip")
    to_stdout = run("export")
    assert to_stdout.exit_code == 0, to_stdout.output
    assert json.loads(to_stdout.stdout) == library.export_memory()

    target = tmp_path / "memory.json"
    to_file = run("export", "--output", str(target), "--json")
    assert to_file.exit_code == 0, to_file.output
    assert json.loads(to_file.stdout) == {"format": "json", "output": str(target), "facts": 1}
    assert json.loads(target.read_text(encoding="utf-8")) == library.export_memory()


def test_export_markdown_needs_a_new_folder(run: Any, tmp_path: Path) -> None:
    assert run("export", "--format", "markdown").exit_code == 2
    used = tmp_path / "used"
    used.mkdir()
    (used / "old.md").write_text("stale", encoding="utf-8")
    result = run("export", "--format", "markdown", "--output", str(used))
    assert result.exit_code == 2
    assert "new or empty folder" in result.stderr


@pytest.mark.parametrize("fmt", ["json", "markdown"])
def test_export_clear_import_round_trip(
    run: Any, library: MemoryManager, tmp_path: Path, fmt: str
) -> None:
    library.import_memory(summaries(workContext="Platform team", recentMonths="Moved to Berlin"))
    add(library, "Prefers uv over pip", category="preference", confidence=0.9)
    add(library, "Uses [brackets] in names", category="knowledge")
    original = library.export_memory()
    target = tmp_path / ("export.json" if fmt == "json" else "export")

    exported = run("export", "--format", fmt, "--output", str(target))
    cleared = run("clear", "--yes")
    assert (exported.exit_code, cleared.exit_code) == (0, 0), exported.output + cleared.output
    assert library.get_memory()["facts"] == []
    imported = run("import", str(target), "--yes", "--json")

    assert imported.exit_code == 0, imported.output
    restored = library.export_memory()
    assert restored["facts"] == original["facts"]
    for part in ("user", "history"):
        assert {k: v["summary"] for k, v in restored[part].items()} == {
            k: v["summary"] for k, v in original[part].items()
        }
    assert json.loads(imported.stdout) == restored


def test_import_rejects_an_invalid_document(
    run: Any, library: MemoryManager, tmp_path: Path
) -> None:
    add(library, "Prefers uv over pip")
    before = library.get_memory()
    broken = tmp_path / "broken.json"
    broken.write_text('{"facts": [{"content": ""}]}', encoding="utf-8")
    not_json = tmp_path / "not.json"
    not_json.write_text("{", encoding="utf-8")

    assert run("import", str(broken), "--yes").exit_code == 2
    assert run("import", str(not_json), "--yes").exit_code == 2
    assert library.get_memory() == before


@pytest.mark.parametrize(
    ("content", "why"),
    [(b"not json\n", "Expecting value"), (b"", "Expecting value"), (b"\xff\xfe{", "utf-8")],
)
def test_import_of_a_file_that_is_not_json_names_the_file(
    run: Any, library: MemoryManager, tmp_path: Path, content: bytes, why: str
) -> None:
    add(library, "Prefers uv over pip")
    before = library.get_memory()
    path = tmp_path / "notes.txt"
    path.write_bytes(content)

    # Without --yes and a terminal: told about the file, not asked to confirm first.
    plain = run("import", str(path))
    as_json = run("import", str(path), "--json")

    assert plain.exit_code == 2, plain.output
    assert plain.stderr.strip().splitlines() == [plain.stderr.strip()]
    assert f"{path}: not a JSON document" in plain.stderr
    assert why in plain.stderr
    assert json.loads(as_json.stdout)["error"] == "invalid_input"
    assert library.get_memory() == before


def test_import_of_the_memory_json_of_a_markdown_export_is_refused(
    run: Any, library: MemoryManager, tmp_path: Path
) -> None:
    """The folder's memory.json holds the summaries only: importing it alone would delete every
    fact of the bucket."""
    add(library, "Prefers uv over pip")
    folder = tmp_path / "backup"
    assert run("export", "--format", "markdown", "--output", str(folder)).exit_code == 0
    before = library.get_memory()

    result = run("import", str(folder / "memory.json"), "--yes")

    assert result.exit_code == 2, result.output
    assert f"import the folder {folder}" in result.stderr
    assert library.get_memory() == before
    assert run("import", str(folder), "--yes").exit_code == 0


def test_one_fact_is_counted_in_the_singular(
    run: Any, library: MemoryManager, tmp_path: Path
) -> None:
    add(library, "Prefers uv over pip")
    target = tmp_path / "one.json"

    shown = run("show").stdout
    exported = run("export", "--output", str(target)).stdout
    imported = run("import", str(target), "--yes").stdout
    reindexed = run("reindex").stdout

    assert "· 1 fact\n" in shown
    assert exported.startswith("exported 1 fact to ")
    assert imported.startswith("imported 1 fact (revision ")
    assert reindexed.startswith("reindexed 1 fact in ")


def test_clear_with_an_agent_clears_only_that_bucket(run: Any, library: MemoryManager) -> None:
    library.import_memory(summaries(workContext="Platform team"))
    add(library, "Default bucket fact")
    add(library, "Reviewer fact", agent="reviewer")
    add(library, "Writer fact", agent="writer")

    assert run("clear", "--agent", "reviewer", "--yes").exit_code == 0
    assert contents(library, "reviewer") == set()
    assert contents(library, "writer") == {"Writer fact"}
    assert contents(library) == {"Default bucket fact"}
    assert library.get_memory()["user"]["workContext"]["summary"] == "Platform team"


def test_clear_without_an_agent_clears_every_bucket_and_the_summaries(
    run: Any, library: MemoryManager
) -> None:
    library.import_memory(summaries(workContext="Platform team"))
    add(library, "Default bucket fact")
    add(library, "Writer fact", agent="writer")
    add(library, "Other user's fact", agent="writer", user_id="bob")

    result = run("clear", "--yes", "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["facts"] == []
    assert contents(library) == contents(library, "writer") == set()
    assert library.get_memory()["user"]["workContext"]["summary"] == ""
    assert contents(library, "writer", user="bob") == {"Other user's fact"}


# -- history and undo -----------------------------------------------------------------------------


def test_history_then_revert_restores_a_deleted_fact(run: Any, library: MemoryManager) -> None:
    fact_id = add(library, "Prefers uv over pip", category="preference", confidence=0.9)
    original = library.get_memory()["facts"]
    assert run("facts", "rm", fact_id, "--yes").exit_code == 0

    history = run("history", "--json")
    assert history.exit_code == 0, history.output
    entries = json.loads(history.stdout)
    assert entries == library.get_history(limit=20)
    latest = entries[0]
    assert {"change_id", "at", "actor", "reason", "before", "after"} <= set(latest)
    assert [f["id"] for f in latest["before"]["facts"]] == [fact_id]
    table = run("history")
    assert latest["change_id"] in table.output
    assert "Removed: Prefers uv over pip" in table.output

    reverted = run("revert", latest["change_id"], "--yes", "--json")

    assert reverted.exit_code == 0, reverted.output
    assert json.loads(reverted.stdout)["reverts"] == latest["change_id"]
    restored = library.get_memory()["facts"]
    assert [{k: f[k] for k in ("id", "content", "category", "confidence")} for f in restored] == [
        {k: f[k] for k in ("id", "content", "category", "confidence")} for f in original
    ]
    assert len(json.loads(run("history", "--limit", "1", "--json").stdout)) == 1


# -- maintenance ----------------------------------------------------------------------------------


def test_reindex_rebuilds_and_reports(run: Any, library: MemoryManager) -> None:
    add(library, "Deploys services with Kubernetes")
    add(library, "Reviews Go code", agent="reviewer")

    as_json = run("reindex", "--json")
    plain = run("reindex")

    assert as_json.exit_code == 0, as_json.output
    report = json.loads(as_json.stdout)
    assert report["facts"] == 2
    assert report["seconds"] >= 0
    assert "reindexed 2 facts" in plain.stdout
    assert [f["content"] for f in library.search("Kubernetes")] == [
        "Deploys services with Kubernetes"
    ]


@pytest.mark.parametrize("reindex", [True, False], ids=["reindexed", "lazily"])
@pytest.mark.parametrize("storage", ["files", "postgres"])
def test_a_store_written_without_embeddings_is_searched_by_meaning_once_they_are_on(
    storage: str, reindex: bool, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Vectors come by `deerflow memory reindex` ahead of time, or by the first search."""
    backend: dict[str, Any] = {"storage_path": str(tmp_path / "store")}
    if storage == "postgres":
        from tests.postgres_server import postgres_backend_config

        url = request.getfixturevalue("postgres_url")
        backend = postgres_backend_config(url, tmp_path / "store")

    def config(embeddings: bool) -> Path:
        path = tmp_path / f"embeddings-{embeddings}.yaml"
        settings = backend | {"retrieval_embeddings": embeddings}
        path.write_text(
            json.dumps({"memory": {"manager_class": "deermem", "backend_config": settings}}),
            encoding="utf-8",
        )
        return path

    before = build_memory_manager(load_config(config(False)).memory)
    before.create_fact("Prefers pnpm over npm")
    assert before.search("package manager") == []
    before.close()

    hybrid = config(True)
    if reindex:
        result = CliRunner().invoke(app, ["memory", "reindex", "--json", "-c", str(hybrid)])
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["facts"] == 1
    after = build_memory_manager(load_config(hybrid).memory)
    try:
        assert [f["content"] for f in after.search("package manager")] == ["Prefers pnpm over npm"]
    finally:
        after.close()


def test_audit_reports_every_bucket_of_the_user(run: Any, library: MemoryManager) -> None:
    first = add(library, "Prefers uv over pip for Python projects", category="preference")
    second = add(library, "Prefers uv over pip for all Python projects", category="preference")
    add(library, "Reviews Go code", agent="reviewer")
    add(library, "Someone else's fact", user_id="bob")

    result = run("audit", "--json")

    assert result.exit_code == 0, result.output
    reports = json.loads(result.stdout)
    assert [(r["bucket"], r["total"]) for r in reports] == [("__default__", 2), ("reviewer", 1)]
    default = reports[0]
    assert {"exact_duplicates", "near_duplicates", "stale", "secrets", "without_provenance"} <= set(
        default
    )
    assert default["near_duplicates"]["pairs"][0]["ids"] == sorted([first, second])
    assert default["secrets"]["count"] == 0
    table = run("audit")
    assert table.exit_code == 0, table.output
    assert "reviewer" in table.output
    assert first in table.output, "the ids behind a finding are listed"


def test_audit_of_an_empty_user_is_one_empty_bucket(run: Any) -> None:
    result = run("audit", "--json", "--user", "nobody")
    assert result.exit_code == 0, result.output
    assert [(r["bucket"], r["total"]) for r in json.loads(result.stdout)] == [("__default__", 0)]


def test_audit_on_another_backend_exits_5(tmp_path: Path) -> None:
    config = tmp_path / "inmemory.yaml"
    config.write_text("memory:\n  manager_class: inmemory\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["memory", "audit", "-c", str(config)])
    assert result.exit_code == 5


LEGACY = {
    "version": "1.0",
    "lastUpdated": "2025-03-01T08:00:00Z",
    "user": {"workContext": {"summary": "Old work context", "updatedAt": "2025-03-01T08:00:00Z"}},
    "history": {},
    "facts": [
        {
            "id": "fact_1a2b3c4d",
            "content": "Prefers uv over pip",
            "category": "preference",
            "confidence": 0.9,
            "createdAt": "2025-03-01T08:00:00Z",
            "source": "thread-1",
        }
    ],
}


@pytest.fixture
def legacy_root(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    root.mkdir(parents=True, exist_ok=True)
    (root / "memory.json").write_text(json.dumps(LEGACY), encoding="utf-8")
    return root


def test_migrate_dry_run_changes_nothing(run: Any, legacy_root: Path) -> None:
    def memory_files() -> list[tuple[Path, bytes]]:
        # Building the manager creates the retrieval index; only memory files matter here.
        files = (p for p in legacy_root.rglob("*") if ".retrieval" not in p.parts and p.is_file())
        return sorted((p.relative_to(legacy_root), p.read_bytes()) for p in files)

    before = memory_files()

    result = run("migrate", "--dry-run", "--json")

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["dry_run"] is True
    assert report["ok"] is True
    assert [(u["user_id"], u["facts"]) for u in report["users"]] == [("default", 1)]
    assert memory_files() == before


def test_migrate_refuses_without_yes_then_migrates(run: Any, legacy_root: Path) -> None:
    refused = run("migrate")
    assert refused.exit_code == 1
    assert (legacy_root / "memory.json").is_file()
    assert not (legacy_root / "memory.json.v1.bak").exists()

    result = run("migrate", "--yes")

    assert result.exit_code == 0, result.output
    assert (legacy_root / "memory.json.v1.bak").is_file()
    assert not (legacy_root / "memory.json").exists()


def test_migrate_is_visible_through_the_library(
    run: Any, legacy_root: Path, library: MemoryManager
) -> None:
    assert run("migrate", "--yes").exit_code == 0
    assert contents(library) == {"Prefers uv over pip"}
    assert library.get_memory()["user"]["workContext"]["summary"] == "Old work context"
    assert run("migrate", "--yes").stdout.strip() == "nothing to migrate"


def test_migrate_on_another_backend_exits_5(tmp_path: Path) -> None:
    config = tmp_path / "inmemory.yaml"
    config.write_text("memory:\n  manager_class: inmemory\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["memory", "migrate", "--dry-run", "-c", str(config)])
    assert result.exit_code == 5


def test_migrate_on_postgres_exits_5_naming_the_storage(postgres_url: str, tmp_path: Path) -> None:
    """Legacy files are migrated on the files engine, then copied; the message says which
    setting refuses, not an internal class."""
    config = tmp_path / "postgres.yaml"
    backend = postgres_backend_config(postgres_url, tmp_path / "cache")
    config.write_text(yaml.safe_dump({"memory": {"backend_config": backend}}), encoding="utf-8")

    result = CliRunner().invoke(app, ["memory", "migrate", "--dry-run", "-c", str(config)])

    assert result.exit_code == 5
    assert "storage: postgres" in result.stderr
    assert "Engine" not in result.stderr


# -- documentation --------------------------------------------------------------------------------


def memory_commands() -> dict[str, Any]:
    """Every leaf command under `deerflow memory` by name, e.g. `deerflow memory facts add`."""
    commands: dict[str, Any] = {}

    def walk(command: Any, path: str) -> None:
        children = getattr(command, "commands", None)
        if not children:
            commands[path] = command
        for name, child in (children or {}).items():
            walk(child, f"{path} {name}")

    walk(typer.main.get_command(memory_cmd.app), "deerflow memory")
    return commands


def test_every_memory_command_is_documented() -> None:
    docs = (REPO_ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    names = list(memory_commands())
    assert len(names) >= 13
    missing = [name for name in names if f"`{name}" not in docs]
    assert not missing, f"undocumented in docs/cli.md: {missing}"


def test_every_command_with_expected_revision_is_named_where_the_docs_explain_it() -> None:
    docs = (REPO_ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    explained = next(
        line for line in docs.splitlines() if line.startswith("`--expected-revision N`")
    )
    explained += " `facts edit`"  # the section it is explained in
    taking = [
        name.removeprefix("deerflow memory ")
        for name, command in memory_commands().items()
        if any(param.name == "expected_revision" for param in command.params)
    ]
    assert len(taking) >= 5
    missing = [name for name in taking if f"`{name}`" not in explained]
    assert not missing, f"docs/cli.md does not say these take --expected-revision: {missing}"


def test_every_error_code_is_in_the_exit_code_table() -> None:
    """Scripts reading `--json` errors find each `error` value, with its exit code, in the docs."""
    docs = (REPO_ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    documented = {
        (int(row[0]), code)
        for row in re.findall(r"^\| (\d) \| ([^|]*) \|", docs, flags=re.MULTILINE)
        for code in re.findall(r"`(\w+)`", row[1])
    }
    missing = [
        (exit_.exit_code, exit_.code)
        for _, exit_ in memory_session.ERROR_EXITS
        if (exit_.exit_code, exit_.code) not in documented
    ]
    assert not missing, f"not in the exit code table of docs/cli.md: {missing}"


def test_facts_add_at_capacity_names_the_facts_it_evicted(
    tmp_path: Path, config_file: Path
) -> None:
    config_file.write_text(config_file.read_text() + "    max_facts: 10\n", encoding="utf-8")
    manager = build_memory_manager(load_config(config_file).memory)
    for n in range(10):
        manager.create_fact(f"Uses tool number {n}", confidence=0.5 + n / 100)
    manager.close()

    def run(*args: str) -> Result:
        return CliRunner().invoke(app, ["memory", *args, "-c", str(config_file)], env=WIDE)

    result = run("facts", "add", "Prefers pnpm", "--confidence", "0.9", "--json")
    assert result.exit_code == 0, result.output
    [evicted] = json.loads(result.stdout)["evicted"]
    assert evicted["content"] == "Uses tool number 0"
    result = run("facts", "add", "Prefers uv", "--confidence", "0.9")
    assert result.exit_code == 0, result.output
    assert "evicted fact_" in result.stdout
    assert "Uses tool number 1" in result.stdout


def test_messages_stay_one_line_when_output_is_not_a_terminal(config_file: Path) -> None:
    long_content = "Prefers " + "very " * 30 + "long facts"
    narrow = {"COLUMNS": "80"}
    result = CliRunner().invoke(
        app,
        ["memory", "facts", "add", long_content, "--category", "gossip", "-c", str(config_file)],
        env=narrow,
    )
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_migrate_counts_the_users_it_migrated(
    config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done: list[int] = []

    @contextlib.contextmanager
    def recorder(description: str, *, enabled: bool) -> Iterator[Any]:
        yield done.append

    monkeypatch.setattr(memory_cmd.render, "progress_bar", recorder)
    store = config_file.parent / "store"
    for agent in ("coder", "writer"):
        legacy = store / "agents" / agent / "memory.json"
        legacy.parent.mkdir(parents=True)
        legacy.write_text(json.dumps({"facts": [{"content": f"{agent} fact", "confidence": 0.8}]}))
    (store / "memory.json").write_text(
        json.dumps({"facts": [{"content": "root fact", "confidence": 0.8}]})
    )
    result = CliRunner().invoke(
        app, ["memory", "migrate", "--yes", "-c", str(config_file)], env=WIDE
    )
    assert result.exit_code == 0, result.output
    assert done == [1]  # all three files belong to the default user


def test_clear_of_a_user_with_nothing_stored_says_so(run: Any, library: MemoryManager) -> None:
    result = run("clear", "--yes", "--user", "nobody")
    assert result.exit_code == 0, result.output
    assert result.stdout == "nothing to clear: nobody has no memory\n"
    result = run("clear", "--yes", "--user", "nobody", "--agent", "coder")
    assert result.stdout == "nothing to clear: agent coder of nobody has no facts\n"
    add(library, "Uses zsh", user_id="somebody")
    result = run("clear", "--yes", "--user", "somebody")
    assert "cleared ALL memory of somebody" in result.stdout


# -- listing, showing, id prefixes ---------------------------------------------------------------


def fact_with_id(hex_digits: str, content: str, **fields: Any) -> dict[str, Any]:
    return {"id": f"fact_{hex_digits}", "content": content, **fields}


def test_facts_list_filters_by_category_and_limits(run: Any, library: MemoryManager) -> None:
    add(library, "Prefers uv over pip", category="preference", confidence=0.9)
    add(library, "Prefers tabs", category="preference", confidence=0.6)
    add(library, "Works on the data platform", category="context", confidence=0.8)
    add(library, "Reviews Go code", agent="reviewer")

    everything = json.loads(run("facts", "list", "--json").stdout)
    preferences = json.loads(run("facts", "list", "--category", "preference", "--json").stdout)
    top = json.loads(run("facts", "list", "-n", "1", "--json").stdout)
    reviewer = json.loads(run("facts", "list", "--agent", "reviewer", "--json").stdout)

    assert [f["content"] for f in everything] == [
        "Prefers uv over pip",
        "Works on the data platform",
        "Prefers tabs",
    ], "most confident first"
    assert everything == sorted(library.get_memory()["facts"], key=lambda f: -f["confidence"])
    assert [f["content"] for f in preferences] == ["Prefers uv over pip", "Prefers tabs"]
    assert [f["content"] for f in top] == ["Prefers uv over pip"]
    assert [f["content"] for f in reviewer] == ["Reviews Go code"]
    table = run("facts", "list")
    assert table.exit_code == 0, table.output
    assert "Works on the data platform" in table.stdout
    assert run("facts", "list", "--user", "nobody").stdout.strip() == "(no facts)"
    unknown = run("facts", "list", "--category", "gossip")
    assert unknown.exit_code == 2
    assert "gossip" in unknown.stderr


def test_facts_show_prints_the_whole_fact(run: Any, library: MemoryManager) -> None:
    extra = {"topics": ["python", "packaging"], "expected_valid_days": 30}
    library.import_memory(
        {"facts": [fact_with_id("ab" * 16, "Prefers uv over pip", **extra, confidence=0.9)]}
    )
    (stored,) = library.get_memory()["facts"]

    as_json = run("facts", "show", stored["id"], "--json")
    plain = run("facts", "show", stored["id"])

    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout) == stored
    assert stored["topics"] == ["python", "packaging"], "front-matter fields come along"
    assert plain.exit_code == 0, plain.output
    rows = {
        line.split(maxsplit=1)[0]: line.split(maxsplit=1)[1] for line in plain.stdout.splitlines()
    }
    assert rows["content"] == "Prefers uv over pip"
    assert rows["confidence"] == "0.9"
    assert rows["expected_valid_days"] == "30"
    assert rows["topics"] == '["python", "packaging"]'
    missing = run("facts", "show", "fact_" + "cd" * 16, "--json")
    assert missing.exit_code == 3
    assert json.loads(missing.stdout)["error"] == "fact_not_found"


@pytest.fixture
def similar_ids(library: MemoryManager) -> dict[str, str]:
    """Three facts: two whose ids share the prefix `abcd12`, one starting `9f00`."""
    ids = {"first": "abcd12" + "0" * 26, "second": "abcd12" + "1" * 26, "other": "9f00" + "2" * 28}
    library.import_memory(
        {"facts": [fact_with_id(hex_id, f"Fact {name}") for name, hex_id in ids.items()]}
    )
    return {name: f"fact_{hex_id}" for name, hex_id in ids.items()}


@pytest.mark.parametrize("prefix", ["9f00", "fact_9f00", "9f0022"])
def test_a_unique_fact_id_prefix_resolves(
    run: Any, library: MemoryManager, similar_ids: dict[str, str], prefix: str
) -> None:
    shown = run("facts", "show", prefix, "--json")
    edited = run("facts", "edit", prefix, "--content", "Fact other, edited")

    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["id"] == similar_ids["other"]
    assert edited.exit_code == 0, edited.output
    assert f"updated {similar_ids['other']}" in edited.stdout
    assert contents(library) == {"Fact first", "Fact second", "Fact other, edited"}
    assert run("facts", "rm", prefix, "--yes").exit_code == 0
    assert contents(library) == {"Fact first", "Fact second"}


@pytest.mark.parametrize(
    "args",
    [
        ("facts", "show", "abcd"),
        ("facts", "edit", "fact_abcd12", "--content", "x y"),
        ("facts", "rm", "abcd1", "--yes"),
    ],
)
def test_an_ambiguous_fact_id_prefix_is_refused_with_the_candidates(
    run: Any, library: MemoryManager, similar_ids: dict[str, str], args: tuple[str, ...]
) -> None:
    before = library.get_memory()

    plain = run(*args)
    as_json = run(*args, "--json")

    assert plain.exit_code == 2, plain.output
    assert "ambiguous" in plain.stderr
    assert similar_ids["first"] in plain.stderr
    assert similar_ids["second"] in plain.stderr
    assert similar_ids["other"] not in plain.stderr
    assert len(plain.stderr.strip().splitlines()) == 1
    assert json.loads(as_json.stdout)["error"] == "ambiguous_id"
    assert library.get_memory() == before


def test_a_prefix_shorter_than_four_characters_is_not_looked_up(
    run: Any, similar_ids: dict[str, str]
) -> None:
    result = run("facts", "show", "9f0", "--json")
    assert result.exit_code == 3
    assert json.loads(result.stdout)["error"] == "fact_not_found"
    assert run("facts", "edit", "9f0", "--content", "x y").exit_code == 2, "malformed id"


def test_revert_takes_a_unique_change_id_prefix_from_any_bucket(
    run: Any, library: MemoryManager
) -> None:
    fact_id = add(library, "Reviews Go code", agent="reviewer")
    library.delete_fact(fact_id, agent_name="reviewer")
    change_id = library.get_history(agent_name="reviewer")[0]["change_id"]
    prefix = change_id.removeprefix("chg_")[:8]

    result = run("revert", prefix, "--yes", "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["reverts"] == change_id
    assert contents(library, "reviewer") == {"Reviews Go code"}


def test_revert_takes_a_prefix_of_a_change_to_a_bucket_emptied_since_on_postgres(
    postgres_url: str, tmp_path: Path
) -> None:
    """PostgreSQL lists no bucket without facts, so the prefix is found in the user's whole
    history, not bucket by bucket."""
    config = tmp_path / "postgres.yaml"
    backend = postgres_backend_config(postgres_url, tmp_path / "cache")
    config.write_text(yaml.safe_dump({"memory": {"backend_config": backend}}), encoding="utf-8")
    library = build_memory_manager(load_config(config).memory)
    try:
        add(library, "Reviews Go code", agent="reviewer")
        library.clear_memory(agent_name="reviewer")
        assert isinstance(library, AgentListing)
        assert library.agent_names(user_id="default") == []
        change_id = library.get_history(agent_name="reviewer")[0]["change_id"]

        result = CliRunner().invoke(
            app,
            ["memory", "revert", change_id.removeprefix("chg_")[:8], "--yes", "-c", str(config)],
        )

        assert result.exit_code == 0, result.output
        assert contents(library, "reviewer") == {"Reviews Go code"}
    finally:
        library.close()


def test_history_shows_what_each_change_did(run: Any, library: MemoryManager) -> None:
    fact_id = add(library, "Uses vim", category="preference", confidence=0.6)
    library.update_fact(fact_id, "Uses neovim", confidence=0.9)
    library.import_memory(
        summaries(workContext="Platform team") | {"facts": library.get_memory()["facts"]}
    )

    shown = run("history").stdout

    assert "Added: Uses vim" in shown
    assert "Changed: Uses vim → Uses neovim; confidence 0.6 → 0.9" in shown
    assert "Summary user.workContext: (empty) → Platform team" in shown
    assert "update_fact 1→1" not in shown


def test_piped_output_is_neither_wrapped_nor_padded(
    config_file: Path, library: MemoryManager, tmp_path: Path
) -> None:
    """A real process writing to a file: Rich must not assume an 80-column terminal."""
    long_content = "Prefers " + "very " * 40 + "long facts"
    add(library, long_content)
    add(library, "Uses vim")
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    base = [sys.executable, "-m", "deerflow", "memory"]
    with out.open("wb") as stdout:
        for args in (["show"], ["facts", "list"], ["history"]):
            subprocess.run([*base, *args, "-c", str(config_file)], stdout=stdout, check=True)
    with err.open("wb") as stderr:
        bad = [*base, "facts", "add", long_content, "--category", "gossip", "-c", str(config_file)]
        assert (
            subprocess.run(bad, stderr=stderr, env=os.environ | {"COLUMNS": "80"}).returncode == 2
        )

    lines = out.read_text(encoding="utf-8").splitlines()
    assert sum(long_content in line for line in lines) == 3, "each row on one line"
    assert not [line for line in lines if line != line.rstrip()], "no trailing spaces"
    assert len(err.read_text(encoding="utf-8").splitlines()) == 1

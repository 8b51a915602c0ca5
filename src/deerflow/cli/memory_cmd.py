"""`deerflow memory`: inspect and manage stored memory, one library call per command.

Every command parses its options, builds the configured manager once (`memory_session`), calls
one method of it, and prints the result: a Rich view, or JSON with `--json`. Library errors turn
into exit codes by type (`memory_session.ERROR_EXITS`); destructive commands ask first, and
refuse without a terminal unless `--yes` is given. Tables live in `memory_render`.
"""

from __future__ import annotations

import json
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Final

import typer
from rich.markup import escape

from deerflow.agents.memory.extensions import Auditable, MarkdownPortable, Migratable, Reindexable
from deerflow.agents.memory.manager import (
    FACT_CATEGORIES,
    FactNotFoundError,
    MemoryUnsupportedError,
    condition,
    validate_category,
)
from deerflow.cli import memory_render as render
from deerflow.cli.ids import MIN_PREFIX, resolve_change_id, resolve_fact_id
from deerflow.cli.memory_copy import copy
from deerflow.cli.memory_session import confirm, memory_session
from deerflow.cli.options import (
    AgentOption,
    ConfigOption,
    ExpectedRevisionOption,
    JsonOption,
    UserOption,
    YesOption,
)

app = typer.Typer(help="Inspect and manage stored memory.", no_args_is_help=True)
facts_app = typer.Typer(help="List, show, add, edit and remove single facts.", no_args_is_help=True)
app.add_typer(facts_app, name="facts")

DEFAULT_USER: Final = "default"
CATEGORIES: Final = ", ".join(FACT_CATEGORIES)
FACT_ID_HELP: Final = (
    "{what}: its id, or a unique prefix of it (at least "
    + str(MIN_PREFIX)
    + " characters; `fact_` may be left out)."
)


# -- reading -------------------------------------------------------------------------------------


@app.command()
def show(
    config: ConfigOption = None,
    user: UserOption = DEFAULT_USER,
    agent: AgentOption = None,
    json_output: JsonOption = False,
) -> None:
    """Show the summaries and the facts of one agent bucket (`get_memory`)."""
    with memory_session(config, json_output=json_output) as manager:
        document = manager.get_memory(user_id=user, agent_name=agent)
    if json_output:
        render.print_json(document)
    else:
        render.stdout().print(render.document_view(document, user=user, agent=agent))


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="Words to look for (FTS5 syntax passes through).")],
    category: Annotated[
        str | None, typer.Option("--category", help=f"Only facts of this category: {CATEGORIES}.")
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=1, help="At most this many facts.")
    ] = 10,
    config: ConfigOption = None,
    user: UserOption = DEFAULT_USER,
    agent: AgentOption = None,
    json_output: JsonOption = False,
) -> None:
    """Search the facts of one agent bucket, best first (`search`)."""
    with memory_session(config, json_output=json_output) as manager:
        found = manager.search(query, limit, user_id=user, agent_name=agent, category=category)
    if json_output:
        render.print_json(found)
    elif found:
        render.stdout().print(render.facts_table(found, with_score=True))
    else:
        render.stdout().print("(no matching facts)")


@app.command()
def history(
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=1, help="At most this many changes.")
    ] = 20,
    config: ConfigOption = None,
    user: UserOption = DEFAULT_USER,
    agent: AgentOption = None,
    json_output: JsonOption = False,
) -> None:
    """List recorded changes of the bucket and the user's summaries, newest first."""
    with memory_session(config, json_output=json_output) as manager:
        entries = manager.get_history(user_id=user, agent_name=agent, limit=limit)
    if json_output:
        render.print_json(entries)
    elif entries:
        render.stdout().print(render.history_table(entries))
    else:
        render.stdout().print("(no recorded changes)")


# -- single facts --------------------------------------------------------------------------------


def _fact(document: dict[str, Any], fact_id: str | None) -> dict[str, Any] | None:
    return next((f for f in document.get("facts", []) if f["id"] == fact_id), None)


@facts_app.command("list")
def facts_list(
    category: Annotated[
        str | None, typer.Option("--category", help=f"Only facts of this category: {CATEGORIES}.")
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", "-n", min=1, help="At most this many facts.")
    ] = None,
    config: ConfigOption = None,
    user: UserOption = DEFAULT_USER,
    agent: AgentOption = None,
    json_output: JsonOption = False,
) -> None:
    """List the facts of one agent bucket, most confident first, then newest (`get_memory`)."""
    with memory_session(config, json_output=json_output) as manager:
        if category is not None:
            validate_category(category)
        document = manager.get_memory(user_id=user, agent_name=agent)
    facts = [f for f in document.get("facts", []) if category in (None, f["category"])]
    facts.sort(key=lambda f: str(f.get("updatedAt") or ""), reverse=True)
    facts.sort(key=lambda f: float(f["confidence"]), reverse=True)  # stable: newest first on ties
    facts = facts[:limit]
    if json_output:
        render.print_json(facts)
    elif facts:
        render.stdout().print(render.facts_table(facts))
    else:
        render.stdout().print("(no facts)")


@facts_app.command("show")
def facts_show(
    fact_id: Annotated[str, typer.Argument(help=FACT_ID_HELP.format(what="The fact to show"))],
    config: ConfigOption = None,
    user: UserOption = DEFAULT_USER,
    agent: AgentOption = None,
    json_output: JsonOption = False,
) -> None:
    """Show one fact with every field the backend keeps for it (`get_memory`)."""
    with memory_session(config, json_output=json_output) as manager:
        fact_id = resolve_fact_id(manager, fact_id, user_id=user, agent_name=agent)
        fact = _fact(manager.get_memory(user_id=user, agent_name=agent), fact_id)
        if fact is None:
            raise FactNotFoundError(fact_id)
    if json_output:
        render.print_json(fact)
    else:
        render.stdout().print(render.fact_view(fact))


@facts_app.command("add")
def facts_add(
    content: Annotated[str, typer.Argument(help="What to remember.")],
    category: Annotated[
        str, typer.Option("--category", help=f"The fact's category: {CATEGORIES}.")
    ] = "context",
    confidence: Annotated[float, typer.Option("--confidence", help="0..1.")] = 0.5,
    expected_revision: ExpectedRevisionOption = None,
    config: ConfigOption = None,
    user: UserOption = DEFAULT_USER,
    agent: AgentOption = None,
    json_output: JsonOption = False,
) -> None:
    """Store one fact (`create_fact`). Refused for duplicates and secret-looking content; at
    capacity, the facts the capacity policy evicted to make room are listed."""
    with memory_session(config, json_output=json_output) as manager:
        before = _memory_or_none(manager, user, agent)
        document, fact_id = manager.create_fact(
            content,
            category,
            confidence,
            user_id=user,
            agent_name=agent,
            **condition(expected_revision),
        )
    kept = {fact["id"] for fact in document["facts"]}
    facts = [] if before is None else sorted(before["facts"], key=lambda fact: fact["id"])
    evicted = [fact for fact in facts if fact["id"] not in kept]
    if json_output:
        render.print_json(
            {
                "fact_id": fact_id,
                "fact": _fact(document, fact_id),
                "evicted": evicted,
                "revision": document.get("revision"),
            }
        )
        return
    out = render.stdout()
    if fact_id is None:
        out.print("not stored as a new fact (merged into an existing one)")
    else:
        out.print(f"added {fact_id}")
    for fact in evicted:
        out.print(f"evicted {fact['id']} to stay within max_facts: {escape(fact['content'])}")


def _unchanged(before: dict[str, Any] | None, after: dict[str, Any]) -> bool:
    """Whether a write left the memory at its revision (False when the backend has none)."""
    revision = None if before is None else before.get("revision")
    return isinstance(revision, int) and after.get("revision") == revision


def _memory_or_none(manager: Any, user: str, agent: str | None) -> dict[str, Any] | None:
    """The bucket's memory document; None when the backend cannot show it."""
    try:
        document: dict[str, Any] = manager.get_memory(user_id=user, agent_name=agent)
    except MemoryUnsupportedError:
        return None
    return document


@facts_app.command("edit")
def facts_edit(
    fact_id: Annotated[str, typer.Argument(help=FACT_ID_HELP.format(what="The fact to change"))],
    content: Annotated[str | None, typer.Option("--content", help="New text.")] = None,
    category: Annotated[
        str | None, typer.Option("--category", help=f"New category: {CATEGORIES}.")
    ] = None,
    confidence: Annotated[float | None, typer.Option("--confidence", help="New 0..1.")] = None,
    expected_revision: ExpectedRevisionOption = None,
    config: ConfigOption = None,
    user: UserOption = DEFAULT_USER,
    agent: AgentOption = None,
    json_output: JsonOption = False,
) -> None:
    """Change the text, category or confidence of one fact (`update_fact`)."""
    with memory_session(config, json_output=json_output) as manager:
        if content is None and category is None and confidence is None:
            raise ValueError("nothing to change: pass --content, --category or --confidence")
        fact_id = resolve_fact_id(manager, fact_id, user_id=user, agent_name=agent)
        document = manager.update_fact(
            fact_id,
            content,
            category,
            confidence,
            user_id=user,
            agent_name=agent,
            **condition(expected_revision),
        )
    if json_output:
        render.print_json({"fact": _fact(document, fact_id), "revision": document.get("revision")})
    else:
        render.stdout().print(f"updated {fact_id}")


@facts_app.command("rm")
def facts_rm(
    fact_id: Annotated[str, typer.Argument(help=FACT_ID_HELP.format(what="The fact to delete"))],
    expected_revision: ExpectedRevisionOption = None,
    yes: YesOption = False,
    config: ConfigOption = None,
    user: UserOption = DEFAULT_USER,
    agent: AgentOption = None,
    json_output: JsonOption = False,
) -> None:
    """Delete one fact (`delete_fact`); `memory revert` can bring it back."""
    with memory_session(config, json_output=json_output) as manager:
        fact_id = resolve_fact_id(manager, fact_id, user_id=user, agent_name=agent)
        confirm(f"Delete {fact_id}?", yes=yes)
        document = manager.delete_fact(
            fact_id, user_id=user, agent_name=agent, **condition(expected_revision)
        )
    if json_output:
        render.print_json({"deleted": fact_id, "revision": document.get("revision")})
    else:
        render.stdout().print(f"deleted {fact_id}")


# -- whole buckets ---------------------------------------------------------------------------------


class ExportFormat(StrEnum):
    json = "json"
    markdown = "markdown"


@app.command()
def export(
    format_: Annotated[
        ExportFormat, typer.Option("--format", "-f", help="A JSON document or a Markdown folder.")
    ] = ExportFormat.json,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="File (json) or new folder (markdown; required)."),
    ] = None,
    config: ConfigOption = None,
    user: UserOption = DEFAULT_USER,
    agent: AgentOption = None,
    json_output: JsonOption = False,
) -> None:
    """Write the summaries and the bucket's facts in the form `memory import` reads back."""
    with memory_session(config, json_output=json_output) as manager:
        if format_ is ExportFormat.markdown:
            if output is None:
                raise ValueError("--format markdown needs --output FOLDER")
            if output.exists() and (not output.is_dir() or any(output.iterdir())):
                raise ValueError(f"--output {output}: must be a new or empty folder")
            if not isinstance(manager, MarkdownPortable):
                raise MemoryUnsupportedError(type(manager).__name__, "export_markdown")
            count = manager.export_markdown(output, user_id=user, agent_name=agent)
        else:
            document = manager.export_memory(user_id=user, agent_name=agent)
            count = len(document.get("facts", []))
            if output is None:
                render.print_json(document)
                return
            output.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    if json_output:
        render.print_json({"format": format_.value, "output": str(output), "facts": count})
    else:
        render.stdout().print(f"exported {render.counted(count, 'fact')} to {escape(str(output))}")


@app.command("import")
def import_(
    path: Annotated[
        Path, typer.Argument(help="A JSON document, or a Markdown export folder.", exists=True)
    ],
    expected_revision: ExpectedRevisionOption = None,
    yes: YesOption = False,
    config: ConfigOption = None,
    user: UserOption = DEFAULT_USER,
    agent: AgentOption = None,
    json_output: JsonOption = False,
) -> None:
    """Replace the user's summaries and the bucket's facts with an export (revertible)."""
    with memory_session(config, json_output=json_output) as manager:
        data: Any = None if path.is_dir() else _read_document(path)
        bucket = agent or "the default bucket"
        confirm(f"Replace the summaries and the facts of {bucket} for {user}?", yes=yes)
        if path.is_dir():
            if not isinstance(manager, MarkdownPortable):
                raise MemoryUnsupportedError(type(manager).__name__, "import_markdown")
            document = manager.import_markdown(
                path, user_id=user, agent_name=agent, **condition(expected_revision)
            )
        else:
            document = manager.import_memory(
                data, user_id=user, agent_name=agent, **condition(expected_revision)
            )
    if json_output:
        render.print_json(document)
    else:
        count = len(document.get("facts", []))
        render.stdout().print(
            f"imported {render.counted(count, 'fact')} (revision {document.get('revision')})"
        )


def _read_document(path: Path) -> Any:
    """The JSON document in `path`, read before anyone is asked to confirm the import.

    Raises:
        ValueError: the file is not JSON, or it is the `memory.json` of a Markdown export, which
            holds the summaries but not the facts (they are the folder's `facts/*.md`): importing
            it alone would delete every fact of the bucket.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError both are
        raise ValueError(f"{path}: not a JSON document ({exc})") from None
    if isinstance(data, dict) and "facts" not in data and (path.parent / "facts").is_dir():
        raise ValueError(
            f"{path}: the summaries of a Markdown export, without its facts; "
            f"import the folder {path.parent}"
        )
    return data


@app.command()
def clear(
    expected_revision: ExpectedRevisionOption = None,
    yes: YesOption = False,
    config: ConfigOption = None,
    user: UserOption = DEFAULT_USER,
    agent: AgentOption = None,
    json_output: JsonOption = False,
) -> None:
    """Delete everything of the user (summaries and every agent), or with --agent one bucket."""
    scope = f"the facts of agent {agent}" if agent is not None else "ALL memory"
    with memory_session(config, json_output=json_output) as manager:
        confirm(f"Delete {scope} of {user}?", yes=yes)
        before = _memory_or_none(manager, user, agent)
        document = manager.clear_memory(
            user_id=user, agent_name=agent, **condition(expected_revision)
        )
    if json_output:
        render.print_json(document)
    elif _unchanged(before, document):
        empty = (
            f"agent {agent} of {user} has no facts"
            if agent is not None
            else f"{user} has no memory"
        )
        render.stdout().print(f"nothing to clear: {escape(empty)}")
    else:
        render.stdout().print(f"cleared {scope} of {escape(user)}")


@app.command()
def revert(
    change_id: Annotated[
        str,
        typer.Argument(
            help="A change id from `deerflow memory history`, or a unique prefix of one "
            f"(at least {MIN_PREFIX} characters; `chg_` may be left out)."
        ),
    ],
    expected_revision: ExpectedRevisionOption = None,
    yes: YesOption = False,
    config: ConfigOption = None,
    user: UserOption = DEFAULT_USER,
    json_output: JsonOption = False,
) -> None:
    """Undo one recorded change (`revert_change`); the undo is itself recorded."""
    with memory_session(config, json_output=json_output) as manager:
        change_id = resolve_change_id(manager, change_id, user_id=user)
        confirm(f"Revert {change_id} of {user}?", yes=yes)
        entry = manager.revert_change(change_id, user_id=user, **condition(expected_revision))
    if json_output:
        render.print_json(entry)
    else:
        render.stdout().print(f"reverted {escape(change_id)} (recorded as {entry['change_id']})")


# -- maintenance (DeerMem) -----------------------------------------------------------------------


@app.command()
def reindex(config: ConfigOption = None, json_output: JsonOption = False) -> None:
    """Rebuild the whole retrieval index from the stored memory (DeerMem, either storage)."""
    with memory_session(config, json_output=json_output) as manager:
        if not isinstance(manager, Reindexable):
            raise MemoryUnsupportedError(type(manager).__name__, "reindex")
        started = time.perf_counter()
        with render.progress_bar("reindexing facts", enabled=not json_output) as progress:
            count = manager.reindex(progress)
        seconds = time.perf_counter() - started
    if json_output:
        render.print_json({"facts": count, "seconds": round(seconds, 3)})
    else:
        render.stdout().print(f"reindexed {render.counted(count, 'fact')} in {seconds:.2f}s")


@app.command()
def audit(
    stale_days: Annotated[
        int, typer.Option("--stale-days", min=1, help="Age after which a fact counts as stale.")
    ] = 90,
    similarity: Annotated[
        float,
        typer.Option(
            "--similarity", min=0.0, max=1.0, help="Token overlap (0..1] of near duplicates."
        ),
    ] = 0.7,
    config: ConfigOption = None,
    user: UserOption = DEFAULT_USER,
    json_output: JsonOption = False,
) -> None:
    """Report duplicates, stale facts, secrets and missing provenance per agent bucket (DeerMem).

    Changes nothing (but a first read migrates an old single-file layout,
    as every command's does). Covers every bucket of the user that holds
    facts.
    """
    with memory_session(config, json_output=json_output) as manager:
        if not isinstance(manager, Auditable):
            raise MemoryUnsupportedError(type(manager).__name__, "audit")
        reports = manager.audit(
            user_id=user, staleness_age_days=stale_days, near_duplicate_threshold=similarity
        )
    if json_output:
        render.print_json(reports)
    else:
        render.stdout().print(render.audit_view(reports))


@app.command("migrate")
def migrate_(
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Report what would migrate; change nothing.")
    ] = False,
    yes: YesOption = False,
    config: ConfigOption = None,
    json_output: JsonOption = False,
) -> None:
    """Migrate old single-file memory under the storage root to the current layout (DeerMem).

    Each source keeps a byte-identical `.v1.bak`; each user's migration is
    one revertible change. Exits with 1 when any user could not be migrated
    (the others still are).
    """
    with memory_session(config, json_output=json_output) as manager:
        if not isinstance(manager, Migratable):
            raise MemoryUnsupportedError(type(manager).__name__, "migrate")
        if not dry_run and not yes:
            legacy = manager.legacy_sources()
            if legacy:
                confirm(f"Migrate {len(legacy)} legacy memory files?", yes=yes)
        with render.progress_bar("migrating users", enabled=not json_output) as advance:
            report = manager.migrate(dry_run=dry_run, progress=advance)
    if json_output:
        render.print_json(report)
    elif report["users"]:
        render.stdout().print(render.migration_table(report))
    else:
        render.stdout().print("nothing to migrate")
    if not report["ok"]:
        raise typer.Exit(1)


app.command("copy")(copy)  # in a module of its own: moving whole stores is a tool apart

"""How `deerflow memory` shows its results: Rich tables for people, plain JSON for scripts.

Stored text (facts, summaries, reasons) goes into `Text` objects or through `escape`, never into
markup, so a fact such as "[bold] is a tag" is shown as written.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final

import typer
from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.markup import escape
from rich.padding import Padding
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from deerflow.cli.console import stderr, stdout

__all__ = [
    "Adaptive",
    "audit_view",
    "counted",
    "describe_change",
    "document_view",
    "fact_view",
    "facts_table",
    "history_table",
    "migration_table",
    "print_json",
    "progress_bar",
    "stderr",
    "stdout",
]

FACT_FIELDS: Final = ("id", "content", "category", "confidence", "createdAt", "updatedAt", "source")
# Below this many columns, tables of facts and changes turn into one block per row.
WIDE: Final = 110
SUMMARY_LABELS: Final = {
    ("user", "workContext"): "Work",
    ("user", "personalContext"): "Personal",
    ("user", "topOfMind"): "Current focus",
    ("history", "recentMonths"): "Recent",
    ("history", "earlierContext"): "Earlier",
    ("history", "longTermBackground"): "Background",
}


def print_json(value: Any) -> None:
    """Plain, uncoloured JSON on stdout, for scripts."""
    typer.echo(json.dumps(value, indent=2, ensure_ascii=False))


def counted(count: int, one: str, many: str | None = None) -> str:
    """`1 fact`, `2 facts`: a count and its noun, singular for one."""
    return f"{count} {one if count == 1 else many or one + 's'}"


def document_view(document: Mapping[str, Any], *, user: str, agent: str | None) -> Group:
    """The summaries, then the bucket's facts, under a one-line header."""
    facts = document.get("facts", [])
    header = Text.assemble(
        ("user ", "dim"),
        user,
        (" · bucket ", "dim"),
        agent or "(default)",
        (" · revision ", "dim"),
        str(document.get("revision", "?")),
        (" · ", "dim"),
        counted(len(facts), "fact"),
    )
    summaries = Table.grid(padding=(0, 2))
    summaries.add_column(style="bold")
    summaries.add_column()
    for (part, section), label in SUMMARY_LABELS.items():
        text = (document.get(part) or {}).get(section, {}).get("summary", "")
        if text:
            summaries.add_row(label, Text(text))
    parts: list[RenderableType] = [header]
    parts.append(summaries if summaries.row_count else Text("(no summaries)", style="dim"))
    parts.append(facts_table(facts) if facts else Text("(no facts)", style="dim"))
    return Group(*parts)


class Adaptive:
    """A table where the console is wide enough, else one block per row.

    Full ids take 37 columns, so at 80 columns a table leaves the text a few characters. Then
    each row becomes a line of its short fields, with the long text indented below it.
    """

    def __init__(self, table: Table, rows: Sequence[tuple[list[str], str]], min_width: int):
        self.table = table
        self.rows = rows
        self.min_width = min_width

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if options.max_width >= self.min_width:
            yield self.table
            return
        for fields, text in self.rows:
            yield Text("  ".join(fields), style="bold")
            yield Padding(Text(text), (0, 0, 0, 4))


def facts_table(facts: Sequence[Mapping[str, Any]], *, with_score: bool = False) -> Adaptive:
    """id, category, confidence, updated, content (and the search score when asked).

    Ids are never cut short: they are what `facts edit`, `facts rm` and `revert` take.
    """
    table = Table(box=box.SIMPLE_HEAD)
    _id_column(table, "id", [str(fact["id"]) for fact in facts])
    table.add_column("category")
    table.add_column("confidence", justify="right")
    table.add_column("updated", no_wrap=True)
    if with_score:
        table.add_column("score", justify="right")
    table.add_column("content", overflow="fold", ratio=1)
    rows = []
    for fact in facts:
        fields = [
            str(fact["id"]),
            str(fact["category"]),
            f"{float(fact['confidence']):.2f}",
            _moment(fact.get("updatedAt")),
        ]
        if with_score:
            fields.append(f"{float(fact.get('score', 0.0)):.3f}")
        table.add_row(*(Text(field) for field in fields), Text(str(fact["content"])))
        rows.append((fields, str(fact["content"])))
    return Adaptive(table, rows, WIDE)


def fact_view(fact: Mapping[str, Any]) -> Table:
    """Every field of one fact, one per line: the contract's fields first, then the backend's
    own (lists and objects as JSON)."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    known = [key for key in FACT_FIELDS if key in fact]
    for key in [*known, *sorted(set(fact) - set(known))]:
        value = fact[key]
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        grid.add_row(key, Text(shown))
    return grid


def history_table(entries: Sequence[Mapping[str, Any]]) -> Adaptive:
    """One row per change, newest first (what `revert` can undo), with what it changed."""
    table = Table(box=box.SIMPLE_HEAD)
    _id_column(table, "change id", [str(entry["change_id"]) for entry in entries])
    table.add_column("at", no_wrap=True)
    table.add_column("actor")
    table.add_column("reason")
    table.add_column("changes", overflow="fold", ratio=1)
    rows = []
    for entry in entries:
        fields = [
            str(entry["change_id"]),
            _moment(entry.get("at")),
            str(entry["actor"]),
            str(entry["reason"]),
        ]
        changes = "\n".join(describe_change(entry)) or "(nothing visible in this bucket)"
        table.add_row(*(Text(field) for field in fields), Text(changes))
        rows.append((fields, changes))
    return Adaptive(table, rows, WIDE)


def describe_change(entry: Mapping[str, Any]) -> list[str]:
    """One line per fact or summary section a change touched, as the web page words it:
    `Added: …`, `Removed: …`, `Changed: old → new; confidence 0.5 → 0.9`."""
    before_facts, before_summaries = _change_side(entry.get("before"))
    after_facts, after_summaries = _change_side(entry.get("after"))
    before = {str(fact["id"]): fact for fact in before_facts}
    after = {str(fact["id"]): fact for fact in after_facts}
    lines = []
    for fact_id, old in before.items():
        new = after.get(fact_id)
        lines.append(f"Removed: {old['content']}" if new is None else _fact_change(old, new))
    lines.extend(f"Added: {fact['content']}" for i, fact in after.items() if i not in before)
    for part, sections in after_summaries.items():
        for section, text in sections.items():
            old_text = before_summaries.get(part, {}).get(section, "")
            lines.append(f"Summary {part}.{section}: {old_text or '(empty)'} → {text or '(empty)'}")
    return lines


def _change_side(side: Any) -> tuple[list[Mapping[str, Any]], Mapping[str, Any]]:
    """The facts and summary texts on one side of a change: DeerMem records
    `{summaries, facts}`, a backend logging one fact per change records the fact (or None)."""
    if not isinstance(side, Mapping):
        return [], {}
    if "facts" in side:
        return list(side["facts"]), side.get("summaries") or {}
    return [side], {}


def _fact_change(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    same = old["content"] == new["content"]
    parts = [str(new["content"]) if same else f"{old['content']} → {new['content']}"]
    for key in ("category", "confidence"):
        if old.get(key) != new.get(key):
            parts.append(f"{key} {old.get(key)} → {new.get(key)}")
    return "Changed: " + "; ".join(parts)


def _id_column(table: Table, header: str, ids: Sequence[str]) -> None:
    width = max((len(i) for i in ids), default=len(header))
    table.add_column(header, no_wrap=True, min_width=width)


def _moment(stamp: Any) -> str:
    """`2025-03-01T08:00:00Z` as `2025-03-01 08:00`; anything else as it is."""
    text = str(stamp or "")
    return text[:16].replace("T", " ") if len(text) >= 16 and text[10:11] == "T" else text


def migration_table(report: Mapping[str, Any]) -> Group:
    """One row per user of a `MigrationReport.as_dict()`, then why each failed user failed."""
    title = "migration (dry run: nothing changed)" if report["dry_run"] else "migration"
    table = Table(title=title, box=box.SIMPLE_HEAD)
    table.add_column("user")
    table.add_column("facts", justify="right")
    table.add_column("buckets")
    table.add_column("summaries")
    _id_column(table, "result", [str(u["change_id"] or "") for u in report["users"]])
    failures: list[RenderableType] = []
    for user in report["users"]:
        buckets = ", ".join(f"{name}: {count}" for name, count in user["buckets"].items())
        if user["error"]:
            result = Text("failed (below)", style="red")
            failures.append(Text(f"{user['user_id']}: {user['error']}", style="red"))
        elif report["dry_run"]:
            result = Text("would migrate")
        else:
            result = Text(str(user["change_id"]))
        table.add_row(
            Text(str(user["user_id"])),
            str(user["facts"]),
            Text(buckets or "-"),
            Text(", ".join(user["summaries"]) or "-"),
            result,
        )
    return Group(table, *failures)


AUDIT_FINDINGS: Final = (
    ("exact_duplicates", "exact dup."),
    ("near_duplicates", "near dup."),
    ("stale", "stale"),
    ("never_retrieved", "never retrieved"),
    ("secrets", "secrets"),
    ("without_provenance", "no provenance"),
)


def audit_view(reports: Sequence[Mapping[str, Any]]) -> Group:
    """Counts and rates per bucket (`AuditReport.as_dict()`), then the ids behind each finding."""
    table = Table(box=box.SIMPLE_HEAD)
    _id_column(table, "bucket", [str(report["bucket"]) for report in reports])
    table.add_column("facts", justify="right")
    for _, label in AUDIT_FINDINGS:
        table.add_column(label, justify="right")
    details: list[RenderableType] = []
    for report in reports:
        cells: list[RenderableType] = [Text(str(report["bucket"])), str(report["total"])]
        for key, label in AUDIT_FINDINGS:
            finding = report.get(key)
            if finding is None:
                cells.append("n/a")
                continue
            cells.append(f"{finding['count']} ({finding['rate']:.0%})" if finding["count"] else "0")
            listed = _finding_ids(key, finding)
            if listed:
                details.append(Text(f"{report['bucket']} · {label}: {listed}"))
        table.add_row(*cells)
    return Group(table, *details)


def _finding_ids(key: str, finding: Mapping[str, Any]) -> str:
    if key == "exact_duplicates":
        return "; ".join(" = ".join(group) for group in finding["groups"])
    if key == "near_duplicates":
        return "; ".join(
            f"{' ~ '.join(pair['ids'])} ({pair['similarity']:.2f})" for pair in finding["pairs"]
        )
    if key == "secrets":
        return "; ".join(f"{fact['id']} ({fact['reason']})" for fact in finding["facts"])
    return ", ".join(finding.get("ids", []))


@contextmanager
def progress_bar(
    description: str, *, enabled: bool, total: int | None = None
) -> Iterator[Callable[[int], None]]:
    """A Rich progress bar on stderr; yields the callback that reports how many items are done.

    Without a `total` (not known in advance) the bar pulses and the count grows. Disabled (for
    `--json`), the callback does nothing.
    """
    if not enabled:
        yield lambda done: None
        return
    columns = (
        SpinnerColumn(),
        TextColumn(escape(description)),
        BarColumn(),
        TextColumn("{task.completed} done" if total is None else "{task.completed}/{task.total}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=stderr(), transient=True) as progress:
        task = progress.add_task(description, total=total)
        yield lambda done: progress.update(task, completed=done)

"""Tables, targets and the chart of a `deermem_bench` result (a JSON-ready dict).

Ratios are `recorded original / ours`, where "recorded original" is the mean of the two runs
quoted in `benchmarks/recorded.py`: above 1 means ours is faster (or smaller). Those numbers
were recorded on a machine of the same kind, not measured by this benchmark.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any, Final

from benchmarks.recorded import RECORDED, recorded_mean

__all__ = ["GROWTH_LIMIT", "chart", "markdown", "print_tables", "rows", "targets"]

GROWTH_LIMIT: Final = 1.2
"""A cost "does not grow" when the larger case's p50 is at most 1.2x the smaller one's: run-to-run
noise on this 2-core VM is up to ~10%, so a smaller bound would flag noise."""


def _make_row(
    section: str,
    key: str,
    label: str,
    ours: dict[str, Any],
    *,
    recorded: str | None = None,
    unit: str = "ms",
    note: str = "",
    quick: bool = False,
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "section": section,
        "key": key,
        "label": label,
        "unit": unit,
        "ours": {k: ours.get(k) for k in ("n", "p50", "p95", "p99")},
        "recorded_key": recorded if recorded in RECORDED and not quick else None,
        "note": note,
    }
    if row["recorded_key"]:
        entry = RECORDED[row["recorded_key"]]
        row["recorded_runs"] = entry["runs"]
        row["recorded_what"] = entry["what"]
        for stat in ("p50", "p99"):
            mean = recorded_mean(row["recorded_key"], stat)
            mine = ours.get(stat)
            row[f"recorded_{stat}_mean"] = mean
            row[f"ratio_{stat}"] = mean / mine if mean is not None and mine else None
    return row


def _band_order(key: str) -> tuple[int, int]:
    band = key.split("/", 1)[1]
    if band == "full":
        return (10**9, 0)
    lo, hi = (int(x) for x in band.split("-"))
    return (lo, -(hi - lo))


def rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The comparison table: every headline number, with the recorded original where one fits.

    Only the sections that `results` holds (a run with `--only` measures some) give rows.
    """
    s = results["sections"]
    out: list[dict[str, Any]] = []
    _row = functools.partial(_make_row, quick=results["quick"])  # quick sizes match no record
    if "create_fact" in s:
        create = s["create_fact"]["rows"]
        for key in sorted(create, key=_band_order):
            band = key.split("/", 1)[1]
            label = (
                "create_fact, full bucket (evicts)"
                if band == "full"
                else f"create_fact, bucket {band}"
            )
            out.append(_row("create_fact", key, label, create[key], recorded=key))
    if "get_context" in s:
        for size, entry in s["get_context"]["sizes"].items():
            out.append(
                _row(
                    "get_context",
                    f"get_context/{size}/uncached",
                    f"get_context warm, {size} facts, uncached",
                    entry["uncached"],
                    recorded=f"get_context/{size}",
                )
            )
            out.append(
                _row(
                    "get_context",
                    f"get_context/{size}/cached",
                    f"get_context warm, {size} facts, cached",
                    entry["cached"],
                    note="the original has no text cache; compare the uncached row",
                )
            )
    single = s.get("search", {}).get("single_user")
    if single is not None:
        n = single["facts"]
        for state, title in (
            ("as_left_by_create_fact", "as create_fact left it"),
            ("after_reindex", "after reindex"),
        ):
            out.append(
                _row(
                    "search",
                    f"search/single{n}/{state}",
                    f"search, 1 user, {n} facts, {title}",
                    single[state]["manager"],
                    recorded=f"search/single{n}" if state == "after_reindex" else None,
                )
            )
            out.append(
                _row(
                    "search",
                    f"search/single{n}/{state}/bare",
                    "  bare index search, same index",
                    single[state]["bare_index"],
                    note="in-process baseline of the manager's search",
                )
            )
    stores = s.get("search", {}).get("stores", {})
    for others, store in stores.items():
        if "spread" not in store:
            continue
        users = store["spread"]["users"]
        for which, title in (("pass1", "pass 1, cold users"), ("pass2", "pass 2, warm")):
            out.append(
                _row(
                    "search",
                    f"search/spread{others}/{which}",
                    f"search, {int(others):,} facts/{users:,} users, {title}",
                    store["spread"][which],
                    recorded=f"search/spread{others}/{which}",
                )
            )
    probe = results["plan"]["probe_facts"]
    for others, store in stores.items():
        out.append(
            _row(
                "search",
                f"search/probe{others}",
                f"search, {probe}-fact user + {int(others):,} others",
                store["probe"]["search"],
                recorded=f"search/probe{others}/pass2",
                note="recorded: 10,000 facts over 100 users of 100" if others == "10000" else "",
            )
        )
    for others, store in stores.items():
        if "first_search_without_index" in store:
            out.append(
                _row(
                    "search",
                    f"search_lazy_first/{others}",
                    f"first search of a user, no index (lazy), {int(others):,} store",
                    store["first_search_without_index"],
                    recorded=f"search_lazy_first/{others}",
                )
            )
        if "get_context_first_load" in store:
            out.append(
                _row(
                    "get_context",
                    f"get_context_first_load/{others}",
                    f"get_context, first load of a user, {int(others):,} store",
                    store["get_context_first_load"],
                    recorded=f"get_context_first_load/{others}",
                )
            )
    for facts, entry in s.get("index_update", {}).items():
        rows_label = f"{int(facts):,}"
        recorded = {"100": "index_update/100", "100100": "index_update/100000"}.get(facts)
        out.append(
            _row(
                "index_update",
                f"index_update/{facts}/create_fact",
                f"create_fact ({probe}-fact user), {rows_label} rows",
                entry["create_fact"],
                recorded=recorded,
                note="recorded: per-fact upsert incl. storage, 'about' (caveat 2)"
                if recorded
                else "",
            )
        )
        out.append(
            _row(
                "index_update",
                f"index_update/{facts}/apply",
                f"  bare index apply, {rows_label} rows",
                entry["apply"],
            )
        )
    if "reindex" in s:
        reindex = s["reindex"]
        facts_label = f"{reindex['facts']:,}"
        big = reindex["facts"] >= 100_000
        seconds, peak = reindex["seconds"], reindex["peak_rss_mb"]
        out.append(
            _row(
                "reindex",
                "reindex/seconds",
                f"reindex {facts_label} facts, fresh process "
                f"(runs: {seconds['min']:.1f}-{seconds['max']:.1f})",
                {"n": seconds["n"], "p50": seconds["p50"]},
                recorded="reindex/seconds" if big else None,
                unit="s",
            )
        )
        out.append(
            _row(
                "reindex",
                "reindex/reading_files_seconds",
                "  of which reading + parsing the fact files",
                {
                    "n": reindex["reading_files_seconds"]["n"],
                    "p50": reindex["reading_files_seconds"]["p50"],
                },
                unit="s",
                note="time inside storage.scan; the rest lists the users and builds the index",
            )
        )
        out.append(
            _row(
                "reindex",
                "reindex/peak_rss_mb",
                f"reindex {facts_label} facts, peak RSS "
                f"(runs: {peak['min']:.0f}-{peak['max']:.0f})",
                {"n": peak["n"], "p50": peak["p50"]},
                recorded="reindex/peak_rss_mb" if big else None,
                unit="MB",
                note="recorded peak: a process that also ingested and searched",
            )
        )
    for key, entry in s.get("cold_start", {}).get("runs", {}).items():
        size, _, warm = key.partition("/")
        label = f"cold start, {size} facts" + (", warm() first" if warm else "")
        out.append(
            _row(
                "cold_start",
                f"cold_start/{key}",
                label,
                entry["total"],
                recorded=None if warm else f"cold_start/{size}",
            )
        )
    if "add" in s:
        add = s["add"]
        turns = add["conversation"]["turns"]
        cpu = "  CPU time of the calling thread"
        new = add["new_thread"]
        out.append(_row("add", "add/new_thread", f"add(), new {turns}-turn thread", new))
        out.append(_row("add", "add/new_thread/cpu", cpu, new["cpu"]))
        for length, states in add["by_turns"].items():
            for state, entry in states.items():
                title = _ADD_STATES[state]
                label = f"add(), {length}-turn thread growing a turn a call, {title}"
                out.append(_row("add", f"add/{length}_turns/{state}", label, entry))
                out.append(_row("add", f"add/{length}_turns/{state}/cpu", cpu, entry["cpu"]))
    if "extraction" in s:
        extraction = s["extraction"]
        out.append(
            _row(
                "add",
                "extraction/processing",
                "one queued item extracted + committed, instant scripted model",
                extraction["processing"],
                note="manager.shutdown_flush with one pending item",
            )
        )
        out.append(
            _row(
                "add",
                "extraction/model_invoke",
                "  of which the scripted model's invoke",
                extraction["model_invoke"],
            )
        )
        for key, label in (
            ("processing_without_model", "  the extraction less the model's invoke"),
            ("end_to_end_without_model", "add() + the extraction, less the model's invoke"),
        ):
            out.append(_row("add", f"extraction/{key}", label, extraction[key]))
    return out


_ADD_STATES = {"pending": "nothing extracted", "extracted": "the rest extracted"}


def _target(name: str, value: float, limit: float, unit: str, detail: str = "") -> dict[str, Any]:
    return {
        "target": name,
        "measured": value,
        "limit": limit,
        "unit": unit,
        "met": value <= limit,
        "detail": detail,
    }


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets against what this run measured; `met` is a plain comparison.

    Only targets of the sections that `results` holds are listed.
    """
    s = results["sections"]
    out = []
    if "create_fact" in s:
        create = s["create_fact"]
        band = results["plan"]["band"]
        bands = {k: v for k, v in create["rows"].items() if k.endswith("full") or _width(k) == band}
        worst = max(bands, key=lambda k: bands[k]["p50"])
        out.append(
            _target(
                "create_fact p50 <= 3 ms at every bucket size band and at full",
                bands[worst]["p50"],
                3.0,
                "ms",
                f"worst: {worst}",
            )
        )
        out.append(
            _target(
                f"create_fact p50 does not grow: last band / first band <= {GROWTH_LIMIT}",
                create["growth_last_band_over_first"],
                GROWTH_LIMIT,
                "x",
            )
        )
        out.append(
            _target(
                f"create_fact p50 does not grow: full bucket / first band <= {GROWTH_LIMIT}",
                create["growth_full_over_first"],
                GROWTH_LIMIT,
                "x",
            )
        )
    for size, entry in s.get("get_context", {}).get("sizes", {}).items():
        for path in ("cached", "uncached"):
            out.append(
                _target(
                    f"get_context warm p50 <= 0.5 ms at {size} facts ({path})",
                    entry[path]["p50"],
                    0.5,
                    "ms",
                )
            )
    stores = s.get("search", {}).get("stores", {})
    spread = [k for k in stores if "spread" in stores[k]]
    if spread:
        top = max(spread, key=int)
        for which in ("pass2", "pass1"):
            out.append(
                _target(
                    f"search p99 <= 5 ms at {int(top):,} facts ({which})",
                    stores[top]["spread"][which]["p99"],
                    5.0,
                    "ms",
                    "pass 1: users this manager had not read yet" if which == "pass1" else "",
                )
            )
    ordered = sorted(stores, key=int)
    if len(ordered) >= 2:
        small, big = ordered[-2], ordered[-1]
        ratio = stores[big]["probe"]["search"]["p50"] / stores[small]["probe"]["search"]["p50"]
        out.append(
            _target(
                f"{results['plan']['probe_facts']}-fact user's search does not grow: p50 at "
                f"+{int(big):,} / +{int(small):,} "
                f"others <= {GROWTH_LIMIT}",
                ratio,
                GROWTH_LIMIT,
                "x",
            )
        )
    if "index_update" in s:
        updates = s["index_update"]
        few, many = min(updates, key=int), max(updates, key=int)
        for what, label in (("create_fact", "create_fact"), ("apply", "bare index apply")):
            ratio = updates[many][what]["p50"] / updates[few][what]["p50"]
            out.append(
                _target(
                    f"index update does not grow ({label}): p50 at {int(many):,} / "
                    f"{int(few):,} rows <= {GROWTH_LIMIT}",
                    ratio,
                    GROWTH_LIMIT,
                    "x",
                )
            )
    if "reindex" in s:
        reindex = s["reindex"]
        out.append(
            _target(
                f"reindex of {reindex['facts']:,} facts <= 10 s (median of runs)",
                reindex["seconds"]["p50"],
                10.0,
                "s",
                f"runs {reindex['seconds']['min']:.1f}-{reindex['seconds']['max']:.1f} s",
            )
        )
        worst = reindex["peak_rss_mb"]["max"]
        out.append(
            _target(
                f"reindex of {reindex['facts']:,} facts: peak RSS < 150 MB (worst run)",
                worst,
                150.0,
                "MB",
            )
            | {"met": worst < 150.0}
        )
    for key, entry in s.get("cold_start", {}).get("runs", {}).items():
        if "/" in key:
            continue
        out.append(
            _target(
                f"cold start to first get_context <= 250 ms at {key} facts (median)",
                entry["total"]["p50"],
                250.0,
                "ms",
            )
        )
    if "add" in s:
        add = s["add"]
        turns = add["conversation"]["turns"]
        longest = max(add["by_turns"], key=int)
        for entry, label in (
            (add["new_thread"], f"a new {turns}-turn thread"),
            (add["by_turns"][longest]["pending"], f"a {longest}-turn thread, nothing extracted"),
        ):
            p99 = entry["p99"]
            detail = f"p50 {entry['p50']:.3f} ms; CPU time of the calling thread: "
            detail += f"p99 {entry['cpu']['p99']:.3f} ms"
            out.append(
                _target(f"add() p99 < 1 ms, {label}", p99, 1.0, "ms", detail) | {"met": p99 < 1.0}
            )
    return out


def _width(key: str) -> int | None:
    band = key.split("/", 1)[1]
    if "-" not in band:
        return None
    lo, hi = (int(x) for x in band.split("-"))
    return hi - lo + 1


# -- output --------------------------------------------------------------------------------------


def _fmt(value: float | None, unit: str = "ms") -> str:
    if value is None:
        return "-"
    if unit == "x":
        return f"{value:.2f}x"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def _recorded_cell(row: dict[str, Any], stat: str) -> str:
    if not row.get("recorded_key"):
        return "-"
    values = [run.get(stat) for run in row["recorded_runs"]]
    if any(v is None for v in values):
        return "-"
    return " / ".join(_fmt(v) for v in values)


def _ratio(row: dict[str, Any], stat: str) -> str:
    value = row.get(f"ratio_{stat}")
    return "-" if value is None else f"{value:.1f}x" if value >= 10 else f"{value:.2f}x"


COLUMNS: Final = (
    "measurement",
    "n",
    "ours p50",
    "ours p95",
    "ours p99",
    "original p50 (rec. r1 / r2)",
    "ratio p50",
    "original p99 (rec. r1 / r2)",
    "ratio p99",
)


def _cells(row: dict[str, Any]) -> list[str]:
    ours = row["ours"]
    unit = row["unit"]
    return [
        row["label"] + (f" [{unit}]" if unit != "ms" else ""),
        "-" if ours["n"] is None else str(ours["n"]),
        _fmt(ours["p50"]),
        _fmt(ours["p95"]),
        _fmt(ours["p99"]),
        _recorded_cell(row, "p50"),
        _ratio(row, "p50"),
        _recorded_cell(row, "p99"),
        _ratio(row, "p99"),
    ]


def _profile_rows(results: dict[str, Any]) -> list[tuple[str, str]]:
    if "single_user" not in results["sections"].get("search", {}):
        return []
    single = results["sections"]["search"]["single_user"]["after_reindex"]
    breakdown = single["breakdown"]
    lines = [(f"manager.search p50 (n={single['manager']['n']})", _fmt(single["manager"]["p50"]))]
    lines += [(f"  {name}", _fmt(value)) for name, value in breakdown["steps_p50"].items()]
    lines.append(("  sum of step p50s", _fmt(breakdown["steps_sum_of_p50"])))
    lines += [
        (f"    storage.load part: {name}", _fmt(value))
        for name, value in breakdown["load_parts_p50"].items()
    ]
    return lines


def _cprofile_rows(results: dict[str, Any], top: int = 10) -> list[tuple[str, str, str, str]]:
    if "single_user" not in results["sections"].get("search", {}):
        return []
    profile = results["sections"]["search"]["single_user"]["profile_after_reindex"]
    return [
        (
            entry["function"],
            f"{entry['calls_per_search']:.0f}",
            f"{entry['own_us_per_search']:.1f}",
            f"{entry['own_share']:.0%}",
        )
        for entry in profile["top_own_time"][:top]
    ]


def _import_rows(results: dict[str, Any], top: int = 8) -> list[tuple[str, str, str]]:
    if "cold_start" not in results["sections"]:
        return []
    profile = results["sections"]["cold_start"]["import_profile"]
    return [
        (entry["package"], f"{entry['own_ms']:.1f}", f"{entry['share']:.0%}")
        for entry in profile["top_packages"][:top]
    ]


def _pipeline_rows(results: dict[str, Any]) -> list[tuple[str, str]]:
    s = results["sections"]
    lines: list[tuple[str, str]] = []
    if "add" in s:
        add = s["add"]
        longest = max(add["by_turns"], key=int)
        for entry, title in (
            (add["new_thread"], "new thread"),
            (add["by_turns"][longest]["pending"], f"{longest}-turn thread, nothing extracted"),
        ):
            lines.append((f"add(), {title}, p50", _fmt(entry["p50"])))
            lines += [(f"  {name}", _fmt(value)) for name, value in entry["components_p50"].items()]
        lines.append(
            (
                "add(), the first call (opens the journal, starts the worker)",
                _fmt(s["add"]["first_add_ms"]),
            )
        )
    if "extraction" in s:
        extraction = s["extraction"]
        lines.append(
            (
                "one extraction (shutdown_flush of one item), p50",
                _fmt(extraction["processing"]["p50"]),
            )
        )
        lines += [
            (f"  {name}", _fmt(value)) for name, value in extraction["components_p50"].items()
        ]
        lines.append(
            (
                "add() + one extraction, less the model's invoke, p50",
                _fmt(extraction["end_to_end_without_model"]["p50"]),
            )
        )
    return lines


def print_tables(results: dict[str, Any]) -> None:
    """Rich tables on stdout: comparison, search breakdown, targets."""
    from rich.console import Console
    from rich.table import Table

    console = Console() if sys.stdout.isatty() else Console(width=170)
    mode = " (QUICK: small sizes, not comparable)" if results["quick"] else ""
    table = Table(
        title=f"DeerMem, ours (measured now) vs the original (RECORDED in "
        f"{results['recorded_source']}), ms{mode}",
        caption="ratio = mean of the two recorded runs / ours; > 1: ours is faster",
    )
    for column in COLUMNS:
        table.add_column(column, justify="left" if column == "measurement" else "right")
    section = None
    for row in results["rows"]:
        if row["section"] != section:
            if section is not None:
                table.add_section()
            section = row["section"]
        table.add_row(*_cells(row))
    console.print(table)
    profile = Table(title="Where manager.search spends its time (1 user, full bucket, ms p50)")
    profile.add_column("step")
    profile.add_column("ms", justify="right")
    for name, value in _profile_rows(results):
        profile.add_row(name, value)
    if profile.row_count:  # a run with --only may lack the section
        console.print(profile)
    cprofile = Table(title="cProfile of manager.search: most own time (us per search)")
    for column in ("function", "calls", "own us", "share"):
        cprofile.add_column(column, justify="left" if column == "function" else "right")
    for cells in _cprofile_rows(results):
        cprofile.add_row(*cells)
    if cprofile.row_count:
        console.print(cprofile)
    imports = Table(title="Cold start: import time by package (-X importtime, own ms)")
    for column in ("package", "own ms", "share"):
        imports.add_column(column, justify="left" if column == "package" else "right")
    for package_cells in _import_rows(results):
        imports.add_row(*package_cells)
    if imports.row_count:
        console.print(imports)
    pipeline = Table(title="Where add() and one extraction spend their time (ms, p50)")
    pipeline.add_column("part")
    pipeline.add_column("ms", justify="right")
    for name, value in _pipeline_rows(results):
        pipeline.add_row(name, value)
    if pipeline.row_count:
        console.print(pipeline)
    goals = Table(title="Targets")
    for column in ("target", "measured", "limit", "met", "detail"):
        goals.add_column(column, justify="right" if column in ("measured", "limit") else "left")
    for target in results["targets"]:
        goals.add_row(
            target["target"],
            _fmt(target["measured"], target["unit"])
            + ("" if target["unit"] == "x" else f" {target['unit']}"),
            _fmt(target["limit"], target["unit"]),
            "[green]yes[/green]" if target["met"] else "[red]NO[/red]",
            target["detail"],
        )
    console.print(goals)


def markdown(results: dict[str, Any]) -> str:
    """The same tables in Markdown, for docs/benchmarks.md."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in results["rows"]:
        cells = _cells(row)
        cells[0] = _nbsp(cells[0])
        lines.append("| " + " | ".join(cells) + " |")
    tables = (
        ("| step | ms (p50) |", _profile_rows(results)),
        (
            "| function (cProfile, manager.search) | calls | own us | share |",
            _cprofile_rows(results),
        ),
        ("| package (-X importtime) | own ms | share |", _import_rows(results)),
        ("| write pipeline part | ms (p50) |", _pipeline_rows(results)),
    )
    for header, table in tables:
        if table:  # a run with --only may lack the section
            lines += ["", header, "|" + "---|" * header.count(" | ") + "---|"]
            lines += ["| " + " | ".join(_nbsp(cell) for cell in cells) + " |" for cells in table]
    baseline = results["sections"].get("baseline", {})
    if "cpu_gauge" in baseline:
        gauges = baseline.get("cpu_gauge_after", {})
        after = "".join(f" {ms:.3f} ms after {part}," for part, ms in gauges.items())
        lines += [
            "",
            f"The machine during this run: fsync floor p50 {baseline['fsync_write']['p50']:.3f}"
            f" ms; CPU gauge p50 {baseline['cpu_gauge']['p50']:.3f} ms at the start,{after}"
            f" {baseline['cpu_gauge_end']['p50']:.3f} ms at the end (`cpu_gauge`).",
        ]
    lines += ["", "| target | measured | met | detail |", "|---|---|---|---|"]
    for target in results["targets"]:
        unit = "" if target["unit"] == "x" else f" {target['unit']}"
        lines.append(
            f"| {target['target']} | {_fmt(target['measured'], target['unit'])}{unit} | "
            f"{'yes' if target['met'] else '**NO**'} | {target['detail']} |"
        )
    return "\n".join(lines) + "\n"


def _nbsp(cell: str) -> str:
    """Markdown keeps no leading spaces: the indentation of sub-rows becomes `&nbsp;`."""
    return cell.replace("  ", "&nbsp;&nbsp;")


def chart(results: dict[str, Any], path: Path) -> None:
    """Three panels: create_fact by bucket band, search by store size, cold start breakdown."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = results["sections"]
    band = results["plan"]["band"]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2), dpi=80)

    ax = axes[0]
    create = s["create_fact"]["rows"]
    keys = sorted((k for k in create if k.endswith("full") or _width(k) == band), key=_band_order)
    labels = [k.split("/", 1)[1] for k in keys]
    xs = range(len(keys))
    ours = [create[k]["p50"] for k in keys]
    recorded = [recorded_mean(k) for k in keys]
    ax.bar([x - 0.2 for x in xs], ours, 0.4, label="ours (measured)", color="tab:blue")
    if any(r is not None for r in recorded):
        ax.bar(
            [x + 0.2 for x in xs],
            [r or 0 for r in recorded],
            0.4,
            label="original (recorded)",
            color="tab:gray",
        )
    for x, value in zip(xs, ours, strict=True):
        ax.annotate(f"{value:.1f}", (x - 0.2, value), ha="center", va="bottom", fontsize=7)
    ax.axhline(3.0, color="tab:red", linestyle="--", linewidth=1, label="target 3 ms")
    ax.set_yscale("log")
    ax.set_ylim(bottom=1.0)
    ax.set_xticks(list(xs), labels, rotation=30, fontsize=8)
    ax.set_xlabel("facts in the bucket before the call")
    ax.set_ylabel("create_fact p50 (ms, log)")
    ax.set_title("create_fact p50 by bucket size")
    ax.legend(fontsize=7)

    ax = axes[1]
    stores = s["search"]["stores"]
    spread = sorted((k for k in stores if "spread" in stores[k]), key=int)
    facts = [stores[k]["facts"] for k in spread]
    ax.plot(
        facts,
        [stores[k]["spread"]["pass2"]["p50"] for k in spread],
        "o-",
        color="tab:blue",
        label="ours p50 (pass 2)",
    )
    ax.plot(
        facts,
        [stores[k]["spread"]["pass2"]["p99"] for k in spread],
        "s--",
        color="tab:blue",
        label="ours p99 (pass 2)",
    )
    ax.plot(
        facts,
        [stores[k]["spread"]["pass1"]["p99"] for k in spread],
        "x:",
        color="tab:purple",
        label="ours p99 (pass 1, cold users)",
    )
    single = s["search"]["single_user"]
    ax.plot(
        [single["facts"]],
        [single["after_reindex"]["manager"]["p50"]],
        "D",
        color="tab:orange",
        label=f"ours p50, 1 user of {single['facts']}",
    )
    probe = sorted(stores, key=int)
    ax.plot(
        [max(stores[k]["facts"], 1) for k in probe],
        [stores[k]["probe"]["search"]["p50"] for k in probe],
        "^:",
        color="tab:green",
        label=f"ours p50, fixed {results['plan']['probe_facts']}-fact user",
    )
    rec = [
        (500, "search/single500"),
        (10_000, "search/probe10000/pass2"),
        (100_000, "search/spread100000/pass2"),
    ]
    ax.plot(
        [x for x, _ in rec],
        [recorded_mean(k) for _, k in rec],
        "o-",
        color="tab:gray",
        label="original p50 (recorded; x=500: 1 user)",
    )
    ax.plot(
        [x for x, _ in rec],
        [recorded_mean(k, "p99") for _, k in rec],
        "s--",
        color="tab:gray",
        label="original p99 (recorded)",
    )
    ax.axhline(5.0, color="tab:red", linestyle="--", linewidth=1, label="target p99 5 ms")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("facts in the store")
    ax.set_ylabel("search (ms, log)")
    ax.set_title("search latency by store size")
    ax.legend(fontsize=7)

    ax = axes[2]
    names, stacks = [], []
    parts = ("interpreter_ms", "import_ms", "construct_ms", "first_get_context_ms")
    for key, entry in s["cold_start"]["runs"].items():
        if "/" in key:
            continue
        names.append(f"ours {key}")
        b = entry["breakdown_p50"]
        stacks.append(
            [b[p] for p in parts] + [max(0.0, entry["total"]["p50"] - sum(b[p] for p in parts))]
        )
        rec_entry = RECORDED.get(f"cold_start/{key}")
        if rec_entry:
            mean = recorded_mean(f"cold_start/{key}") or 0.0
            bd = rec_entry["breakdown"]
            avg = {
                p: sum(r[p] for r in bd) / len(bd)
                for p in ("import", "construct", "first_get_context")
            }
            names.append(f"orig. {key} (rec.)")
            stacks.append(
                [
                    0.0,
                    avg["import"],
                    avg["construct"],
                    avg["first_get_context"],
                    max(0.0, mean - sum(avg.values())),
                ]
            )
    colors = ["tab:purple", "tab:blue", "tab:orange", "tab:green", "lightgray"]
    legend = ["interpreter", "import", "construct", "first get_context", "rest"]
    bottoms = [0.0] * len(names)
    for i, (color, name) in enumerate(zip(colors, legend, strict=True)):
        values = [stack[i] for stack in stacks]
        ax.bar(names, values, bottom=bottoms, color=color, label=name)
        bottoms = [b + v for b, v in zip(bottoms, values, strict=True)]
    ax.axhline(250.0, color="tab:red", linestyle="--", linewidth=1, label="target 250 ms")
    ax.set_ylabel("ms (median)")
    ax.set_title("cold start to first get_context")
    ax.tick_params(axis="x", labelsize=7, rotation=20)
    ax.legend(fontsize=7)

    mode = "QUICK run, " if results["quick"] else ""
    fig.suptitle(
        f"DeerMem benchmark ({mode}{results['machine'].get('nproc')} CPUs, Python "
        f"{results['machine']['python']}); original = recorded, not measured here",
        fontsize=10,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)

"""What the load benchmarks of the gateway (gateway_bench, replicas_bench) report alike: the
machine a run was made on, and its table, printed and written as Markdown, with the JSON."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def add_output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", type=Path, help="write every number here")
    parser.add_argument("--png", type=Path, help="write a chart here (needs matplotlib)")
    parser.add_argument("--markdown", type=Path, help="write the table as Markdown here")


def header(
    benchmark: str, quick: bool, settings: dict[str, Any], load_before: Sequence[float]
) -> dict[str, Any]:
    """The start of a run's results: what ran, how, on which machine, when."""
    return {
        "benchmark": benchmark,
        "quick": quick,
        "settings": settings,
        "command": " ".join(
            [Path(sys.executable).name, "-m", f"benchmarks.{benchmark}_bench", *sys.argv[1:]]
        ),
        "machine": machine(load_before),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def machine(load_before: Sequence[float]) -> dict[str, Any]:
    """The machine, with its load average before the run (given) and now."""
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
    }


def markdown_table(columns: Sequence[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def publish(
    results: dict[str, Any],
    title: str,
    columns: Sequence[str],
    rows: list[list[str]],
    outputs: argparse.Namespace,
    chart: Callable[[dict[str, Any], Path], None],
) -> None:
    """Print the table and the load average; write the JSON, the Markdown table and the chart
    where `outputs` (of `add_output_options`) says."""
    from rich.console import Console
    from rich.table import Table

    table = Table(*columns, title=title)
    for row in rows:
        table.add_row(*row)
    Console().print(table)
    ran_on = results["machine"]
    before, after = ran_on["load_average_before"], ran_on["load_average_after"]
    print(f"load average before {before}, after {after} ({ran_on['cpus']} cpus)")
    if outputs.json:
        outputs.json.write_text(json.dumps(results, indent=2) + "\n")
    if outputs.markdown:
        outputs.markdown.write_text(markdown_table(columns, rows))
    if outputs.png:
        chart(results, outputs.png)

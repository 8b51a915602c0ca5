"""The DeerMem benchmark runs end to end in `--quick` mode and writes every section.

No timing assertions here: performance is measured by `make bench`, never asserted in tests.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SECTIONS = (
    "baseline",
    "ingest",
    "create_fact",
    "get_context",
    "search",
    "index_update",
    "reindex",
    "cold_start",
    "add",
    "extraction",
)
STATS = ("n", "p50", "p95", "p99")


def run_module(module: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """`python -m benchmarks.MODULE ARGS` in the repository, its output captured."""
    command = [sys.executable, "-m", f"benchmarks.{module}", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def assert_stats(stats: dict[str, Any]) -> None:
    assert set(STATS) <= set(stats)
    assert stats["n"] > 0


@pytest.mark.timeout(240)
def test_quick_benchmark_writes_every_section(tmp_path: Path) -> None:
    out = tmp_path / "deermem.json"
    command = [
        sys.executable,
        "-m",
        "benchmarks.deermem_bench",
        "--quick",
        "--json",
        str(out),
        "--markdown",
        str(tmp_path / "deermem.md"),
        "--workdir",
        str(tmp_path),
    ]
    chart = importlib.util.find_spec("matplotlib") is not None  # in the `bench` group only
    if chart:
        command += ["--png", str(tmp_path / "deermem.png")]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=230)
    assert done.returncode == 0, done.stderr[-4000:]

    results = json.loads(out.read_text())
    assert results["quick"] is True
    assert set(SECTIONS) <= set(results["sections"])
    assert results["recorded_source"].endswith("benchmarks/recorded.py")
    assert {"commit", "uncommitted_src_changes"} <= set(results["source"])
    s = results["sections"]

    assert_stats(s["baseline"]["fsync_write"])
    assert_stats(s["baseline"]["cpu_gauge"])
    assert_stats(s["baseline"]["cpu_gauge_end"])
    assert list(s["baseline"]["cpu_gauge_after"]) == [
        "create_fact",
        "cold_start",
        "add",
        "extraction",
        "get_context",
        *(f"store +{n}" for n in results["plan"]["others"][:-1]),
        f"store +{results['plan']['others'][-1]} (with reindex)",
        "index updates",
    ]
    create = s["create_fact"]
    assert create["final_bucket_size"] == results["plan"]["max_facts"]
    assert "create_fact/full" in create["rows"]
    for row in create["rows"].values():
        assert_stats(row)
        assert "storage.save" in row["components_p50"]
    for size in results["plan"]["context_sizes"]:
        entry = s["get_context"]["sizes"][str(size)]
        assert entry["facts"] == size
        assert_stats(entry["cached"])
        assert_stats(entry["uncached"])
    single = s["search"]["single_user"]
    for state in ("as_left_by_create_fact", "after_reindex"):
        assert_stats(single[state]["manager"])
        assert_stats(single[state]["bare_index"])
        assert single[state]["breakdown"]["steps_p50"]
    assert single["profile_after_reindex"]["top_own_time"]
    stores = s["search"]["stores"]
    assert set(stores) == {str(n) for n in results["plan"]["others"]}
    for others, store in stores.items():
        assert_stats(store["probe"]["search"])
        if others != "0":
            assert_stats(store["spread"]["pass1"])
            assert_stats(store["spread"]["pass2"])
    for entry in s["index_update"].values():
        assert_stats(entry["create_fact"])
        assert_stats(entry["apply"])
    assert s["reindex"]["facts"] == s["reindex"]["store_facts"]
    assert len(s["reindex"]["runs"]) == results["plan"]["reindex_runs"]
    assert_stats(s["reindex"]["seconds"])
    assert_stats(s["reindex"]["peak_rss_mb"])
    for run in s["reindex"]["runs"]:
        assert run["scan_calls"] > 0, "reading time is time inside storage.scan"
        assert run["reload_calls"] == 0
    for run in s["cold_start"]["runs"].values():
        assert_stats(run["total"])
        assert set(run["breakdown_p50"]) >= {"import_ms", "construct_ms", "first_get_context_ms"}
    assert s["cold_start"]["import_profile"]["top_packages"]
    add = s["add"]
    assert add["extractions_during_measurement"] == 0, "add() must be timed without extractions"
    series = [add["new_thread"]]
    assert list(add["by_turns"]) == [str(n) for n in results["plan"]["thread_turns"]]
    for states in add["by_turns"].values():
        assert set(states) == {"pending", "extracted"}
        series += states.values()
    for entry in series:
        assert_stats(entry)
        assert_stats(entry["cpu"])
        assert "queue (SQLite)" in entry["components_p50"]
    assert add["conversation"]["turns"] == 10
    extraction = s["extraction"]
    for key in ("processing", "model_invoke", "processing_without_model"):
        assert_stats(extraction[key])
    assert_stats(extraction["end_to_end_without_model"])
    assert extraction["succeeded"] == extraction["items"] == results["plan"]["extraction_items"]
    assert extraction["facts_after"] - extraction["facts_before"] > extraction["items"]
    keys = {row["key"] for row in results["rows"]}
    assert {"add/new_thread", "add/10_turns/pending", "extraction/processing"} <= keys
    assert "extraction/end_to_end_without_model" in keys
    assert sum(target["target"].startswith("add() p99") for target in results["targets"]) == 2

    assert results["rows"]
    assert all(isinstance(target["met"], bool) for target in results["targets"])
    report = (tmp_path / "deermem.md").read_text()
    assert report.startswith("| measurement")
    assert "CPU gauge p50" in report
    assert "ms after get_context," in report
    if chart:
        assert (tmp_path / "deermem.png").stat().st_size > 0
    assert not list(tmp_path.glob("deermem-bench-*")), "the temporary stores were not removed"


@pytest.mark.timeout(120)
def test_only_runs_the_parts_asked_for(tmp_path: Path) -> None:
    out = tmp_path / "add.json"
    command = [sys.executable, "-m", "benchmarks.deermem_bench", "--quick", "--only", "add"]
    command += ["--json", str(out), "--markdown", str(tmp_path / "add.md")]
    done = subprocess.run(
        [*command, "--workdir", str(tmp_path)], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-4000:]

    results = json.loads(out.read_text())
    assert results["parts"] == ["add"]
    assert set(results["sections"]) == {"baseline", "add"}
    assert {row["section"] for row in results["rows"]} == {"add"}
    assert [t["target"][:12] for t in results["targets"]] == ["add() p99 < "] * 2
    markdown = (tmp_path / "add.md").read_text()
    assert "| add(), new 10-turn thread |" in markdown
    assert "create_fact" not in markdown
    assert "manager.search" not in markdown


def test_only_refuses_an_unknown_part_and_the_chart() -> None:
    base = [sys.executable, "-m", "benchmarks.deermem_bench", "--quick"]
    for extra, error in (
        (["--only", "nope"], "invalid choice: 'nope'"),
        (["--only", "add", "--png", "x.png"], "--png draws every part"),
    ):
        done = subprocess.run([*base, *extra], cwd=REPO, capture_output=True, text=True)
        assert done.returncode == 2
        assert error in done.stderr


def test_disk_probe_times_every_case_in_the_directory_given(tmp_path: Path) -> None:
    out = tmp_path / "disk.json"
    done = run_module(
        "disk_probe", "--samples", "5", "--dir", str(tmp_path), "--json", str(out), timeout=120
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())
    assert "journal" in rows
    assert "5 new file(s) + directory, threads" in rows
    assert "unlink of a synced file" in rows
    for stats in rows.values():
        assert_stats(stats)
        assert stats["n"] == 5
    assert [p.name for p in tmp_path.iterdir()] == ["disk.json"], "its workspace is removed"


@pytest.mark.timeout(180)
def test_first_search_probe_builds_its_store_once_and_times_both_passes(tmp_path: Path) -> None:
    store, out = tmp_path / "store", tmp_path / "probe.json"
    args = ("--quick", "--runs", "2", "--workdir", str(store), "--json", str(out))
    for _ in range(2):  # the second run reuses the store the first one built
        done = run_module("first_search_probe", *args, timeout=150)
        assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["facts"] == 1000
    assert len(report["runs"]) == 2
    for measured in report["runs"]:
        for part in ("pass1", "pass2", "pass1_cpu", "pass2_cpu"):
            assert_stats(measured[part])
            assert measured[part]["n"] == report["queries"]
        assert measured["mean_hits"] > 0
    assert set(report["median"]) >= {"pass1_p99", "pass1_cpu_p99"}


@pytest.mark.timeout(240)
def test_engines_benchmark_measures_both_engines_alike(tmp_path: Path) -> None:
    out = tmp_path / "engines.json"
    done = run_module("engines_bench", "--quick", "--json", str(out), timeout=220)
    assert done.returncode == 0, done.stderr
    results = json.loads(out.read_text())
    assert set(results) == {"files", "postgres"}
    for part in results.values():
        assert_stats(part["create_fact"]["all"])
        assert_stats(next(iter(part["get_context_uncached"].values())))
        (search,) = part["search"].values()
        assert search["facts"] == 2_000
        assert_stats(search["first_pass"])
        assert_stats(search["second_pass"])
    assert "| postgres | search 2000/20 second pass |" in done.stdout


def test_engines_benchmark_refuses_an_unknown_engine() -> None:
    done = run_module("engines_bench", "--engines", "files,mongo", timeout=60)
    assert done.returncode == 2
    assert "unknown engines: mongo" in done.stderr

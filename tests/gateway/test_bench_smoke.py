"""The gateway and replica benchmarks run end to end in `--quick` mode; no timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


def quick_results(benchmark: str, tmp_path: Path) -> dict[str, Any]:
    """The JSON of `benchmarks.<benchmark>_bench --quick`, which must succeed."""
    out = tmp_path / f"{benchmark}.json"
    command = [sys.executable, "-m", f"benchmarks.{benchmark}_bench", "--quick", "--json", str(out)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=170)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results: dict[str, Any] = json.loads(out.read_text())
    return results


@pytest.mark.timeout(180)
def test_quick_gateway_benchmark_reports_every_scenario(tmp_path: Path) -> None:
    results = quick_results("gateway", tmp_path)
    scenarios = results["scenarios"]
    assert set(scenarios) == {"get_memory", "get_memory+writers", "search", "search+writers"}
    for name, scenario in scenarios.items():
        assert scenario["reads"]["n"] > 0, name
        assert scenario["reads"]["non_2xx"] == {}, name
        if name.endswith("+writers"):
            assert scenario["writes"]["n"] > 0
            assert scenario["writes"]["non_2xx"] == {}
    assert "load_average_before" in results["machine"]


@pytest.mark.timeout(180)
def test_quick_replicas_benchmark_measures_one_and_three_replicas(tmp_path: Path) -> None:
    runs = quick_results("replicas", tmp_path)["runs"]
    assert [(run["engine"], run["replicas"]) for run in runs] == [("files", 1), ("files", 3)]
    for run in runs:
        assert run["requests"] > 0
        assert run["errors"] == {}
        assert "POST /api/chat/{thread}" in run["routes"]

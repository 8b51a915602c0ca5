"""The LoCoMo plot step draws the committed results: DeerMem's methods measured, the others marked
recorded, every category and the overall recall."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from benchmarks import locomo_plot

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "locomo.json"


def test_series_take_every_category_from_the_results() -> None:
    results = json.loads(RESULTS.read_text(encoding="utf-8"))
    series = locomo_plot.series(results, "turns")
    drawn = {label: (values, recorded) for label, values, recorded in series}
    values, recorded = drawn["DeerMem lexical"]
    run = results["runs"]["turns"]["lexical"]
    assert not recorded
    assert values == [run["by_category"][c]["R@10"] for c in "1234"] + [run["all"]["R@10"]]
    assert drawn["mem0 (recorded)"][1] is True


def test_the_observations_panel_has_the_create_fact_run() -> None:
    results = json.loads(RESULTS.read_text(encoding="utf-8"))
    drawn = {label: values for label, values, _ in locomo_plot.series(results, "observations")}
    run = results["runs"]["observations (create_fact)"]["default"]
    assert drawn["DeerMem default, create_fact"][-1] == run["all"]["R@10"]


def test_the_bounds_of_reranking_come_from_the_default_ranking() -> None:
    results = json.loads(RESULTS.read_text(encoding="utf-8"))
    marks = locomo_plot.bounds(results, "observations")
    bound = results["runs"]["observations"]["default"]["rerank_bound"]
    assert marks["ceiling"] == [bound[g]["ceiling"] for g in ("1", "2", "3", "4", "all")]
    assert marks["R@20"][-1] == bound["all"]["R@20"] <= marks["R@50"][-1]
    assert locomo_plot.bounds(results, "observations (create_fact)") == {}


@pytest.mark.skipif(
    importlib.util.find_spec("matplotlib") is None, reason="matplotlib is in the bench group"
)
def test_writes_a_png(tmp_path: Path) -> None:
    png = tmp_path / "locomo.png"
    locomo_plot.main(["--json", str(RESULTS), "--png", str(png)])
    assert png.read_bytes().startswith(b"\x89PNG")

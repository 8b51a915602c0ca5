"""The LoCoMo retrieval benchmark runs end to end on the first conversation.

The dataset (CC BY-NC) is never in the repository: the test skips when it is absent. No timing
assertions: retrieval quality and latency are measured by the benchmark, not asserted here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from benchmarks.locomo_retrieval import (
    BOUND_KS,
    CONTRACT,
    CONTRACT_TOP_K,
    KS,
    REFERENCE,
    THREAD_CONTEXTS,
    dataset_path,
    parse_ids,
)

REPO = Path(__file__).resolve().parents[1]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "benchmarks.locomo_retrieval", *args]
    return subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=120, env=env, check=False
    )


def test_evidence_parsing_follows_the_protocol() -> None:
    assert parse_ids(["D8:6; D9:17", "D:11:26", "D", "D1:3", "D1:3"]) == [
        "D8:6",
        "D9:17",
        "D1:3",
        "D1:3",
    ]


def test_missing_dataset_skips_with_a_message(tmp_path: Path) -> None:
    out = tmp_path / "locomo.json"
    env = os.environ | {"DEERFLOW_LOCOMO": str(tmp_path / "absent.json")}
    done = run("--json", str(out), env=env)
    assert done.returncode == 0, done.stderr
    assert "not found" in done.stderr
    assert not out.exists()


@pytest.mark.timeout(150)
def test_first_conversation(tmp_path: Path) -> None:
    if not dataset_path().is_file():
        pytest.skip(f"LoCoMo dataset not found at {dataset_path()}")
    out = tmp_path / "locomo.json"
    done = run("--conversations", "1", "--json", str(out))
    assert done.returncode == 0, done.stderr[-4000:]

    results = json.loads(out.read_text())
    assert results["dataset"]["conversations"] == 1
    assert results["recorded_source"].endswith("benchmarks/locomo_retrieval.py")
    runs = results["runs"]
    contract = {"observations" + CONTRACT, "observations+dates" + CONTRACT}
    assert set(runs) == {"turns", "turns+dates", "observations", "observations+dates"} | contract
    for documents in contract:
        # Written with create_fact, asked with search(top_k=10): recall only up to 10.
        (measured,) = runs.pop(documents).values()
        ks = [k for k in KS if k <= CONTRACT_TOP_K]
        recalls = [measured["all"][f"R@{k}"] for k in ks]
        assert recalls == sorted(recalls)
        assert f"R@{KS[-1]}" not in measured["all"]
        assert 0 < measured["stored_facts"] <= runs["observations"]["default"]["documents"]
        assert measured["questions"] == runs["observations"]["default"]["questions"]
    for documents, methods in runs.items():
        expected = {"lexical", "hybrid", "semantic", "default"}
        expected |= {
            f"{m}+thread {share}" for m in ("lexical", "hybrid") for share in THREAD_CONTEXTS
        }
        if "+dates" not in documents:
            expected.add(REFERENCE)
        assert set(methods) == expected
        for measured in methods.values():
            assert measured["documents"] > 0
            assert measured["questions"] == measured["all"]["n"] > 0
            assert set(measured["by_category"]) <= {"1", "2", "3", "4"}
            for k in KS:
                assert 0.0 <= measured["all"][f"all@{k}"] <= measured["all"][f"R@{k}"] <= 1.0
            recalls = [measured["all"][f"R@{k}"] for k in KS]
            assert recalls == sorted(recalls)
            assert measured["latency_ms"]["n"] == measured["questions"]
            assert len(measured["halves_r10"]) == 2
        # Read to its top 100, the default ranking keeps the same top 10 and bounds reranking
        # below the share of the evidence any document cites.
        default = methods["default"]
        for group, bound in default["rerank_bound"].items():
            top10 = default["all"] if group == "all" else default["by_category"][group]
            assert bound["R@10"] == pytest.approx(top10["R@10"])
            recalls = [bound[f"R@{k}"] for k in BOUND_KS]
            assert recalls == sorted(recalls)
            assert recalls[-1] <= bound["ceiling"] + 1e-9
    assert runs["turns"]["lexical"]["ceiling"]["all"] == 1.0
    assert results["protocol"]["embedding_model"] is not None

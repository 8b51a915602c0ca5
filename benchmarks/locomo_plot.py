"""Plot the LoCoMo retrieval results: recall@10 per question category, one bar per method.

Reads what `benchmarks.locomo_retrieval --json` wrote and writes a PNG:

    uv run --group bench python -m benchmarks.locomo_plot \
        [--json benchmarks/results/locomo.json] [--png benchmarks/results/locomo.png]

One panel per kind of document: turns, then observation facts (with the observations written
through `create_fact` and asked with `search(top_k=10)`). DeerMem's methods are measured by that
run; the recorded rows (mem0 and FTS5's own `bm25()` under the same protocol) are drawn hatched,
since this project did not measure them. Markers over each category show how far reranking could
go (`rerank_bound` of the default ranking): the evidence in its top 20 and top 50, and the share
any document cites.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Final

RESULTS: Final = Path(__file__).resolve().parent / "results"
# DeerMem's methods as the benchmark names them, in the order drawn; those a run lacks are left out.
MEASURED: Final = ("lexical", "hybrid", "hybrid+thread 0.5", "default")
RECORDED: Final = {
    "fts5_porter_stop": "FTS5 bm25() (recorded)",
    "mem0 (faiss+MiniLM)": "mem0 (recorded)",
}
PANELS: Final = (("turns", ()), ("observations", ("observations (create_fact)",)))
"""Each panel's documents, and the runs whose `default` is drawn beside their methods."""


def series(results: dict[str, Any], documents: str) -> list[tuple[str, list[float], bool]]:
    """(label, R@10 of categories 1..4 then all, recorded?) for each method drawn."""
    categories = sorted(results["protocol"]["categories"])
    drawn: list[tuple[str, list[float], bool]] = []

    def add(label: str, run: dict[str, Any]) -> None:
        values = [run["by_category"][c]["R@10"] for c in categories] + [run["all"]["R@10"]]
        drawn.append((label, values, False))

    runs = results["runs"][documents]
    for method in MEASURED:
        if method in runs:
            add(f"DeerMem {method}", runs[method])
    for extra in dict(PANELS)[documents]:
        if extra in results["runs"]:
            add(f"DeerMem default, {extra.removeprefix(documents).strip(' ()')}",
                results["runs"][extra]["default"])  # fmt: skip
    recorded = results.get("recorded", {}).get(documents, {})
    for key, label in RECORDED.items():
        if key in recorded:
            drawn.append((label, [*recorded[key]["cat10"], recorded[key]["r"][2]], True))
    return drawn


BOUNDS: Final = (("R@20", "v", "default's top 20: a top-20 reranker's limit"),
                 ("R@50", "^", "default's top 50"),
                 ("ceiling", "_", "cited by any document"))  # fmt: skip
"""The markers of `rerank_bound`: its key, the marker, the legend's words."""


def bounds(results: dict[str, Any], documents: str) -> dict[str, list[float]]:
    """The default ranking's `rerank_bound` values, categories 1..4 then all, by `BOUNDS` key;
    empty for a run without it."""
    bound = results["runs"][documents].get("default", {}).get("rerank_bound")
    if bound is None:
        return {}
    groups = [*sorted(results["protocol"]["categories"]), "all"]
    return {key: [bound[group][key] for group in groups] for key, _, _ in BOUNDS}


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = results["protocol"]["categories"]
    labels = [f"{c} {names[c]}" for c in sorted(names)] + ["all"]
    panels = [documents for documents, _ in PANELS if documents in results["runs"]]
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 5.4 * len(panels)), dpi=80, squeeze=False)
    for ax, documents in zip(axes[:, 0], panels, strict=True):
        drawn = series(results, documents)
        width = 0.8 / len(drawn)
        for i, (label, values, recorded) in enumerate(drawn):
            xs = [x - 0.4 + width * (i + 0.5) for x in range(len(labels))]
            ax.bar(xs, values, width, label=label, hatch="//" if recorded else None, alpha=0.85)
        marks = bounds(results, documents)
        for key, marker, words in BOUNDS:
            if key in marks:
                ax.scatter(range(len(labels)), marks[key], marker=marker, s=90, color="black",
                           zorder=3, label=words)  # fmt: skip
        ax.set_xticks(range(len(labels)), labels)
        ax.set_ylabel("evidence recall@10")
        ax.set_ylim(0, 1.05)
        ax.set_title(f"LoCoMo retrieval by question category ({documents} as documents)")
        ax.legend(fontsize="small", ncols=3, loc="upper center", bbox_to_anchor=(0.5, -0.08))
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=RESULTS / "locomo.json")
    parser.add_argument("--png", type=Path, default=RESULTS / "locomo.png")
    args = parser.parse_args(argv)
    plot(json.loads(args.json.read_text(encoding="utf-8")), args.png)
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()

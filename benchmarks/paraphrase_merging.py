"""Near-duplicate merging on DeerMem's own paraphrase sets: how many paraphrases the gate merges
and how many look-alike controls it wrongly merges, for the current gate and the former one.

The sets are `tests/deermem/data/paraphrases.json` (written for DeerMem's tests): the gate was
tuned on `dev`, `check`, `holdout`, `holdout2` and `holdout3`; `holdout4`, written before that
tuning, was measured once with the tuned gate and is never tuned on. The gate is the one
extraction applies with `fact_dedup_enabled` (token Jaccard at
`fact_dedup_similarity_threshold` unless the facts `paraphrase.differs`, or
`paraphrase.paraphrase_scores` at `fact_dedup_semantic_threshold`); the former one merged at token
Jaccard >= 0.7 or whole-fact cosine >= 0.95. Usage:
`uv run python -m benchmarks.paraphrase_merging [--json PATH]`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig
from deerflow.agents.memory.backends.deermem.deermem.embeddings import Embedder
from deerflow.agents.memory.backends.deermem.deermem.governance import content_tokens, jaccard
from deerflow.agents.memory.backends.deermem.deermem.paraphrase import differs, paraphrase_scores

HERE: Final = Path(__file__).resolve().parent
SETS: Final = HERE.parent / "tests" / "deermem" / "data" / "paraphrases.json"
DEFAULT_JSON: Final = HERE / "results" / "paraphrases.json"
THRESHOLD: Final[float] = DeerMemConfig.model_fields["fact_dedup_semantic_threshold"].default
JACCARD: Final[float] = DeerMemConfig.model_fields["fact_dedup_similarity_threshold"].default
FORMER_COSINE: Final = 0.95
SET_NAMES: Final = ("dev", "check", "holdout", "holdout2", "holdout3", "holdout4")

Gate = Callable[[str, str], bool]


def gates(model: Embedder) -> dict[str, Gate]:
    def current(new: str, stored: str) -> bool:
        overlap = jaccard(content_tokens(new), content_tokens(stored))
        lexical = overlap >= JACCARD and not differs(new, stored, model.text_similarities)
        scores = paraphrase_scores(new, [stored], model.text_similarities, threshold=THRESHOLD)
        return lexical or scores[0] >= THRESHOLD

    def former(new: str, stored: str) -> bool:
        lexical = jaccard(content_tokens(new), content_tokens(stored)) >= JACCARD
        return lexical or model.text_similarities(new, [stored])[0] >= FORMER_COSINE

    return {"current": current, "former": former}


def measure(cases: dict[str, Any], gate: Gate) -> dict[str, Any]:
    paraphrases = [(p, f["stored"]) for f in cases["facts"] for p in f["paraphrases"]]
    controls = [(c["proposed"], c["stored"]) for c in cases["controls"]]
    missed = [new for new, stored in paraphrases if not gate(new, stored)]
    wrong = [new for new, stored in controls if gate(new, stored)]
    return {
        "paraphrases": len(paraphrases),
        "merged": len(paraphrases) - len(missed),
        "controls": len(controls),
        "controls_merged": len(wrong),
        "not_merged": missed,
        "wrongly_merged": wrong,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="write the numbers here")
    args = parser.parse_args(argv)
    sets = json.loads(SETS.read_text())
    model = Embedder()
    results = {
        name: {which: measure(sets[name], gate) for which, gate in gates(model).items()}
        for name in SET_NAMES
    }
    for name, by_gate in results.items():
        for which, r in by_gate.items():
            print(
                f"{name:8} {which:7} paraphrases merged {r['merged']}/{r['paraphrases']}, "
                f"controls merged {r['controls_merged']}/{r['controls']}"
            )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    record = {"threshold": THRESHOLD, "former_cosine": FORMER_COSINE, "sets": results}
    args.json.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()

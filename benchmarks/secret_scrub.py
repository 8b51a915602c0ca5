"""How often the secret detector refuses: secrets it must refuse, benign facts it must not.

Three corpora: the 50 secrets and the benign facts committed in `tests/secret_corpus.py`, and
LoCoMo's observations (benign facts about people's lives) and dialogue turns. The dataset
(CC BY-NC 4.0) is read at run time where `benchmarks.locomo_retrieval` finds it
(`DEERFLOW_LOCOMO`) and never copied; without it that row is skipped. Refused LoCoMo texts are
printed so that a false positive can be read. Usage:
`uv run python -m benchmarks.secret_scrub [--first N]`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from tests.secret_corpus import BENIGN, SECRETS

from benchmarks.locomo_retrieval import dataset_path
from deerflow.agents.memory.manager import find_secret

__all__ = ["locomo_observations", "locomo_turns", "main", "refused"]

_SESSION = re.compile(r"session_\d+")


def refused(texts: Iterable[str]) -> list[str]:
    """The texts the detector refuses."""
    return [text for text in texts if find_secret(text) is not None]


def locomo_observations(path: Path) -> list[str]:
    """Every observation of every speaker in every session, in the dataset's order."""
    conversations = json.loads(path.read_text(encoding="utf-8"))
    return [
        text
        for conversation in conversations
        for session in conversation["observation"].values()
        for observations in session.values()
        for text, _evidence in observations
    ]


def locomo_turns(path: Path) -> list[str]:
    """The text of every dialogue turn: raw chat, as the extraction pipeline reads it."""
    conversations = json.loads(path.read_text(encoding="utf-8"))
    return [
        turn["text"]
        for conversation in conversations
        for key, turns in conversation["conversation"].items()
        if _SESSION.fullmatch(key)
        for turn in turns
    ]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--first", type=int, default=1000, help="also report the first N LoCoMo observations"
    )
    args = parser.parse_args(argv)
    rows = [("secret corpus (must refuse)", len(refused(SECRETS)), len(SECRETS))]
    rows.append(("benign corpus (must pass)", len(refused(BENIGN)), len(BENIGN)))
    path = dataset_path()
    flagged: list[str] = []
    if path.is_file():
        observations = locomo_observations(path)
        flagged = refused(observations)
        first = observations[: args.first]
        rows.append((f"LoCoMo, first {len(first)} observations", len(refused(first)), len(first)))
        rows.append(("LoCoMo, all observations", len(flagged), len(observations)))
        turns = locomo_turns(path)
        flagged += refused(turns)
        rows.append(("LoCoMo, all dialogue turns", len(refused(turns)), len(turns)))
    else:
        print(
            f"LoCoMo dataset not found at {path}: skipping (set DEERFLOW_LOCOMO)", file=sys.stderr
        )
    for name, count, total in rows:
        print(f"{name:40} refused {count:5} of {total:5} ({100 * count / total:.2f} %)")
    for text in flagged:
        print(f"  refused: {text} ({find_secret(text)})")


if __name__ == "__main__":
    main()

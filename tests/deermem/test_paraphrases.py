"""Paraphrase merging on DeerMem's own sets (tests/deermem/data/paraphrases.json): end to end
with a scripted model that always proposes a new fact, so the deterministic gate alone decides,
on `dev` + `check` + `holdout` + `holdout2` (the sets it was tuned on) and on `holdout3`
(measured, never tuned on)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage

from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from tests.deermem.pipeline_helpers import ScriptedModel, reply

SETS = json.loads((Path(__file__).parent / "data" / "paraphrases.json").read_text())
TUNED_ON = ("dev", "check", "holdout", "holdout2")


def proposals(dev: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    """`(stored, proposed, category, is a paraphrase)` for every case of the set."""
    cases = [
        (fact["stored"], text, fact["category"], True)
        for fact in dev["facts"]
        for text in fact["paraphrases"]
    ]
    cases += [(c["stored"], c["proposed"], c["category"], False) for c in dev["controls"]]
    return cases


def merges(tmp_path: Path, cases: list[tuple[str, str, str, bool]]) -> list[tuple[str, bool]]:
    """Each case through extraction by a model that always proposes it as a new fact: the
    `(proposed, is a paraphrase)` that were merged into their stored fact."""
    model = ScriptedModel(
        responses=[
            reply({"content": text, "category": category, "confidence": 0.9})
            for _, text, category, _ in cases
        ]
    )
    manager = DeerMemMemoryManager.from_config(
        {"storage_path": str(tmp_path), "fact_dedup_enabled": True},
        host_llm_factory=lambda: model,
    )
    # Each stored fact in a user of its own: the set's stored facts are look-alikes of each
    # other ("Uses pnpm for JavaScript", "Prefers pnpm over npm for JavaScript projects").
    users = {text: f"u{n}" for n, text in enumerate(dict.fromkeys(s for s, *_ in cases))}
    for text, category in dict.fromkeys((s, c) for s, _, c, _ in cases):
        manager.create_fact(text, category, 0.8, user_id=users[text])
    merged = []
    for n, (target, text, _, paraphrase) in enumerate(cases):
        user = users[target]
        conversation = [HumanMessage(text, id=f"h{n}"), AIMessage("Noted.", id=f"a{n}")]
        manager.add(f"t{n}", conversation, user_id=user)
        assert manager.shutdown_flush(10) is True
        facts = manager.reload_memory(user_id=user)["facts"]
        added = [f["id"] for f in facts if f["content"] == text]
        if added:  # kept apart: remove it, so the next case meets the same bucket
            manager.delete_fact(added[0], user_id=user)
            continue
        merged.append((text, paraphrase))
        (fact,) = facts
        assert fact["content"] == target
        assert fact["lastConfirmedAt"]
    manager.close()
    return merged


def test_a_model_that_always_proposes_a_new_fact_is_caught_by_the_gate(tmp_path: Path) -> None:
    figures = {}
    for name in TUNED_ON:
        cases = proposals(SETS[name])
        merged = merges(tmp_path / name, cases)
        assert [text for text, paraphrase in merged if not paraphrase] == [], name
        figures[name] = (len(merged), sum(paraphrase for *_, paraphrase in cases))
    # The figures of `python -m benchmarks.paraphrase_merging`.
    assert figures == {
        "dev": (15, 18),
        "check": (13, 15),
        "holdout": (13, 21),
        "holdout2": (18, 24),
    }


def test_a_value_swapped_in_a_long_fact_is_kept_though_most_words_are_shared(
    tmp_path: Path,
) -> None:
    # Five of seven content words shared: word overlap alone would merge them.
    stored = "Drinks green tea with honey every morning"
    assert (
        merges(tmp_path, [(stored, stored.replace("morning", "evening"), "behavior", False)]) == []
    )


def test_the_held_out_set_merges_as_measured(tmp_path: Path) -> None:
    merged = merges(tmp_path, proposals(SETS["holdout3"]))
    assert sum(paraphrase for _, paraphrase in merged) == 18  # of 30
    # Five look-alikes of 27 are merged, kept as measured (the gate is not tuned on this set):
    # each changes the first word to one the model puts at least `REWORDED_VERB` close (gives /
    # receives 0.36, rents / owns 0.45, manager / colleague 0.43, daughter / son 0.519, just under
    # `SUBSTITUTION`) or at `SYNONYM` (lends / borrows 0.87).
    assert [text for text, paraphrase in merged if not paraphrase] == [
        "Receives money from a local animal shelter",
        "Owns a flat in Rome",
        "Borrows money from friends",
        "Son plays football",
        "Colleague's name is Priya",
    ]


STORED = (
    "Lives in Lisbon",
    "Works as a data engineer",
    "Is allergic to peanuts",
    "Drinks green tea every morning",
    "Prefers dark mode in editors",
    "Has a dog named Rex",
    "Plays the guitar in a jazz band",
    "Speaks fluent Portuguese",
)


def nearest_block(tmp_path: Path, **settings: Any) -> str | None:
    """The <nearest_facts> block of the extraction prompt for a conversation about moving."""
    ScriptedModel.prompts.clear()
    model = ScriptedModel(responses=[reply()])
    manager = DeerMemMemoryManager.from_config(
        {"storage_path": str(tmp_path), **settings}, host_llm_factory=lambda: model
    )
    for text in STORED:
        manager.create_fact(text, "context", 0.9, user_id="u")
    said = [HumanMessage("These days I am based in Lisbon.", id="h"), AIMessage("Nice.", id="a")]
    manager.add("t", said, user_id="u")
    assert manager.shutdown_flush(10) is True
    manager.close()
    (prompt,) = ScriptedModel.prompts
    human = str(prompt[-1].content)
    if "<nearest_facts>" not in human:
        return None
    block = human.split("<nearest_facts>\n")[1].split("\n</nearest_facts>")[0]
    assert human.index("</nearest_facts>") < human.index("<conversation>")  # beside it
    return block


def test_the_prompt_shows_the_stored_facts_nearest_to_the_conversation(tmp_path: Path) -> None:
    block = nearest_block(tmp_path / "hybrid")
    assert block is not None
    lines = block.splitlines()
    assert len(lines) == 5  # the nearest five of eight
    assert lines[0].endswith("] Lives in Lisbon")
    assert nearest_block(tmp_path / "lexical", retrieval_embeddings=False) is None

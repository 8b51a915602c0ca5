"""Paraphrase merging on DeerMem's own sets (tests/deermem/data/paraphrases.json): end to end
with a scripted model that always proposes a new fact, so the deterministic gate alone decides,
on `dev` + `check` + `holdout` + `holdout2` + `holdout3` (the sets it was tuned on) and on
`holdout4` (measured once, never tuned on); and the gate's rules (`paraphrase`) one by one."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage

from deerflow.agents.memory.backends.deermem import DeerMemMemoryManager
from deerflow.agents.memory.backends.deermem.deermem.paraphrase import (
    clashes,
    content_words,
    differs,
)
from tests.deermem.pipeline_helpers import ScriptedModel, reply

SETS = json.loads((Path(__file__).parent / "data" / "paraphrases.json").read_text())
TUNED_ON = ("dev", "check", "holdout", "holdout2", "holdout3")


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
        "holdout": (14, 21),
        "holdout2": (20, 24),
        "holdout3": (20, 30),
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
    merged = merges(tmp_path, proposals(SETS["holdout4"]))
    # Measured once with the tuned gate, never tuned on: 27 of 36 then; 30 since a word on both
    # sides of a comparison ("dark chocolate over milk chocolate") no longer reads as reordered.
    assert sum(paraphrase for _, paraphrase in merged) == 30
    # Three look-alikes of 32 are merged, kept as measured: an opposite verb outside the converse
    # pairs (enjoys / avoids), "before" / "after" (stop words, so the facts' content words are the
    # same), and one value said in two words swapped for one ("vitamin D" / "iron").
    assert [text for text, paraphrase in merged if not paraphrase] == [
        "Avoids hiking in the mountains",
        "Goes to bed after midnight",
        "Takes iron supplements in winter",
    ]


def test_a_word_on_both_sides_of_a_comparison_is_not_a_reordering() -> None:
    stored = "Prefers dark chocolate over milk chocolate"
    assert not clashes("The user likes dark chocolate better than milk chocolate", stored)
    assert clashes("Prefers milk chocolate over dark chocolate", stored)


def test_the_people_of_a_users_life_are_a_closed_class() -> None:
    # The model puts daughter / son 0.519 and manager / colleague 0.43 apart: a swap it cannot see.
    assert clashes("Son plays football", "Daughter plays football")
    assert clashes("Colleague's name is Priya", "Manager's name is Priya")
    assert clashes("Mom is a dentist", "Aunt is a dentist")
    assert not clashes("User's grandma is based in Porto", "Grandmother lives in Porto")
    assert not clashes("Son plays football with a friend", "Son plays football")


def test_the_two_sides_of_a_converse_verb_never_merge() -> None:
    # Lends / borrows are 0.87 apart for the model, synonyms to the swap check.
    assert clashes("Borrows money from friends", "Lends money to friends")
    assert clashes("Owns a flat in Rome", "Rents a flat in Rome")
    assert clashes("Received money from a shelter", "Gave money to a shelter")  # irregular forms
    assert clashes("Left the chess club", "Joined the chess club")
    assert not clashes("Sold the old car", "Sells the old car")


def test_forms_of_one_word_are_one_content_word() -> None:
    def same(a: str, b: str) -> bool:
        return set(content_words(a)) == set(content_words(b))

    assert same("User's unit tests are written with pytest", "Writes unit tests with pytest")
    assert same("The user's cat is called Miso", "Has a cat named Miso")
    assert same("Grandma bought a bike", "Grandmother buys a bike")
    assert not same("The user's cat is called Miso", "Has a dog named Miso")


def test_the_verb_comes_after_the_relative_a_fact_is_about() -> None:
    def halfway(text: str, others: Sequence[str]) -> list[float]:
        """Every two words between `REWORDED_VERB` and `SUBSTITUTION`."""
        return [0.4] * len(others)

    # The one changed word is the verb (lives / is based), reworded; after it, a value swapped.
    assert not differs("User's grandma is based in Porto", "Grandmother lives in Porto", halfway)
    assert differs("Grandmother lives in Faro", "Grandmother lives in Porto", halfway)


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

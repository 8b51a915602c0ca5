"""LoCoMo evidence recall@k through DeerMem's real retrieval index (docs/benchmarks.md).

Protocol and metric are those of the recorded rows in `RECORDED` ("the anchors", an external run
whose numbers docs/benchmarks.md shows), reproduced here:

* Questions of categories 1..4 whose evidence, once parsed (split on `;` and whitespace, keep only
  `D<n>:<m>`, drop ids that match no turn, duplicates kept), is not empty: 1535 on the full set.
* (a) turns: one document per dialogue turn of every session, text =
  `speaker + ' ' + text + ' ' + blip_caption`; (b) observations: one document per
  `observation` fact, counted as retrieving its dia_id(s).
* Each conversation is one scope of one `RetrievalIndex` (user_key = the conversation's
  `sample_id`, agent `__default__`); every fact has the same confidence and time, so only text
  relevance ranks. Query = the question verbatim, `RetrievalIndex.search(..., limit=20)`.
* recall@k = |evidence ∩ top-k| / |evidence| per question, averaged per category and overall;
  all-evidence recall@k = share of questions whose evidence ids are all in the top k.

Beyond the anchors, each document set is also indexed with its session's date as the facts'
`event_time` ("+dates": DeerMem indexes it as words, `8 May 2023`, as it would for a fact
extracted from that session), and each is searched by three methods:

* `lexical`: the index without a model, DeerMem's default;
* `hybrid`: with the shipped embedding model (`retrieval_embeddings: true`), fused with the
  default `retrieval_semantic_weight` (0.3), without thread context;
* `semantic`: the same index with semantic weight 1.0, the model's ranking alone.

Each fact also records its session as its conversation thread and, as the time it was written,
the session's date plus one second per turn (an observation: per turn it cites), as DeerMem
records `source.threadId` and `createdAt` for a fact extracted from a conversation. The
`+thread` rows search with `retrieval_thread_context` (0.25 and 0.5): each hit lends part of its
score to the facts written next to it in its thread (`deermem/threads.py`). The `default` row is
DeerMem's default settings: hybrid, with the default thread context (0.5); `benchmarks.locomo_plot`
draws recall@10 per category from the JSON.

The `default` row also carries `rerank_bound`: the same ranking read to its top 100, with R@k
for k in `BOUND_KS` per category, beside the share of the evidence that any document cites (1.0
for turns). R@k of the top k is the most that reordering those k candidates (a reranker of any
quality) could bring into the top 10, and the ceiling is the most any method could.

The `create_fact` runs ask DeerMem the way an application does, through the public
`MemoryManager` contract under default settings (`max_facts` raised to 500 so that no observation
is evicted): each observation is written with `create_fact` (content only: the contract takes no
thread or time, so thread context has nothing to spread over), in session order, one DeerMem user
per conversation, and each question is asked with `search(top_k=10)`, so only R@1, R@5 and R@10
are reported. `observations (create_fact)` writes the observation verbatim;
`observations+dates (create_fact)` appends its session's date (`Caroline ... (8 May 2023)`), the
only way the contract lets the date reach the fact. An observation whose text is already stored
is refused as a duplicate (`DuplicateFactError`); the stored fact then also counts as retrieving
the duplicate's turns.

The dataset (CC BY-NC 4.0) is read at run time from `DEERFLOW_LOCOMO` (else `DEFAULT_DATASET`, a
copy kept outside the repository) and never copied; without it the benchmark exits 0 with a
message. Without the `embeddings` extra only the lexical rows run. Usage:
`uv run python -m benchmarks.locomo_retrieval [--json PATH] [--conversations N]`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from benchmarks.timing import summarize, time_calls
from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig
from deerflow.agents.memory.backends.deermem.deermem.core.fts_query import (
    STOP_WORDS,
    event_words,
)
from deerflow.agents.memory.backends.deermem.deermem.core.index import (
    CANDIDATES,
    TOKENIZER,
    IndexedFact,
    RetrievalIndex,
)
from deerflow.agents.memory.backends.deermem.deermem.embeddings import (
    MODEL_NAME,
    Embedder,
    missing_modules,
)
from deerflow.agents.memory.backends.deermem.deermem.manager import DeerMemMemoryManager
from deerflow.agents.memory.manager import DuplicateFactError

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["RECORDED", "dataset_path", "evaluate", "load", "main", "parse_ids"]

HERE: Final = Path(__file__).resolve().parent
DEFAULT_DATASET: Final = HERE.parents[1] / "shared" / "datasets" / "locomo10.json"
DEFAULT_JSON: Final = HERE / "results" / "locomo.json"
ANCHORS: Final = "recorded under the same protocol: benchmarks/locomo_retrieval.py"
AGENT: Final = "__default__"
KS: Final = (1, 5, 10, 20)
LIMIT: Final = 20
# The default ranking read deeper: R@k of its top k is the most a reranker of k candidates
# could reach at 10 (exactly that when a question has at most 10 evidence turns).
BOUND_KS: Final = (10, 20, 50, 100)
CATEGORIES: Final = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
# Every fact gets the same confidence, time and search moment: only text relevance ranks.
CONFIDENCE: Final = 1.0
UPDATED_AT: Final = "2026-01-01T00:00:00+00:00"
NOW: Final = datetime(2026, 1, 1, tzinfo=UTC)
SEMANTIC_WEIGHT: Final = DeerMemConfig.model_fields["retrieval_semantic_weight"].default
THREAD_CONTEXT: Final = DeerMemConfig.model_fields["retrieval_thread_context"].default
REFERENCE: Final = "fts5 bm25() reference"  # `fts5_reference`: not a DeerMem method
THREAD_CONTEXTS: Final = (0.25, 0.5)  # `retrieval_thread_context` of the `+thread` rows
CONTRACT_TOP_K: Final = 10  # `search(top_k=...)` of the `create_fact` runs
CONTRACT_MAX_FACTS: Final = 500  # above the largest conversation's 324 observations
CONTRACT: Final = " (create_fact)"  # suffix of the `create_fact` runs' names

CONVERSATION: Final = "conversation:"  # prefix of the per-conversation groups in `evaluate`

_DIA_ID = re.compile(r"D(\d+):(\d+)")
_WORD = re.compile(r"[a-z0-9]+")
REFERENCE_TOKENIZER: Final = "porter unicode61"
_SPLIT = re.compile(r"[;\s]+")
_SESSION = re.compile(r"session_(\d+)")
_SESSION_DATE = re.compile(r"session_(\d+)_date_time")
_OBSERVATION = re.compile(r"session_(\d+)_observation")

# RECORDED by the anchors' run (not measured by this script): R@1, R@5, R@10, R@20,
# all-evidence R@10, per-category R@10 (1..4), query latency p50 / p99 in ms.
RECORDED: Final[dict[str, dict[str, dict[str, Any]]]] = {
    "turns": {
        "bm25py": {"r": (0.290, 0.501, 0.569, 0.636), "all10": 0.520,
                   "cat10": (0.277, 0.680, 0.255, 0.658), "p50": 0.360, "p99": 0.594},
        "fts5_unicode61": {"r": (0.236, 0.434, 0.514, 0.587), "all10": 0.469,
                           "cat10": (0.207, 0.598, 0.260, 0.612), "p50": 0.511, "p99": 0.999},
        "fts5_unicode61_stop": {"r": (0.285, 0.494, 0.562, 0.632), "all10": 0.515,
                                "cat10": (0.255, 0.671, 0.275, 0.654), "p50": 0.370,
                                "p99": 0.671},
        "fts5_porter_stop": {"r": (0.306, 0.524, 0.608, 0.677), "all10": 0.552,
                             "cat10": (0.345, 0.703, 0.296, 0.694), "p50": 0.362, "p99": 0.572},
        "hybrid_convex_a0.5": {"r": (0.304, 0.565, 0.649, 0.720), "all10": 0.588,
                               "cat10": (0.404, 0.725, 0.348, 0.735), "p50": None, "p99": None},
        "mem0 (faiss+MiniLM)": {"r": (0.115, 0.300, 0.384, 0.485), "all10": 0.340,
                                "cat10": (0.217, 0.385, 0.209, 0.459), "p50": 9.62,
                                "p99": 15.4},
    },
    "observations": {
        "bm25py": {"r": (0.321, 0.481, 0.535, 0.578), "all10": 0.482,
                   "cat10": (0.277, 0.639, 0.248, 0.614), "p50": None, "p99": None},
        "fts5_unicode61": {"r": (0.301, 0.454, 0.516, 0.561), "all10": 0.469,
                           "cat10": (0.244, 0.633, 0.221, 0.595), "p50": None, "p99": None},
        "fts5_porter_stop": {"r": (0.362, 0.519, 0.570, 0.621), "all10": 0.511,
                             "cat10": (0.359, 0.661, 0.276, 0.638), "p50": 0.163, "p99": 0.276},
        "dense_minilm": {"r": (0.338, 0.545, 0.604, 0.667), "all10": 0.538,
                         "cat10": (0.451, 0.738, 0.327, 0.635), "p50": None, "p99": None},
        "hybrid_convex_a0.7": {"r": (0.401, 0.587, 0.644, 0.690), "all10": 0.576,
                               "cat10": (0.472, 0.750, 0.364, 0.692), "p50": None, "p99": None},
    },
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Question:
    conversation: str
    category: int
    text: str
    evidence: tuple[str, ...]  # as parsed, duplicates kept


@dataclass(frozen=True, slots=True)
class Document:
    conversation: str
    doc_id: str
    text: str
    dia_ids: tuple[str, ...]
    session_date: str | None  # ISO-8601, the date of the session the document comes from


@dataclass(frozen=True, slots=True)
class Corpus:
    turns: list[Document]
    observations: list[Document]
    questions: list[Question]
    skipped: dict[str, int]


Ranker = Callable[[Question], list[str]]


def dataset_path() -> Path:
    """`DEERFLOW_LOCOMO` if set, else `DEFAULT_DATASET` (outside the repository)."""
    override = os.environ.get("DEERFLOW_LOCOMO")
    return Path(override) if override else DEFAULT_DATASET


def _sessions(conversation: dict[str, Any]) -> Iterable[tuple[str, list[dict[str, Any]]]]:
    """`(number, turns)` of every session, in order (date keys without a session are skipped)."""
    numbers = [m.group(1) for key in conversation if (m := _SESSION.fullmatch(key))]
    for number in sorted(numbers, key=int):
        if isinstance(conversation[f"session_{number}"], list):
            yield number, conversation[f"session_{number}"]


def _session_dates(conversation: dict[str, Any]) -> dict[str, str]:
    """Session number → ISO date and time ("1:56 pm on 8 May, 2023" → "2023-05-08T13:56:00")."""
    dates = {}
    for key, value in conversation.items():
        if (match := _SESSION_DATE.fullmatch(key)) and isinstance(value, str):
            moment = datetime.strptime(value.strip(), "%I:%M %p on %d %B, %Y")
            dates[match.group(1)] = moment.isoformat()
    return dates


def parse_ids(raw: Iterable[object]) -> list[str]:
    """Dialogue ids of an evidence list: split on `;` and whitespace, keep `D<n>:<m>`."""
    return [token for item in raw for token in _SPLIT.split(str(item)) if _DIA_ID.fullmatch(token)]


def load(path: Path, conversations: int | None = None) -> Corpus:
    """Parse the dataset into documents and scorable questions (the anchors' protocol)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if conversations is not None:
        data = data[:conversations]
    turns: list[Document] = []
    observations: list[Document] = []
    questions: list[Question] = []
    skipped = {"category_5": 0, "no_valid_evidence": 0, "evidence_ids_dropped": 0}
    for sample in data:
        conv = str(sample["sample_id"])
        dates = _session_dates(sample["conversation"])
        known: set[str] = set()
        for number, session in _sessions(sample["conversation"]):
            for turn in session:
                text = f"{turn['speaker']} {turn['text']} {turn.get('blip_caption', '')}"
                dia = (turn["dia_id"],)
                turns.append(Document(conv, turn["dia_id"], text, dia, dates.get(number)))
                known.add(turn["dia_id"])
        for key, per_session in sample.get("observation", {}).items():
            match = _OBSERVATION.fullmatch(key)
            date = dates.get(match.group(1)) if match else None
            for facts in per_session.values():
                for fact, cited in facts:
                    # The evidence parser, as the anchors: of the five comma-joined strings
                    # ("D26:14, D26:34") only the last id survives (their ceiling, 0.806).
                    dia_ids = tuple(parse_ids(cited if isinstance(cited, list) else [cited]))
                    doc_id = f"obs{len(observations)}"
                    observations.append(Document(conv, doc_id, str(fact), dia_ids, date))
        for qa in sample["qa"]:
            category = int(qa["category"])
            if category not in CATEGORIES:
                skipped["category_5"] += 1
                continue
            parsed = parse_ids(qa.get("evidence", []))
            evidence = tuple(e for e in parsed if e in known)
            skipped["evidence_ids_dropped"] += len(parsed) - len(evidence)
            if not evidence:
                skipped["no_valid_evidence"] += 1
                continue
            questions.append(Question(conv, category, str(qa["question"]), evidence))
    return Corpus(turns, observations, questions, skipped)


def build_index(
    path: Path, documents: Sequence[Document], *, dated: bool, model: Embedder | None
) -> tuple[RetrievalIndex, float]:
    """One scope per conversation, built by `RetrievalIndex.rebuild`; returns the build seconds.

    `dated` gives each fact its session's date as `event_time`. The build time includes encoding
    every document when there is a model (loaded beforehand).
    """
    by_conv: dict[str, list[IndexedFact]] = {}
    for doc in documents:
        thread, created_at = _written(doc)
        by_conv.setdefault(doc.conversation, []).append(
            IndexedFact(
                AGENT,
                doc.doc_id,
                doc.text,
                "context",
                CONFIDENCE,
                UPDATED_AT,
                event_time=doc.session_date if dated else None,
                thread=thread,
                created_at=created_at,
            )
        )
    index = RetrievalIndex(path, model)
    start = time.perf_counter()
    index.rebuild((conv, 1, facts) for conv, facts in by_conv.items())
    return index, time.perf_counter() - start


def _written(doc: Document) -> tuple[str | None, str]:
    """The document's thread (its session) and when it was written (the session's date plus one
    second per turn); no thread for a document that cites no turn."""
    match = _DIA_ID.fullmatch(doc.dia_ids[0]) if doc.dia_ids else None
    if match is None:
        return None, UPDATED_AT
    start = datetime.fromisoformat(doc.session_date) if doc.session_date else NOW
    return f"session {match.group(1)}", (start + timedelta(seconds=int(match.group(2)))).isoformat()


def searcher(
    index: RetrievalIndex,
    *,
    semantic_weight: float,
    thread_context: float = 0.0,
    limit: int = LIMIT,
) -> Ranker:
    def rank(q: Question) -> list[str]:
        hits = index.search(
            q.conversation,
            AGENT,
            q.text,
            limit=limit,
            now=NOW,
            semantic_weight=semantic_weight,
            thread_context=thread_context,
        )
        return [hit.fact_id for hit in hits]

    return rank


def fts5_reference(conn: sqlite3.Connection, documents: Sequence[Document]) -> Ranker:
    """The anchors' `fts5_porter_stop` recipe, measured in the same run as DeerMem for a fair
    latency comparison (not a DeerMem method): one FTS5 table per conversation on `conn`,
    FTS5's own `bm25()`, the question lower-cased, split on `[a-z0-9]+`, de-duplicated, minus
    DeerMem's `STOP_WORDS` (the anchors' 59-word list is not published), quoted and OR-ed."""
    tables: dict[str, str] = {}
    for doc in documents:
        if doc.conversation not in tables:
            tables[doc.conversation] = table = f"conv{len(tables)}"
            conn.execute(f"CREATE VIRTUAL TABLE {table} USING fts5(body, doc_id UNINDEXED,"
                         f" tokenize='{REFERENCE_TOKENIZER}')")  # fmt: skip
        conn.execute(
            f"INSERT INTO {tables[doc.conversation]} (body, doc_id) VALUES (?, ?)",
            (doc.text, doc.doc_id),
        )

    def rank(q: Question) -> list[str]:
        words = list(dict.fromkeys(_WORD.findall(q.text.lower())))
        match = " OR ".join(f'"{w}"' for w in [w for w in words if w not in STOP_WORDS] or words)
        table = tables[q.conversation]
        rows = conn.execute(
            f"SELECT doc_id FROM {table} WHERE {table} MATCH ? ORDER BY bm25({table}), rowid"
            f" LIMIT {LIMIT}",
            (match,),
        )
        return [doc_id for (doc_id,) in rows]

    return rank


def evaluate(
    rank: Ranker, corpus: Corpus, documents: Sequence[Document], ks: Sequence[int] = KS
) -> dict[str, Any]:
    """Recall@k per category and overall, all-evidence recall, and search latency; `ks` are the
    cut-offs the ranker's results can answer."""
    dia_of = {(d.conversation, d.doc_id): d.dia_ids for d in documents}
    questions = corpus.questions
    results: list[list[str]] = [[] for _ in questions]

    def search(i: int) -> None:
        results[i] = rank(questions[i])

    for i in range(len(questions)):  # warm-up pass: page cache and statement cache
        search(i)
    latency = summarize(time_calls(len(questions), search))

    sums: dict[str, dict[str, float]] = {}
    counts: dict[str, int] = {}
    no_hit = 0
    for q, ranked in zip(questions, results, strict=True):
        no_hit += not ranked
        for group in (str(q.category), "all", CONVERSATION + q.conversation):
            counts[group] = counts.get(group, 0) + 1
            acc = sums.setdefault(group, {})
            for k in ks:
                top = {i for doc in ranked[:k] for i in dia_of[(q.conversation, doc)]}
                found = sum(e in top for e in q.evidence)
                acc[f"R@{k}"] = acc.get(f"R@{k}", 0.0) + found / len(q.evidence)
                acc[f"all@{k}"] = acc.get(f"all@{k}", 0.0) + (found == len(q.evidence))
    groups = {
        group: {"n": counts[group], **{m: v / counts[group] for m, v in acc.items()}}
        for group, acc in sums.items()
    }
    return {
        "documents": len(documents),
        "questions": len(questions),
        "questions_without_hit": no_hit,
        "by_category": {c: groups[c] for c in sorted(groups) if c.isdigit()},
        "by_conversation": {
            c.removeprefix(CONVERSATION): groups[c] for c in groups if c.startswith(CONVERSATION)
        },
        "halves_r10": _halves(corpus, groups),
        "all": groups["all"],
        "latency_ms": latency,
        "ceiling": _ceiling(corpus, documents),
    }


def rerank_bound(
    deep: Ranker, corpus: Corpus, documents: Sequence[Document]
) -> dict[str, dict[str, float]]:
    """Per category and overall, the share of evidence the ranking's top k holds for each k of
    `BOUND_KS`, beside the share any document cites (`ceiling`): no reranker of the top k
    candidates, and no method at all over these documents, can put more in the top 10."""
    measured = evaluate(deep, corpus, documents, BOUND_KS)
    groups = measured["by_category"] | {"all": measured["all"]}
    return {
        group: {"ceiling": measured["ceiling"][group]}
        | {f"R@{k}": values[f"R@{k}"] for k in BOUND_KS}
        for group, values in groups.items()
    }


def _halves(corpus: Corpus, groups: dict[str, dict[str, float]]) -> list[float]:
    """R@10 over the questions of the first half of the conversations, and of the second half
    (conversations 0-4 and 5-9 on the full set): parameters are chosen on the first half only."""
    order = list(dict.fromkeys(q.conversation for q in corpus.questions))
    half = (len(order) + 1) // 2
    recalls = []
    for part in (order[:half], order[half:]):
        n = sum(groups[CONVERSATION + c]["n"] for c in part)
        found = sum(groups[CONVERSATION + c]["R@10"] * groups[CONVERSATION + c]["n"] for c in part)
        recalls.append(found / n if n else float("nan"))
    return recalls


def _ceiling(corpus: Corpus, documents: Sequence[Document]) -> dict[str, float]:
    """Mean share of a question's evidence that any document cites (1.0 for turns)."""
    cited: dict[str, set[str]] = {}
    for doc in documents:
        cited.setdefault(doc.conversation, set()).update(doc.dia_ids)
    totals: dict[str, list[float]] = {}
    for q in corpus.questions:
        share = sum(e in cited.get(q.conversation, set()) for e in q.evidence) / len(q.evidence)
        for group in (str(q.category), "all"):
            totals.setdefault(group, []).append(share)
    return {group: sum(v) / len(v) for group, v in sorted(totals.items())}


def contract_documents(
    manager: DeerMemMemoryManager, observations: Sequence[Document], *, dated: bool
) -> list[Document]:
    """Write `observations` with `create_fact` (one user per conversation, in session order);
    returns one document per stored fact, its id the fact's, citing every turn its text stood
    for (a duplicate's turns join the stored fact's)."""
    stored: dict[tuple[str, str], Document] = {}
    for doc in observations:
        date = event_words(doc.session_date) if dated else ""
        text = f"{doc.text} ({date})" if date else doc.text
        try:
            _, fact_id = manager.create_fact(text, user_id=doc.conversation)
        except DuplicateFactError as exc:
            fact_id = exc.existing_fact_id
        if fact_id is None:
            raise RuntimeError(f"create_fact gave no fact id for {doc.doc_id}")
        key = (doc.conversation, fact_id)
        cited = stored[key].dia_ids if key in stored else ()
        stored[key] = Document(doc.conversation, fact_id, text, cited + doc.dia_ids, None)
    return list(stored.values())


def contract_searcher(manager: DeerMemMemoryManager) -> Ranker:
    def rank(q: Question) -> list[str]:
        hits = manager.search(q.text, top_k=CONTRACT_TOP_K, user_id=q.conversation)
        return [str(hit["id"]) for hit in hits]

    return rank


def run_contract(corpus: Corpus, workdir: Path, *, dated: bool) -> dict[str, Any]:
    """The observations written with `create_fact` and asked with `search(top_k=10)`, by
    DeerMem's default settings (`max_facts` aside)."""
    manager = DeerMemMemoryManager(
        backend_config={"storage_path": str(workdir), "max_facts": CONTRACT_MAX_FACTS}
    )
    try:
        manager.warm()
        start = time.perf_counter()
        documents = contract_documents(manager, corpus.observations, dated=dated)
        write_s = time.perf_counter() - start
        ks = [k for k in KS if k <= CONTRACT_TOP_K]
        result = evaluate(contract_searcher(manager), corpus, documents, ks)
    finally:
        manager.close()
    return result | {"write_seconds": write_s, "stored_facts": len(documents)}


def run(path: Path, conversations: int | None, workdir: Path) -> dict[str, Any]:
    corpus = load(path, conversations)
    model = None if missing_modules() else Embedder()
    model_load_s = None
    if model is not None:
        start = time.perf_counter()
        model.load()
        model_load_s = time.perf_counter() - start
    runs: dict[str, dict[str, Any]] = {}
    for name, documents in (("turns", corpus.turns), ("observations", corpus.observations)):
        for dated in (False, True):
            label = f"{name}+dates" if dated else name
            methods = runs.setdefault(label, {})
            index, build_s = build_index(
                workdir / f"{label}.sqlite", documents, dated=dated, model=None
            )
            try:
                rank = searcher(index, semantic_weight=0.0)
                methods["lexical"] = evaluate(rank, corpus, documents) | {"build_seconds": build_s}
                for share in THREAD_CONTEXTS:
                    rank = searcher(index, semantic_weight=0.0, thread_context=share)
                    methods[f"lexical+thread {share}"] = evaluate(rank, corpus, documents)
            finally:
                index.close()
            if not dated:
                with sqlite3.connect(workdir / f"{label}-fts5.sqlite") as conn:
                    reference = fts5_reference(conn, documents)
                    methods[REFERENCE] = evaluate(reference, corpus, documents)
                conn.close()
            if model is None:
                continue
            index, build_s = build_index(
                workdir / f"{label}-hybrid.sqlite", documents, dated=dated, model=model
            )
            try:
                for method, weight in (("hybrid", SEMANTIC_WEIGHT), ("semantic", 1.0)):
                    rank = searcher(index, semantic_weight=weight)
                    methods[method] = evaluate(rank, corpus, documents) | {"build_seconds": build_s}
                for share in THREAD_CONTEXTS:
                    rank = searcher(index, semantic_weight=SEMANTIC_WEIGHT, thread_context=share)
                    methods[f"hybrid+thread {share}"] = evaluate(rank, corpus, documents)
                rank = searcher(
                    index, semantic_weight=SEMANTIC_WEIGHT, thread_context=THREAD_CONTEXT
                )
                methods["default"] = evaluate(rank, corpus, documents)
                deep = searcher(
                    index,
                    semantic_weight=SEMANTIC_WEIGHT,
                    thread_context=THREAD_CONTEXT,
                    limit=BOUND_KS[-1],
                )
                methods["default"]["rerank_bound"] = rerank_bound(deep, corpus, documents)
            finally:
                index.close()
    for dated in (False, True) if model is not None else ():
        label = ("observations+dates" if dated else "observations") + CONTRACT
        store = workdir / ("contract-dated" if dated else "contract")
        runs[label] = {"default": run_contract(corpus, store, dated=dated)}
    return {
        "benchmark": "locomo_retrieval",
        "command": " ".join(["python", "-m", "benchmarks.locomo_retrieval", *sys.argv[1:]]),
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "dataset": {"file": path.name, "conversations": conversations or "all"},
        "protocol": {
            "agent": AGENT,
            "limit": LIMIT,
            "ks": list(KS),
            "rerank_bound_ks": list(BOUND_KS),
            "confidence": CONFIDENCE,
            "updated_at": UPDATED_AT,
            "categories": CATEGORIES,
            "tokenizer": TOKENIZER,
            "stop_words": len(STOP_WORDS),
            "skipped": corpus.skipped,
            "embedding_model": None if model is None else MODEL_NAME,
            "embedding_model_load_seconds": model_load_s,
            "semantic_weight": SEMANTIC_WEIGHT,
            "default_thread_context": THREAD_CONTEXT,
            "candidates_per_ranking": CANDIDATES,
            "thread_contexts": list(THREAD_CONTEXTS),
            "contract_top_k": CONTRACT_TOP_K,
            "contract_max_facts": CONTRACT_MAX_FACTS,
        },
        "sqlite": sqlite3.sqlite_version,
        "python": sys.version.split()[0],
        "load_average": os.getloadavg(),
        "runs": runs,
        "recorded_source": ANCHORS,
        "recorded": RECORDED,
    }


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def print_tables(results: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 150))
    for name, methods in results["runs"].items():
        first = next(iter(methods.values()))
        table = Table(
            title=f"LoCoMo evidence recall, {name} as documents "
            f"({first['documents']} docs, {first['questions']} questions)"
        )
        for column in ("method", "source", "R@1", "R@5", "R@10", "R@20", "all-ev@10"):
            left = column in ("method", "source")
            table.add_column(column, justify="left" if left else "right", no_wrap=left)
        for cat in CATEGORIES:
            table.add_column(f"c{cat} R@10", justify="right")
        table.add_column("p50 / p99 ms", justify="right")
        table.add_column("R@10 halves", justify="right")
        for method, measured in methods.items():
            row = measured["all"]
            lat = measured["latency_ms"]
            table.add_row(
                method if method == REFERENCE else f"DeerMem {method}",
                "measured",
                *(_fmt(row.get(f"R@{k}")) for k in KS),
                _fmt(row["all@10"]),
                *(_fmt(measured["by_category"].get(str(c), {}).get("R@10")) for c in CATEGORIES),
                f"{lat['p50']:.3f} / {lat['p99']:.3f}",
                " / ".join(_fmt(v) for v in measured["halves_r10"]),
                style="bold",
            )
        for method, rec in results["recorded"].get(name, {}).items():
            table.add_row(
                method,
                "recorded",
                *(_fmt(v) for v in rec["r"]),
                _fmt(rec["all10"]),
                *(_fmt(v) for v in rec["cat10"]),
                f"{_fmt(rec['p50'])} / {_fmt(rec['p99'])}" if rec["p50"] else "-",
                "-",
                style="dim",
            )
        console.print(table)
    print_bounds(console, results)
    console.print(f"[dim]'recorded' rows are quoted from {ANCHORS}, not measured here.[/dim]")
    console.print(
        "[dim]R@10 halves: over the first and the second half of the conversations "
        "(0-4 / 5-9 on the full set); DeerMem's parameters were chosen on the first.[/dim]"
    )


def print_bounds(console: Console, results: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(
        title="How far reranking could go: evidence in the default ranking's top k, "
        "and cited by any document (ceiling)"
    )
    for column in ("documents", "category", "ceiling", *(f"R@{k}" for k in BOUND_KS)):
        table.add_column(column, justify="left" if column in ("documents", "category") else "right")
    for name, methods in results["runs"].items():
        bound = methods.get("default", {}).get("rerank_bound")
        for group, values in (bound or {}).items():
            label = CATEGORIES.get(int(group), group) if group.isdigit() else group
            table.add_row(
                name,
                label,
                _fmt(values["ceiling"]),
                *(_fmt(values[f"R@{k}"]) for k in BOUND_KS),
                style="bold" if group == "all" else "",
            )
    console.print(table)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="write the numbers here")
    parser.add_argument("--conversations", type=int, help="only the first N conversations")
    args = parser.parse_args(argv)
    path = dataset_path()
    if not path.is_file():
        print(
            f"LoCoMo dataset not found at {path}: skipping (set DEERFLOW_LOCOMO to its path; "
            "it is CC BY-NC and never copied into this repository)",
            file=sys.stderr,
        )
        return
    if missing_modules():
        print(
            f"the `embeddings` extra is not installed ({', '.join(missing_modules())} missing): "
            "measuring the lexical rows only",
            file=sys.stderr,
        )
    with tempfile.TemporaryDirectory(prefix="locomo-") as tmp:
        results = run(path, args.conversations, Path(tmp))
    print_tables(results)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()

"""Seeded synthetic memory: facts, users and queries shaped like the recorded baseline's data.

12 templates filled from word lists (tools, tasks, roles, cities, foods, hobbies), about 30% of
facts with an extra clause, 8 categories, confidence uniform in 0.55..0.99. Queries are 2-3 words
of the same vocabulary, so common words ("prefers", "learn", city names) match many facts of every
user, as in real use. The same seed always gives the same facts, whichever process makes them.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator, Sequence
from typing import Any, Final

from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig
from deerflow.agents.memory.backends.deermem.deermem.core.changes import ChangeSet
from deerflow.agents.memory.backends.deermem.deermem.core.index import IndexedFact
from deerflow.agents.memory.backends.deermem.deermem.core.storage import FileMemoryStorage
from deerflow.agents.memory.backends.deermem.deermem.governance import normalized

__all__ = [
    "AGENT",
    "CATEGORIES",
    "QUERY_WORDS",
    "SEED",
    "bulk_changes",
    "chat_turn",
    "ingest_users",
    "make_fact",
    "query_plan",
    "record_of",
    "spread",
    "unique_facts",
    "user_facts",
]

SEED: Final = 20260822
AGENT: Final = "__default__"

TOOLS = [
    "neovim",
    "vscode",
    "emacs",
    "pnpm",
    "npm",
    "yarn",
    "docker",
    "podman",
    "kafka",
    "redis",
    "postgres",
    "sqlite",
    "rust",
    "go",
]
TASKS = [
    "code",
    "review",
    "testing",
    "deployment",
    "debugging",
    "refactoring",
    "profiling",
    "planning",
]
CITIES = [
    "berlin",
    "lisbon",
    "madrid",
    "paris",
    "tokyo",
    "seoul",
    "austin",
    "denver",
    "oslo",
    "rome",
]
FOODS = ["tea", "coffee", "sushi", "pasta", "tacos", "curry", "ramen", "salad"]
ROLES = ["engineer", "scientist", "designer", "manager", "analyst"]
HOBBIES = ["cycles", "climbs", "swims", "runs", "paints", "reads", "cooks", "hikes"]
CATEGORIES = [
    "preference",
    "context",
    "identity",
    "goal",
    "behavior",
    "constraint",
    "decision",
    "correction",
]
TEMPLATES = [
    "Prefers {t1} over {t2} for {task}",
    "Works as a data {role} at a bank in {city}",
    "Cannot use {t1} at work because of security policy",
    "Lives in {city} and {hobby} on weekends",
    "Wants to learn {t1} async this year",
    "Drinks {food} every morning before {task}",
    "Uses {t1} with {t2} for {task}",
    "Decided to migrate from {t1} to {t2}",
    "Corrected: the project uses {t1} not {t2}",
    "Is allergic to {food} and avoids it",
    "Plans a trip to {city} next spring",
    "Goal is to master {task} with {t1}",
]
QUERY_WORDS = [*TOOLS, *TASKS, *CITIES, *FOODS, *ROLES, *HOBBIES, "prefers", "learn", "works"]


def make_fact(rng: random.Random, n: int, agent: str = AGENT) -> IndexedFact:
    """One fact with id `fact_{n:016x}`."""
    text = rng.choice(TEMPLATES).format(
        t1=rng.choice(TOOLS),
        t2=rng.choice(TOOLS),
        task=rng.choice(TASKS),
        role=rng.choice(ROLES),
        city=rng.choice(CITIES),
        hobby=rng.choice(HOBBIES),
        food=rng.choice(FOODS),
    )
    if rng.random() < 0.3:
        text += f" and also {rng.choice(TASKS)} in {rng.choice(CITIES)}"
    day = rng.randrange(1, 28)
    return IndexedFact(
        agent=agent,
        fact_id=f"fact_{n:016x}",
        content=text,
        category=rng.choice(CATEGORIES),
        confidence=round(rng.uniform(0.55, 0.99), 2),
        updated_at=f"2026-{rng.randrange(1, 12):02d}-{day:02d}T10:00:00Z",
    )


def unique_facts(rng: random.Random, count: int, first_id: int) -> list[IndexedFact]:
    """`count` facts whose contents differ after normalisation (create_fact refuses duplicates)."""
    facts: list[IndexedFact] = []
    seen: set[str] = set()
    n = first_id
    while len(facts) < count:
        fact = make_fact(rng, n)
        n += 1
        key = normalized(fact.content)
        if key not in seen:
            seen.add(key)
            facts.append(fact)
    return facts


def user_facts(user_number: int, count: int, *, seed: int = SEED) -> list[IndexedFact]:
    """The facts of user number `user_number`: the same in every process for the same seed."""
    rng = random.Random(f"{seed}:{user_number}")
    return unique_facts(rng, count, first_id=user_number * 1_000_000)


def record_of(fact: IndexedFact) -> dict[str, Any]:
    """The stored record of a generated fact, as `FileMemoryStorage.save` takes it."""
    return {
        "id": fact.fact_id,
        "category": fact.category,
        "confidence": fact.confidence,
        "createdAt": fact.updated_at,
        "updatedAt": fact.updated_at,
        "source": {"type": "manual", "threadId": None},
        "agent_name": fact.agent,
        "content": fact.content,
    }


def bulk_changes(facts: list[IndexedFact]) -> ChangeSet:
    """One change set that stores all `facts` of a user: one journaled commit."""
    return ChangeSet(
        actor="import", reason="benchmark ingest", upserts=[record_of(f) for f in facts]
    )


def query_plan(users: list[str], queries: int, seed: int = 11) -> list[tuple[str, str]]:
    """`queries` pairs of (user, 2-3 word query), users drawn at random from `users`."""
    rng = random.Random(seed)
    return [
        (rng.choice(users), " ".join(rng.sample(QUERY_WORDS, rng.choice([2, 3]))))
        for _ in range(queries)
    ]


def spread(n_facts: int, n_users: int) -> Iterator[tuple[int, int]]:
    """(user number, fact count) for `n_facts` spread as evenly as possible over `n_users`."""
    per_user, extra = divmod(n_facts, n_users)
    for user in range(n_users):
        yield user, per_user + (1 if user < extra else 0)


def ingest_users(root: str, users: Sequence[tuple[str, int, int]]) -> list[float]:
    """Store `(user id, user number, fact count)` users under `root`, one commit per user.

    Returns the milliseconds of each user's commit. Safe to run in several processes at once
    over disjoint users (the storage locks per user).
    """
    storage = FileMemoryStorage(DeerMemConfig(storage_path=root, max_facts=500))
    times = []
    for user_id, number, count in users:
        changes = bulk_changes(user_facts(number, count))
        start = time.perf_counter()
        storage.save(user_id, changes)
        times.append((time.perf_counter() - start) * 1000)
    return times


ASKS = [
    "I'm setting up {t1} for {task} on our team in {city}. What's the cleanest way to lay out the "
    "config so that new people can follow it without asking me?",
    "We hit a strange bug with {t1} during {task} yesterday: the logs show timeouts after about "
    "30 seconds, but only on the CI runners. Where would you start looking?",
    "Can you compare {t1} and {t2} for {task}? I mostly care about startup time and how easy it "
    "is to debug when something goes wrong.",
    "I prefer {t1} over {t2} for anything like {task}, and please keep answers short. How do I "
    "pin versions so the build is reproducible?",
    "Our {role} wants a summary of how {task} works here. Could you draft three bullet points I "
    "can paste into the wiki?",
]
ANSWER = (
    "Here is a practical way to approach {task} with {t1}:\n\n"
    "1. Keep one config file per environment and load it from a single entry point, so every "
    "setting has exactly one place where it is defined.\n"
    "2. Pin the versions of {t1} and {t2} in the lock file and check it in; CI should fail when "
    "the lock file and the manifest disagree.\n"
    "3. Add a short README section that explains the three commands people run daily.\n\n"
    "```sh\n{t1} init --profile {task}\n{t1} check --strict\n```\n\n"
    "If the timeouts persist, enable debug logging for one run and compare the timestamps of "
    "the first and the last request; a gap of exactly 30 seconds usually points to a default "
    "client timeout rather than to the server."
)


def chat_turn(rng: random.Random) -> tuple[str, str]:
    """One exchange of a realistic agent conversation: (user text, assistant answer).

    About 130-190 characters from the user and 680-700 from the assistant (no tool calls).
    """
    words = {
        "t1": rng.choice(TOOLS),
        "t2": rng.choice(TOOLS),
        "task": rng.choice(TASKS),
        "city": rng.choice(CITIES),
        "role": rng.choice(ROLES),
    }
    return rng.choice(ASKS).format(**words), ANSWER.format(**words)

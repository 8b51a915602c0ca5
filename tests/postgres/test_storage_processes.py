"""PostgresMemoryStorage under concurrent writer processes, and writers killed mid-commit."""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import time
from pathlib import Path

import pytest

from deerflow.agents.memory.backends.deermem.deermem.postgres.storage import (
    PostgresMemoryStorage,
)
from tests.deermem.storage_helpers import LONG, LONG_TIMEOUT
from tests.postgres.engines import postgres_config, postgres_storage
from tests.postgres.writers import commits, creates, fork_writer


@pytest.mark.timeout(LONG_TIMEOUT)
def test_processes_creating_at_once_lose_nothing_and_count_every_commit(
    postgres_url: str, tmp_path: Path
) -> None:
    config = postgres_config(postgres_url, tmp_path)
    with postgres_storage(config):
        pass  # the tables exist before the writers start
    per_process = 200 if LONG else 25
    gate = os.pipe()
    writers = [
        fork_writer(config, "shared", creates, f"p{i}", per_process, gate=gate) for i in range(8)
    ]
    os.close(gate[1])  # all at once
    os.close(gate[0])
    committed: list[str] = []
    for pid, reports in writers:
        out = reports.read()
        assert os.waitpid(pid, 0)[1] == 0
        outcome = json.loads(out)
        assert outcome["conflicts"] == []  # creates commute: each is rebased under the lock
        committed += outcome["committed"]
    assert len(committed) == 8 * per_process
    with postgres_storage(config) as storage:
        snapshot = storage.load("shared", None)
        assert sorted(f["content"] for f in snapshot.facts.values()) == sorted(committed)
        assert snapshot.revision == len(committed)
        entries = storage.read_history("shared")
    assert [entry["revision"] for entry in entries] == list(range(1, len(committed) + 1))
    writers_in_order = [entry["after"]["facts"][0]["file"].split("# p")[1][0] for entry in entries]
    turns = sum(a != b for a, b in itertools.pairwise(writers_in_order))
    assert turns > 7, "the writers ran one after another, not at once"


@pytest.mark.timeout(LONG_TIMEOUT)
def test_sigkill_during_commits_loses_nothing_acknowledged(
    postgres_url: str, tmp_path: Path
) -> None:
    config = postgres_config(postgres_url, tmp_path)
    rng = random.Random(4321)
    committed = 0
    kills = 0
    least = 200 if LONG else 6
    while kills < least or (committed <= 10 and kills < 100):
        kills += 1
        pid, reports = fork_writer(config, "kill-me", commits, 100_000)
        time.sleep(rng.uniform(0.0, 0.15))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        # Reported after `save` returned: each of these was acknowledged before the kill.
        acknowledged = max(map(int, reports.read().split() or ["0"]))
        with postgres_storage(config) as storage:  # closed again: the next fork holds no pool
            now = _consistent(storage, "kill-me")
        assert now >= max(committed, acknowledged), "an acknowledged commit was lost"
        committed = now
    assert committed > 10


def _consistent(storage: PostgresMemoryStorage, user: str) -> int:
    """The user's revision, after checking that the memory holds exactly one whole write per
    revision: the history has one entry per revision, the facts and summary are the last
    write's."""
    snapshot = storage.reload(user, None)
    n = snapshot.revision
    assert [e["revision"] for e in storage.read_history(user)] == list(range(1, n + 1))
    if n:
        assert sorted(f["content"] for f in snapshot.facts.values()) == [
            f"w{n}-{part}" for part in "abc"
        ]
        assert snapshot.summaries["user"]["workContext"]["summary"] == f"write {n}"
    return n

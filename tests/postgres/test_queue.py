"""The PostgreSQL write queue shared by replicas: queue objects over one schema (each with a
pool of its own) stand in for replicas, child processes for replicas that die; plus refused
input and broken rows. The behaviours both queue kinds keep are in tests/deermem/test_queue.py.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from psycopg_pool import ConnectionPool

from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig, parse_config
from deerflow.agents.memory.backends.deermem.deermem.pipeline.queue import (
    QueueFullError,
    QueueItem,
    QueueKey,
)
from deerflow.agents.memory.backends.deermem.deermem.postgres.queue import PostgresQueue
from deerflow.agents.memory.manager import MemoryCorruptionError
from tests.deermem.queue_child import conversation
from tests.deermem.test_queue import (
    ENV,
    KEY,
    OTHER,
    REPO,
    Recorder,
    four_turns_in_process,
    recorded,
    settle,
)
from tests.postgres.queue_kind import PostgresQueues
from tests.postgres_server import postgres_backend_config

LEASE_S = 1.0
LONG = os.environ.get("DEERFLOW_LONG_TESTS") == "1"

MakeQueue = Callable[..., PostgresQueue]


@pytest.fixture
def config(postgres_url: str, tmp_path: Path) -> DeerMemConfig:
    return parse_config(postgres_backend_config(postgres_url, tmp_path))


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def queues(config: DeerMemConfig, recorder: Recorder) -> Iterator[PostgresQueues]:
    made = PostgresQueues(config, recorder)
    yield made
    made.close()


@pytest.fixture
def make_queue(queues: PostgresQueues) -> MakeQueue:
    """A queue on the test's schema, by default on the first pool and without a worker."""
    return queues.make


@pytest.fixture
def open_pools(queues: PostgresQueues) -> Callable[[], ConnectionPool]:
    """A pool of its own for each replica."""
    return queues.pool


@pytest.fixture
def pool(queues: PostgresQueues) -> ConnectionPool:
    return queues.pool()


def test_replicas_admitting_new_keys_at_once_never_exceed_the_depth(
    make_queue: MakeQueue, open_pools: Callable[[], ConnectionPool]
) -> None:
    replicas = [make_queue(on=open_pools(), max_depth=10) for _ in range(3)]
    refused: list[int] = []

    def writer(r: int) -> None:
        for n in range(10):
            try:
                replicas[r].put(QueueKey(f"r{r}-{n}", "alice"), conversation(2))
            except QueueFullError:
                refused.append(1)

    threads = [threading.Thread(target=writer, args=(r,)) for r in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert (len(replicas[0].pending()), len(refused)) == (10, 20)


# -- replicas ----------------------------------------------------------------------------------


class Tracker:
    """A `process` shared by replicas: records who processed what, and any item (a key's
    normal or urgent one) handed to two replicas at once."""

    def __init__(self, work_seconds: float = 0.005) -> None:
        self.done: list[tuple[str, QueueItem]] = []
        self.overlaps: list[tuple[QueueKey, bool]] = []
        self._work = work_seconds
        self._busy: set[tuple[QueueKey, bool]] = set()
        self._lock = threading.Lock()

    def replica(self, name: str) -> Callable[[QueueItem], None]:
        def process(item: QueueItem) -> None:
            held = (item.key, item.urgent)
            with self._lock:
                if held in self._busy:
                    self.overlaps.append(held)
                self._busy.add(held)
            time.sleep(self._work)  # an LLM call takes a while: let the others contend
            with self._lock:
                self._busy.discard(held)
                self.done.append((name, item))

        return process


def wait_until_empty(queue: PostgresQueue, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while queue.pending():
        assert time.monotonic() < deadline, queue.pending()
        time.sleep(0.02)


@pytest.mark.parametrize("count", [2, 3])
def test_replicas_process_every_item_once_and_never_two_at_a_time(
    make_queue: MakeQueue, open_pools: Callable[[], ConnectionPool], count: int
) -> None:
    tracker = Tracker()
    replicas = [
        make_queue(
            on=open_pools(),
            process=tracker.replica(f"r{n}"),
            start=True,
            debounce_seconds=0.0,
            lease_seconds=LEASE_S,
        )
        for n in range(count)
    ]
    threads = [f"t{n}" for n in range(40)]
    for n, thread in enumerate(threads):  # each put reaches some replica
        replicas[n % count].put(QueueKey(thread, "alice"), conversation(2))
        replicas[(n + 1) % count].put_now(QueueKey(thread, "alice"), conversation(1))
    wait_until_empty(replicas[0])
    processed = [(item.key.thread_id, item.urgent) for _, item in tracker.done]
    assert sorted(processed) == sorted((thread, urgent) for thread in threads for urgent in (0, 1))
    assert tracker.overlaps == []
    assert len({name for name, _ in tracker.done}) == count  # every replica took part


def test_debounce_holds_whichever_replica_received_the_puts(
    make_queue: MakeQueue, open_pools: Callable[[], ConnectionPool]
) -> None:
    tracker = Tracker()
    processed_at: list[float] = []

    def process(item: QueueItem) -> None:
        processed_at.append(time.time())
        tracker.replica("worker")(item)

    receivers = [make_queue(on=open_pools(), debounce_seconds=0.6) for _ in range(2)]
    workers = [
        make_queue(on=open_pools(), process=process, start=True, poll_seconds=0.05)
        for _ in range(2)
    ]
    receivers[0].put(KEY, conversation(2))
    time.sleep(0.3)
    receivers[1].put(KEY, conversation(4), signals=["goal"])
    last_put = time.time()
    wait_until_empty(workers[0])
    (item,) = [item for _, item in tracker.done]
    assert (item.turns, item.signals) == (conversation(4), ["goal"])
    # The server and the tests share this host's clock.
    assert processed_at[0] >= last_put + 0.6 - 0.05


def test_a_put_on_one_replica_while_another_processes_the_key_keeps_the_newer_turns(
    queues: PostgresQueues,
    make_queue: MakeQueue,
    open_pools: Callable[[], ConnectionPool],
    recorder: Recorder,
) -> None:
    busy = four_turns_in_process(queues, recorder)
    other = make_queue(on=open_pools())
    other.put(KEY, conversation(6), signals=["goal"])
    assert other.extend(KEY, conversation(7)[6:], after="m5")
    assert not other.flush(0.2)  # the key's item is held by the busy replica
    assert recorder.gate is not None
    recorder.gate.set()
    assert recorder.called.wait(10)
    assert other.flush(10)
    assert [item.turns for item in recorder.items] == [conversation(4), conversation(7)[4:]]
    assert busy.pending() == []


def test_replicas_extending_one_thread_at_once_queue_each_turn_once(
    make_queue: MakeQueue, open_pools: Callable[[], ConnectionPool]
) -> None:
    """Two replicas receive the same new turn of a thread: one appends it, the other is told
    that the cursor moved (and would put the whole conversation, which replaces)."""
    replicas = [make_queue(on=open_pools()) for _ in range(2)]
    thread = conversation(41)
    replicas[0].put(KEY, thread[:1])
    both = threading.Barrier(2)
    appended: list[list[bool]] = [[], []]

    def add(r: int) -> None:
        for n in range(1, 41):
            both.wait()
            appended[r].append(replicas[r].extend(KEY, [thread[n]], after=f"m{n - 1}"))

    workers = [threading.Thread(target=add, args=(r,)) for r in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert [a + b for a, b in zip(*appended, strict=True)] == [1] * 40
    (item,) = replicas[1].pending()
    assert item.turns == thread


def test_a_live_replica_keeps_its_item_past_the_lease_by_renewing_it(
    make_queue: MakeQueue, open_pools: Callable[[], ConnectionPool], recorder: Recorder
) -> None:
    holder = make_queue(start=True, debounce_seconds=0.0, lease_seconds=0.6)
    recorder.gate = threading.Event()
    holder.put_now(KEY, conversation(2))
    assert recorder.entered.wait(10)
    other = make_queue(on=open_pools(), process=Recorder(), lease_seconds=0.6)
    assert not other.flush(1.5)  # two and a half leases: renewed, never taken
    recorder.gate.set()
    assert other.flush(10)
    assert len(recorder.items) == 1


def child(command: str, config: DeerMemConfig, record: Path) -> subprocess.Popen[str]:
    assert config.database_url is not None
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.postgres.queue_child",
            command,
            config.database_url,
            config.database_schema,
            str(record),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=ENV,
    )


def test_a_replica_killed_during_processing_leaves_its_item_to_another_after_the_lease(
    tmp_path: Path, config: DeerMemConfig, make_queue: MakeQueue, recorder: Recorder
) -> None:
    record = tmp_path / "record.txt"
    staller = child("stall", config, record)
    assert staller.stdout is not None
    assert staller.stdout.readline() == "processing\n"
    other = make_queue(lease_seconds=LEASE_S)
    assert not other.flush(0.3)  # claimed by the child, whose lease runs
    staller.send_signal(signal.SIGKILL)
    staller.wait()
    make_queue(start=True, poll_seconds=0.1)
    assert recorder.called.wait(10)  # once the lease has run out
    assert recorded(record) == ["stall"]
    assert [(item.key.thread_id, item.turns, item.signals) for item in recorder.items] == [
        ("stall", conversation(2), ["goal"])
    ]
    settle(other, 0)
    assert len(recorder.items) == 1


def test_a_replica_killed_after_processing_committed_has_it_processed_again_once(
    tmp_path: Path, config: DeerMemConfig, make_queue: MakeQueue, recorder: Recorder
) -> None:
    """Delivery is at least once: killed between the extraction's commit and the queue's, an
    item is handed out again, alike, for the apply step to recognise."""
    record = tmp_path / "record.txt"
    dying = child("commit-then-die", config, record)
    assert dying.wait(30) == -signal.SIGKILL
    assert recorded(record) == ["commit-then-die"]
    queue = make_queue(lease_seconds=LEASE_S)
    (left,) = queue.pending()
    assert queue.flush(10)  # waits out the dead replica's lease
    (again,) = recorder.items
    assert (again.key, again.turns, again.signals) == (left.key, conversation(2), ["goal"])
    assert again.first_enqueued_at == left.first_enqueued_at
    assert queue.pending() == []
    assert recorded(record) == ["commit-then-die"]


@pytest.mark.parametrize("round_", range(10 if LONG else 1))
def test_replicas_killed_at_random_lose_no_item_and_repeat_only_the_one_they_held(
    tmp_path: Path, config: DeerMemConfig, make_queue: MakeQueue, recorder: Recorder, round_: int
) -> None:
    rng = random.Random(round_)
    queue = make_queue(debounce_seconds=0.0, lease_seconds=LEASE_S)
    threads = [f"k{n}" for n in range(40)]
    for thread in threads:
        queue.put(QueueKey(thread, "crash"), conversation(2))
    records = [tmp_path / "victim.txt", tmp_path / "survivor.txt"]
    victim, survivor = (child("drain", config, record) for record in records)
    for worker in (victim, survivor):
        assert worker.stdout is not None
        assert worker.stdout.readline() == "ready\n"
    time.sleep(rng.uniform(0.05, 0.3))
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert queue.flush(30)  # beside the survivor, once the victim's lease has run out
    survivor.terminate()
    survivor.wait()
    by_victim, by_survivor = (recorded(record) for record in records)
    processed = by_victim + by_survivor + recorder.threads()
    assert sorted(set(processed)) == sorted(threads)
    assert by_victim, "the victim died while working"
    # Only the item the victim was finishing when it died may run twice (at least once).
    repeated = sorted(thread for thread in threads if processed.count(thread) > 1)
    assert repeated in ([], by_victim[-1:])
    assert len(processed) == len(threads) + len(repeated)


# -- bad input and broken rows -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "turns", "message"),
    [
        (QueueKey("t1", "al\x00ice"), conversation(2), "user_id must not contain NUL"),
        (QueueKey("t1", 7), conversation(2), "user_id must be a string"),  # type: ignore[arg-type]
        (KEY, {"id": "m0"}, "list of JSON objects"),
        (KEY, ["hello"], "list of JSON objects"),
        (KEY, [{"id": "m0", "text": b"bytes"}], "must be JSON"),
        (KEY, [{"id": "m0", "score": float("nan")}], "must be JSON"),
    ],
)
def test_what_cannot_be_queued_is_refused_and_nothing_is_written(
    make_queue: MakeQueue, key: QueueKey, turns: Any, message: str
) -> None:
    queue = make_queue()
    for put in (queue.put, queue.put_now):
        with pytest.raises(ValueError, match=message):
            put(key, turns)
    with pytest.raises(ValueError, match="trace_id must not contain NUL"):
        queue.put(KEY, conversation(2), trace_id="\x00")
    with pytest.raises(ValueError, match="signals"):
        queue.put(KEY, conversation(2), signals=[None])  # type: ignore[list-item]
    assert queue.pending() == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"debounce_seconds": -1}, "must not be negative"),
        ({"watermark_max_keys": -1}, "must not be negative"),
        ({"lease_seconds": 0}, "must be positive"),
        ({"poll_seconds": -0.5}, "must be positive"),
    ],
)
def test_bad_queue_settings_are_refused(
    make_queue: MakeQueue, options: dict[str, float], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        make_queue(**options)


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("queue_chunks.turns", "not json", "column turns is not JSON"),
        ("queue_chunks.turns", '{"id": "m0"}', "turns are not a JSON list of objects"),
        ("queue_items.key", '["t1"]', "is not a \\[thread, user, agent\\] list"),
    ],
)
def test_a_broken_row_is_reported_and_kept_while_the_others_are_processed(
    make_queue: MakeQueue,
    pool: ConnectionPool,
    recorder: Recorder,
    caplog: pytest.LogCaptureFixture,
    column: str,
    value: str,
    message: str,
) -> None:
    queue = make_queue(debounce_seconds=0.0)
    queue.put(KEY, conversation(2))
    queue.put(OTHER, conversation(2))
    table, name = column.split(".")
    with pool.connection() as conn:
        (broken,) = conn.execute("SELECT min(id) FROM queue_items").fetchone() or (None,)
        target = "item_id" if table == "queue_chunks" else "id"
        conn.execute(f"UPDATE {table} SET {name} = %s WHERE {target} = %s", (value, broken))
    with pytest.raises(MemoryCorruptionError, match=message):
        queue.pending()
    with pytest.raises(MemoryCorruptionError, match=f"item {broken}: .*fix or delete"):
        queue.flush(5)
    with caplog.at_level(logging.ERROR):
        assert queue.run_due() == 1  # the other item; the broken one is logged and kept
    assert recorder.threads() == ["t2"]
    assert f"item {broken}" in caplog.text
    with pool.connection() as conn:
        assert conn.execute("SELECT id FROM queue_items").fetchall() == [(broken,)]

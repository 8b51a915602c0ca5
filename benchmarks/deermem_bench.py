"""DeerMem performance benchmark: the issue's targets, measured through the public manager.

    uv run python -m benchmarks.deermem_bench [--quick] [--only PART] [--json PATH] [--png PATH]
        [--markdown PATH]

(`make bench` runs the full benchmark and writes `benchmarks/results/deermem.{json,png}`.)

What it measures (times in ms; every series reports n, p50, p95, p99):

* create_fact by bucket size band up to `max_facts` (500) and at a full bucket (each call evicts
  one fact), with the time spent in storage.save, index.apply and building the returned document;
* get_context, warm, at 100 and 500 facts: the cached path (same revision: the manager returns
  the text it rendered last) and an uncached render (an untimed update_fact before each call
  changes the revision, so the text is rendered again from the cached bucket);
* search over 10^3, 10^4 and 10^5 facts spread over 10^3 users (pass 1 includes loading each
  user's bucket on first touch; pass 2 repeats the same queries), a fixed 100-fact user among
  0..10^5 facts of others, and one user with 500 facts (index as create_fact left it, then after
  reindex), with the bare index's search and a breakdown / cProfile of the manager's search path;
* index update cost: create_fact of a 100-fact user (deleted again, untimed) with 10^2..10^5 rows
  in the index, and the bare `RetrievalIndex.apply` on a copy of the same index;
* a full `reindex` of the 10^5 store in a fresh child process (3 runs): wall time and peak RSS;
* cold start: a fresh interpreter to its first get_context answer at 100 and 500 facts;
* add(): `manager.add(thread_id, messages, user_id=...)` with a 10-turn LangChain conversation, a
  new thread per call, and threads of 10, 50, 100 and 200 turns growing by one turn per call,
  with nothing extracted yet and right after an extraction (600 s debounce: no extraction runs
  while add() is timed), wall and CPU time, split into the durable queue and the rest (filtering);
* one extraction: `manager.shutdown_flush` of exactly one queued item with the tests' scripted
  chat model (a fixed valid reply, at once): the pipeline's own cost, without an LLM, alone and
  end to end (the add() that queued the item, plus its processing, less the model's invoke).

The original DeerMem cannot run here: its numbers come from `benchmarks/recorded.py`, quoted
from the reference file, and are labelled as recorded wherever they appear.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import platform
import pstats
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from tests.deermem.pipeline_helpers import ScriptedModel, reply

from benchmarks import deermem_report
from benchmarks.datagen import (
    AGENT,
    chat_turn,
    ingest_users,
    query_plan,
    spread,
    unique_facts,
    user_facts,
)
from benchmarks.recorded import RECORDED, SOURCE
from benchmarks.timing import summarize, time_calls
from deerflow.agents.memory.backends.deermem.deermem.core.atomic import atomic_write
from deerflow.agents.memory.backends.deermem.deermem.core.index import IndexedFact, RetrievalIndex
from deerflow.agents.memory.backends.deermem.deermem.core.paths import safe_user_id
from deerflow.agents.memory.backends.deermem.deermem.core.storage import (
    FileMemoryStorage,
    _buckets_of,
)
from deerflow.agents.memory.backends.deermem.deermem.governance import normalized
from deerflow.agents.memory.backends.deermem.deermem.manager import DeerMemMemoryManager

HERE = Path(__file__).resolve().parent
PARTS = ("create_fact", "cold_start", "add", "extraction", "get_context", "stores")
"""What `--only` selects. `create_fact` includes the search of the bucket it fills; `stores`
builds the stores of 10^3..10^5 facts and measures search, index updates and reindex there."""
PROBE_USER = "probe"
PROBE_NUMBER = 999_999  # the probe user's generator number: the same facts in every store
WARMUP_QUERIES = 200


@dataclass(frozen=True)
class Plan:
    """Sizes of one run; `--quick` shrinks everything for the smoke test."""

    quick: bool
    max_facts: int  # the create_fact series fills one bucket to this, then runs `full_calls`
    band: int  # create_fact band width
    full_calls: int
    context_sizes: tuple[int, ...]
    context_samples: int
    others: tuple[int, ...]  # facts of other users in each store; 0 = the probe user alone
    spread_users: int
    probe_facts: int
    spread_queries: int
    probe_queries: int
    single_queries: int
    update_samples: int
    first_touch_users: int
    cold_runs: int
    reindex_runs: int
    workers: int
    add_new_threads: int  # add() of a new 10-turn thread, timed
    thread_turns: tuple[int, ...]  # threads given this many turns (untimed), then ...
    long_threads: int  # ... this many threads of each length ...
    long_adds: int  # ... each grown by one turn per timed add(), this many times
    extraction_items: int  # queued items processed one by one with the scripted model
    extraction_prefill: int  # facts the extracting user holds before the first item
    lexical: bool = False  # `--lexical`: every manager runs with `retrieval_embeddings: false`


FULL = Plan(
    quick=False,
    max_facts=500,
    band=100,
    full_calls=100,
    context_sizes=(100, 500),
    context_samples=300,
    others=(0, 10**3, 10**4, 10**5),
    spread_users=1000,
    probe_facts=100,
    spread_queries=1000,
    probe_queries=2000,
    single_queries=2000,
    update_samples=100,
    first_touch_users=50,
    cold_runs=9,
    reindex_runs=3,
    workers=2,
    add_new_threads=2000,
    thread_turns=(10, 50, 100, 200),
    long_threads=20,
    long_adds=10,
    extraction_items=100,
    extraction_prefill=100,
)
QUICK = Plan(
    quick=True,
    max_facts=50,
    band=10,
    full_calls=10,
    context_sizes=(20, 50),
    context_samples=30,
    others=(0, 10**2, 10**3),
    spread_users=50,
    probe_facts=20,
    spread_queries=100,
    probe_queries=200,
    single_queries=200,
    update_samples=10,
    first_touch_users=5,
    cold_runs=3,
    reindex_runs=2,
    workers=2,
    add_new_threads=100,
    thread_turns=(10, 50),
    long_threads=2,
    long_adds=5,
    extraction_items=10,
    extraction_prefill=20,
)


class Log:
    """Phase lines on stderr with the time since the start."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def __call__(self, message: str) -> None:
        print(f"[{time.perf_counter() - self.start:7.1f} s] {message}", file=sys.stderr, flush=True)


class Spent:
    """Time spent inside wrapped methods, accumulated until `take()`; for component breakdowns."""

    def __init__(self) -> None:
        self._spent: dict[str, float] = {}
        self._wrapped: list[tuple[object, str]] = []

    def wrap(self, owner: object, name: str, label: str) -> None:
        original = getattr(owner, name)
        self._wrapped.append((owner, name))

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                elapsed = (time.perf_counter() - start) * 1000
                self._spent[label] = self._spent.get(label, 0.0) + elapsed

        setattr(owner, name, timed)

    def take(self) -> dict[str, float]:
        spent, self._spent = self._spent, {}
        return spent

    def restore(self) -> None:
        """Remove the wrappers (instance attributes shadowing the class's methods)."""
        for owner, name in reversed(self._wrapped):
            delattr(owner, name)
        self._wrapped.clear()


def instrument(manager: DeerMemMemoryManager) -> Spent:
    """Wrap the manager's storage, index and document builder to see where a write goes."""
    spent = Spent()
    spent.wrap(manager.storage, "save", "storage.save")
    spent.wrap(manager.storage, "load", "storage.load")
    spent.wrap(manager._store._index, "apply", "index.apply")
    spent.wrap(manager._views, "document", "result document")
    return spent


def manager_config(root: Path, plan: Plan, max_facts: int = 500) -> dict[str, Any]:
    config: dict[str, Any] = {"storage_path": str(root), "max_facts": max_facts}
    if plan.lexical:
        config["retrieval_embeddings"] = False
    return config


def open_manager(root: Path, plan: Plan, max_facts: int = 500) -> DeerMemMemoryManager:
    manager = DeerMemMemoryManager(backend_config=manager_config(root, plan, max_facts))
    manager.warm()  # a running server has its tokenizer (and embedding model) loaded
    return manager


def component_medians(calls: list[dict[str, float]], totals: list[float]) -> dict[str, float]:
    """Median ms per component over calls, plus `other` (total minus the components)."""
    labels = sorted({label for call in calls for label in call})
    medians = {label: summarize([c.get(label, 0.0) for c in calls])["p50"] for label in labels}
    others = [t - sum(c.values()) for c, t in zip(calls, totals, strict=True)]
    medians["other (checks, duplicate scan, eviction choice)"] = summarize(others)["p50"]
    return medians


# -- machine -----------------------------------------------------------------------------------


def source_info() -> dict[str, Any]:
    """The commit measured, and the files under src/ that differed from it (best effort)."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=HERE.parent, capture_output=True, text=True, check=False
        )
        return done.stdout if done.returncode == 0 else ""

    changed = git("status", "--porcelain", "--", "src")
    return {
        "commit": git("rev-parse", "HEAD").strip() or None,
        "uncommitted_src_changes": [line[3:] for line in changed.splitlines() if line.strip()],
    }


def machine_info(workdir: Path) -> dict[str, Any]:
    """What this machine is, as far as Python can tell."""
    info: dict[str, Any] = {
        "nproc": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "loadavg_at_start": os.getloadavg(),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["ram_gb"] = round(int(line.split()[1]) / 1024**2, 1)
    except OSError:
        pass
    info["disk"] = disk_info(workdir)
    return info


def disk_info(path: Path) -> dict[str, Any]:
    """Filesystem and block device of `path` (best effort, Linux)."""
    found: dict[str, Any] = {"path": str(path)}
    best = ""
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            device, mount, fstype, *_ = line.split()
            if str(path).startswith(mount) and len(mount) > len(best):
                best = mount
                found.update(device=device, mount=mount, fstype=fstype)
        name = Path(found.get("device", "")).name
        block = Path("/sys/block") / name
        if block.is_dir():
            found["rotational_flag"] = (block / "queue" / "rotational").read_text().strip()
            vendor = block / "device" / "vendor"
            if vendor.exists():
                found["vendor"] = vendor.read_text().strip()
                if found["vendor"] == "0x1af4":
                    found["kind"] = "virtio block device (a VM's virtual disk)"
    except OSError:
        pass
    free = shutil.disk_usage(path).free
    found["free_gb"] = round(free / 1024**3, 1)
    return found


def fsync_floor(workdir: Path, samples: int) -> dict[str, Any]:
    """atomic_write of 512 bytes (temp file, fdatasync, rename, directory fsync): the disk's floor.

    A create_fact commit does several of these; this is the in-process baseline for its cost.
    """
    target = workdir / "fsync-probe.bin"
    data = b"x" * 512
    times = time_calls(samples, lambda i: atomic_write(target, data))
    target.unlink()
    return summarize(times)


def cpu_gauge(samples: int) -> dict[str, Any]:
    """A fixed pure-Python workload (JSON round trip of 200 fact-like records, then sorting
    them by a bytes key): how fast this CPU runs Python right now. Measured at the start and at
    the end of a run, so that runs, and minutes of one run, can be read against each other."""
    rng = random.Random("gauge")
    records = [
        {
            "id": f"fact_{n:032x}",
            "content": " ".join(f"word{rng.randrange(50)}" for _ in range(12)),
            "confidence": rng.random(),
        }
        for n in range(200)
    ]

    def work(i: int) -> None:
        loaded = json.loads(json.dumps(records))
        loaded.sort(key=lambda r: r["content"].encode() + r["id"].encode())

    return summarize(time_calls(samples, work))


# -- stores ------------------------------------------------------------------------------------


def ingest(root: Path, users: list[tuple[str, int, int]], workers: int) -> dict[str, Any]:
    """Write users' facts through `FileMemoryStorage.save`, one ChangeSet per user."""
    root.mkdir(parents=True, exist_ok=True)
    chunks = [users[i::workers] for i in range(workers)]
    chunks = [chunk for chunk in chunks if chunk]
    start = time.perf_counter()
    if len(chunks) == 1:
        commits = ingest_users(str(root), chunks[0])
    else:
        with ProcessPoolExecutor(max_workers=len(chunks)) as pool:
            commits = [
                t
                for part in pool.map(ingest_users, [str(root)] * len(chunks), chunks)
                for t in part
            ]
    seconds = time.perf_counter() - start
    facts = sum(count for _, _, count in users)
    return {
        "facts": facts,
        "users": len(users),
        "workers": len(chunks),
        "seconds": seconds,
        "facts_per_second": facts / seconds,
        "commit_per_user": summarize(commits),
    }


def store_users(plan: Plan, others: int) -> list[tuple[str, int, int]]:
    """The probe user, then `others` facts spread over `plan.spread_users` users."""
    users = [(PROBE_USER, PROBE_NUMBER, plan.probe_facts)]
    if others:
        users += [(f"u{n}", n, count) for n, count in spread(others, plan.spread_users)]
    return users


# -- create_fact, single-user search -----------------------------------------------------------


def bench_create_fact(
    plan: Plan, root: Path, log: Log
) -> tuple[DeerMemMemoryManager, dict[str, Any]]:
    """Fill one bucket to `max_facts` with create_fact, then keep creating into the full bucket."""
    manager = open_manager(root, plan, plan.max_facts)
    user = "writer"
    facts = user_facts(1, plan.max_facts + plan.full_calls)
    spent = instrument(manager)
    totals: list[float] = []
    parts: list[dict[str, float]] = []
    for i, fact in enumerate(facts):
        # Into the full bucket, a confident fact always evicts the least confident one.
        confidence = fact.confidence if i < plan.max_facts else 0.99
        start = time.perf_counter()
        manager.create_fact(fact.content, fact.category, confidence, user_id=user)
        totals.append((time.perf_counter() - start) * 1000)
        parts.append(spent.take())
    spent.restore()
    final = len(manager.storage.load(user, None).facts)
    rows: dict[str, Any] = {}

    def add(key: str, lo: int, hi: int) -> None:
        rows[key] = summarize(totals[lo:hi]) | {
            "bucket_sizes": [lo, min(hi, plan.max_facts) - 1] if lo < plan.max_facts else "full",
            "components_p50": component_medians(parts[lo:hi], totals[lo:hi]),
        }

    for lo in range(0, plan.max_facts, plan.band):
        add(f"create_fact/{lo}-{lo + plan.band - 1}", lo, lo + plan.band)
    for lo in sorted({0, plan.band - 10, plan.max_facts - 10}):
        add(f"create_fact/{lo}-{lo + 9}", lo, lo + 10)
    add("create_fact/full", plan.max_facts, plan.max_facts + plan.full_calls)
    first = rows[f"create_fact/0-{plan.band - 1}"]["p50"]
    last = rows[f"create_fact/{plan.max_facts - plan.band}-{plan.max_facts - 1}"]["p50"]
    log(f"create_fact: {len(totals)} calls, bucket now {final} facts")
    return manager, {
        "user": user,
        "max_facts": plan.max_facts,
        "final_bucket_size": final,
        "rows": rows,
        "growth_last_band_over_first": last / first,
        "growth_full_over_first": rows["create_fact/full"]["p50"] / first,
        "note": (
            "bucket size = facts in the bucket before the call; full-bucket calls use confidence "
            "0.99 so each evicts the least confident fact; components are summed time inside "
            "storage.save / storage.load / index.apply / the returned document, per call"
        ),
    }


def search_breakdown(
    manager: DeerMemMemoryManager, user: str, queries: list[tuple[str, str]]
) -> dict[str, Any]:
    """Where the manager's search spends its time: its steps replayed one by one, timed apart."""
    storage, index, views = manager.storage, manager._store._index, manager._views
    assert isinstance(storage, FileMemoryStorage)  # its private steps are timed one by one
    steps: dict[str, list[float]] = {
        "storage.load (snapshot)": [],
        "index.indexed_revision (SQL)": [],
        "index.search (SQL + query build)": [],
        "map hits to fact dicts": [],
    }
    names = list(steps)
    for _, query in queries:
        t0 = time.perf_counter()
        snapshot = storage.load(user, None)
        t1 = time.perf_counter()
        key = safe_user_id(snapshot.user_id)
        index.indexed_revision(key)
        t2 = time.perf_counter()
        hits = index.search(key, snapshot.bucket, query, limit=5)
        t3 = time.perf_counter()
        [views.public(snapshot.facts[h.fact_id]) | {"score": h.score} for h in hits]
        t4 = time.perf_counter()
        for name, (a, b) in zip(names, [(t0, t1), (t1, t2), (t2, t3), (t3, t4)], strict=True):
            steps[name].append((b - a) * 1000)
    paths, raw_user, _bucket = storage._scope(user, None)
    load_parts: dict[str, Callable[[int], object]] = {
        "_scope (safe id + UserPaths, pathlib)": lambda i: storage._scope(user, None),
        "_open_once (set lookup, user opened)": lambda i: storage._open_once(paths, raw_user),
        "_read_manifest (read + json.loads memory.json)": lambda i: storage._read_manifest(paths),
        "_buckets_of (iterdir of agents/)": lambda i: _buckets_of(paths),
    }
    samples = len(queries)
    return {
        "steps_p50": {name: summarize(times)["p50"] for name, times in steps.items()},
        "steps_sum_of_p50": sum(summarize(times)["p50"] for times in steps.values()),
        "load_parts_p50": {
            name: summarize(time_calls(samples, call))["p50"] for name, call in load_parts.items()
        },
    }


def search_profile(
    manager: DeerMemMemoryManager, user: str, queries: list[tuple[str, str]], top: int = 15
) -> dict[str, Any]:
    """cProfile of manager.search over the queries: the functions with the most own time."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _, query in queries:
        manager.search(query, user_id=user)
    profiler.disable()
    stats = pstats.Stats(profiler)
    table = stats.stats  # type: ignore[attr-defined]
    total = sum(entry[2] for entry in table.values())
    rows = []
    for (filename, line, function), (_, calls, own, cumulative, _) in sorted(
        table.items(), key=lambda item: item[1][2], reverse=True
    )[:top]:
        rows.append(
            {
                "function": f"{short_path(filename)}:{line}({function})",
                "calls_per_search": calls / len(queries),
                "own_us_per_search": own / len(queries) * 1e6,
                "cumulative_us_per_search": cumulative / len(queries) * 1e6,
                "own_share": own / total if total else 0.0,
            }
        )
    return {
        "searches": len(queries),
        "profiled_us_per_search": total / len(queries) * 1e6,
        "top_own_time": rows,
    }


def short_path(filename: str) -> str:
    for marker in ("/src/deerflow/", "/site-packages/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    if filename.startswith(("~", "<")):
        return filename
    return "stdlib/" + Path(filename).name


def searches(
    manager: DeerMemMemoryManager, plan: list[tuple[str, str]]
) -> tuple[list[float], list[int]]:
    """Milliseconds and hit counts of manager.search over (user, query) pairs, top_k=5."""
    counts: list[int] = []

    def call(i: int) -> None:
        user, query = plan[i]
        counts.append(len(manager.search(query, top_k=5, user_id=user)))

    return time_calls(len(plan), call), counts


def bench_single_search(
    plan: Plan, manager: DeerMemMemoryManager, user: str, log: Log
) -> dict[str, Any]:
    """One user with a full bucket: the manager's search, the bare index's, and the breakdown."""
    queries = query_plan([user], plan.single_queries, seed=23)
    key = safe_user_id(user)
    result: dict[str, Any] = {"user": user, "facts": len(manager.storage.load(user, None).facts)}

    def measure(state: str) -> None:
        searches(manager, queries[:WARMUP_QUERIES])
        times, counts = searches(manager, queries)
        bare = time_calls(
            len(queries), lambda i: manager._store._index.search(key, AGENT, queries[i][1], limit=5)
        )
        result[state] = {
            "manager": summarize(times),
            "bare_index": summarize(bare),
            "manager_over_bare_p50": summarize(times)["p50"] / summarize(bare)["p50"],
            "mean_hits": sum(counts) / len(counts),
            "zero_hit_queries": counts.count(0),
            "breakdown": search_breakdown(manager, user, queries),
        }

    measure("as_left_by_create_fact")
    start = time.perf_counter()
    result["reindexed_facts"] = manager.reindex()
    result["reindex_seconds"] = time.perf_counter() - start
    measure("after_reindex")
    result["profile_after_reindex"] = search_profile(manager, user, queries)
    log(f"single-user search: {result['facts']} facts")
    return result


# -- get_context, cold start ---------------------------------------------------------------------


def bench_context(plan: Plan, root: Path, log: Log) -> dict[str, Any]:
    """Warm get_context at each size: the cached path and an uncached render."""
    manager = open_manager(root, plan)
    result: dict[str, Any] = {}
    for size in plan.context_sizes:
        user = f"ctx{size}"
        text = manager.get_context(user)  # first call: loads the bucket's files (untimed)

        def context(i: int, u: str = user) -> str:
            return manager.get_context(u)

        cached = time_calls(plan.context_samples, context)
        snapshot = manager.storage.load(user, None)
        fact_id, fact = min(snapshot.facts.items(), key=lambda item: item[1]["confidence"])
        values = (float(fact["confidence"]), round(float(fact["confidence"]) + 0.001, 3))

        def bust(i: int, u: str = user, f: str = fact_id, v: tuple[float, float] = values) -> None:
            manager.update_fact(f, confidence=v[(i + 1) % 2], user_id=u)

        uncached = time_calls(plan.context_samples, context, before=bust)
        result.setdefault("sizes", {})[str(size)] = {
            "facts": len(snapshot.facts),
            "cached": summarize(cached),
            "uncached": summarize(uncached),
            "chars": len(text),
            "fact_lines": sum(1 for line in text.splitlines() if line.lstrip().startswith("- ")),
        }
    manager.close()
    result["note"] = (
        "cached: repeated calls at one revision return the text rendered last (the manager's "
        "(user, bucket, revision) cache); uncached: an untimed update_fact toggles one fact's "
        "confidence before each call, so the text is rendered again (the bucket itself stays in "
        "the storage cache). The recorded original has no text cache: compare it with uncached."
    )
    log("get_context: " + ", ".join(f"{s} facts" for s in plan.context_sizes))
    return result


def child_env(root: Path) -> dict[str, str]:
    """The environment of a cold start: bytecode cached beside the store, the throw-away start
    filling the cache, whatever the caller's environment says.

    With PYTHONDONTWRITEBYTECODE every start would compile every module from source, which a
    deployed process does not do.
    """
    env = os.environ | {"PYTHONPYCACHEPREFIX": str(root.parent / "pycache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def cold_start_once(root: Path, user: str, warm: bool, lexical: bool) -> dict[str, Any]:
    command = [sys.executable, str(HERE / "cold_start_child.py"), str(root), user]
    command += ["--warm"] * warm + ["--lexical"] * lexical
    launched = time.time()
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=child_env(root)) as child:
        assert child.stdout is not None
        line = child.stdout.readline()
        answered = time.time()
        child.wait()
    if not line:
        raise RuntimeError(f"cold start child failed: {command}")
    report: dict[str, Any] = json.loads(line)
    report["total_ms"] = (answered - launched) * 1000
    report["interpreter_ms"] = (report["started"] - launched) * 1000
    return report


def import_profile(root: Path, top: int = 12) -> dict[str, Any]:
    """`python -X importtime` of the manager module: own import time summed per top package.

    -X importtime adds its own overhead, so read the shares, not the absolute sum.
    """
    module = "deerflow.agents.memory.backends.deermem.deermem.manager"
    child = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        env=child_env(root),
        capture_output=True,
        text=True,
        check=True,
    )
    own: dict[str, float] = {}
    modules = 0
    for line in child.stderr.splitlines():
        parts = line.split("|")
        if len(parts) != 3 or not parts[0].startswith("import time:"):
            continue
        try:
            self_us = int(parts[0].split(":")[1])
        except ValueError:
            continue  # the header line
        name = parts[2].strip()
        package = name.split(".")[0]
        if name.startswith("deerflow."):
            package = (
                ".".join(name.split(".")[:3]) if "deermem" not in name else "deerflow(deermem)"
            )
        own[package] = own.get(package, 0.0) + self_us / 1000
        modules += 1
    total = sum(own.values())
    ranked = sorted(own.items(), key=lambda item: item[1], reverse=True)[:top]
    return {
        "modules": modules,
        "own_ms_sum": total,
        "top_packages": [
            {"package": name, "own_ms": ms, "share": ms / total} for name, ms in ranked
        ],
    }


def bench_cold_start(plan: Plan, root: Path, log: Log) -> dict[str, Any]:
    """Fresh interpreter to first get_context answer; one throw-away start, then `cold_runs`."""
    result: dict[str, Any] = {}
    parts = ("interpreter_ms", "import_ms", "construct_ms", "warm_ms", "first_get_context_ms")
    for size in plan.context_sizes:
        for warm in (False, True):
            # A throw-away start first: .pyc, page cache, kept records.
            cold_start_once(root, f"ctx{size}", warm, plan.lexical)
            runs = [
                cold_start_once(root, f"ctx{size}", warm, plan.lexical)
                for _ in range(plan.cold_runs)
            ]
            totals = [run["total_ms"] for run in runs]
            result.setdefault("runs", {})[f"{size}{'/warm' if warm else ''}"] = {
                "total": summarize(totals),
                "breakdown_p50": {p: summarize([r[p] for r in runs])["p50"] for p in parts},
                "chars": runs[0]["chars"],
                "runs": runs,
            }
    result["import_profile"] = import_profile(root)
    result["note"] = (
        "total: wall time from launching `python benchmarks/cold_start_child.py` to reading its "
        "answer line; interpreter = until the child's first statement; '/warm' rows call "
        "manager.warm() (tokenizer load) before get_context, which splits out that cost"
    )
    log("cold start done")
    return result


# -- the write pipeline: add() and one extraction --------------------------------------------------

ADD_TURNS = 10  # exchanges (a user message and the agent's answer) in the conversation add() gets
DRAIN_EVERY = 500  # new-thread adds between untimed drains, so the queue stays under max depth
ADD_WARMUP = 20
EXTRACTION_WARMUP = 3
EXTRACT_USER, EXTRACT_NUMBER = "extractor", 424_242
# No extraction may run while add() is timed: the first would come 600 s after a thread's put.
PIPELINE_SETTINGS: dict[str, Any] = {"debounce_seconds": 600.0, "debounce_max_wait_seconds": 600.0}


class TimedModel(ScriptedModel):
    """The tests' scripted chat model (instant, fixed replies), timing each `invoke`."""

    spent_ms: ClassVar[list[float]] = []

    def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return super().invoke(input, config, **kwargs)
        finally:
            TimedModel.spent_ms.append((time.perf_counter() - start) * 1000)


def chat_messages(thread: str, rng: random.Random, turns: int, first: int = 0) -> list[BaseMessage]:
    """`turns` exchanges as LangChain messages with ids, as the host hands them to add()."""
    messages: list[BaseMessage] = []
    for n in range(first, first + turns):
        ask, answer = chat_turn(rng)
        messages.append(HumanMessage(ask, id=f"{thread}-h{n}"))
        messages.append(AIMessage(answer, id=f"{thread}-a{n}"))
    return messages


def pipeline_manager(
    root: Path, model: Any = None
) -> tuple[DeerMemMemoryManager, list[dict[str, Any]]]:
    """A manager with a 600 s debounce; the list collects every extraction's metrics."""
    extractions: list[dict[str, Any]] = []
    hooks: dict[str, Any] = {"extraction_callback": extractions.append}
    if model is not None:
        hooks["host_llm_factory"] = lambda: model
    manager = DeerMemMemoryManager.from_config(
        {"storage_path": str(root), "max_facts": 500, **PIPELINE_SETTINGS}, **hooks
    )
    manager.warm()
    return manager, extractions


def with_cpu(call: Callable[[int], object], into: list[float]) -> Callable[[int], None]:
    """`call`, also appending the CPU time (ms) the calling thread spent in it to `into`.

    On a shared machine the wall time includes whatever ran instead of this process; the
    thread's CPU time is what the call itself cost (its system calls included, not the waits).
    """

    def timed(i: int) -> None:
        start = time.thread_time()
        call(i)
        into.append((time.thread_time() - start) * 1000)

    return timed


QUEUE_CALLS = ("put", "extend", "cursor")  # `extend` and `cursor` exist since 5.6's chunks


def split_queue(times: list[float], queued: list[float]) -> dict[str, float]:
    """Median ms of the queue's calls (SQLite) and of the rest of add() (filtering, turn dicts)."""
    return {
        "queue (SQLite)": summarize(queued)["p50"],
        "other (filter, turn dicts, key)": summarize(
            [t - q for t, q in zip(times, queued, strict=True)]
        )["p50"],
    }


def timed_adds(
    count: int, add: Callable[[int], object], before: Callable[[int], None], spent: Spent
) -> dict[str, Any]:
    """`count` timed calls of `add`: wall and CPU time, and the queue's share of each call."""
    queued: list[float] = []

    def prepare(i: int) -> None:
        spent.take()  # whatever `before` and the untimed calls queued is not this call's
        before(i)
        spent.take()

    def call(i: int) -> None:
        add(i)
        queued.append(sum(spent.take().values()))

    cpu: list[float] = []
    wall = time_calls(count, with_cpu(call, cpu), before=prepare)
    return summarize(wall) | {"cpu": summarize(cpu), "components_p50": split_queue(wall, queued)}


def bench_add(plan: Plan, root: Path, log: Log) -> dict[str, Any]:
    """add() through the manager: new 10-turn threads, then long threads growing by a turn."""
    manager, extractions = pipeline_manager(root, ScriptedModel(responses=[reply()]))
    user = "adder"
    rng = random.Random("add")
    messages = chat_messages("first", rng, ADD_TURNS)
    start = time.perf_counter()
    manager.add("first", messages, user_id=user)  # opens the journal, starts the worker
    first_ms = (time.perf_counter() - start) * 1000
    for i in range(ADD_WARMUP):
        manager.add(f"warm{i}", chat_messages(f"warm{i}", rng, ADD_TURNS), user_id=user)
    manager.cancel_pending(user_id=user)
    queue = manager._writer.queue
    spent = Spent()
    for name in QUEUE_CALLS:
        if hasattr(queue, name):
            spent.wrap(queue, name, name)
    current: dict[str, Any] = {}

    def new_thread(i: int) -> None:
        if i and i % DRAIN_EVERY == 0:
            manager.cancel_pending(user_id=user)
        current["thread"] = f"new{i}"
        current["messages"] = chat_messages(current["thread"], rng, ADD_TURNS)

    def add(i: int) -> None:
        manager.add(current["thread"], current["messages"], user_id=user)

    new = timed_adds(plan.add_new_threads, add, new_thread, spent)
    manager.cancel_pending(user_id=user)

    def long_thread(turns: int, extracted: bool) -> Callable[[int], None]:
        """Before each call: a new thread of `turns` turns every `long_adds` calls, one more turn
        otherwise; with `extracted`, everything queued before the call is extracted first."""

        def before(i: int) -> None:
            thread, step = divmod(i, plan.long_adds)
            if step == 0:
                current["thread"] = f"long{turns}-{extracted:d}-{thread}"
                current["messages"] = chat_messages(current["thread"], rng, turns)
                manager.add(current["thread"], current["messages"], user_id=user)
            if extracted and not manager.shutdown_flush(60):
                raise RuntimeError(f"not extracted: {extractions[-1:]}")
            current["messages"] += chat_messages(current["thread"], rng, 1, first=turns + step)

        return before

    count = plan.long_threads * plan.long_adds
    by_turns: dict[str, dict[str, Any]] = {}
    for turns in plan.thread_turns:
        by_turns[str(turns)] = {"pending": timed_adds(count, add, long_thread(turns, False), spent)}
    during = len(extractions)
    for turns in plan.thread_turns:
        by_turns[str(turns)]["extracted"] = timed_adds(count, add, long_thread(turns, True), spent)
    manager.cancel_pending(user_id=user)
    spent.restore()
    manager.close()
    longest = by_turns[str(max(plan.thread_turns))]["pending"]
    log(
        f"add(): new thread p99 {new['p99']:.3f} ms (CPU {new['cpu']['p99']:.3f}), "
        f"{max(plan.thread_turns)} turns pending p99 {longest['p99']:.3f} ms "
        f"(CPU {longest['cpu']['p99']:.3f})"
    )
    return {
        "first_add_ms": first_ms,
        "new_thread": new,
        "by_turns": by_turns,
        "extractions_during_measurement": during,
        "conversation": {
            "turns": ADD_TURNS,
            "messages": len(messages),
            "chars": sum(len(str(m.content)) for m in messages),
        },
        "settings": PIPELINE_SETTINGS | {"queue_max_depth": 1000, "synchronous": "NORMAL"},
        "note": (
            "manager.add(thread_id, messages, user_id=...) with LangChain messages with ids "
            f"(a {ADD_TURNS}-turn conversation is {len(messages)} HumanMessage/AIMessage, ~8.4k "
            f"chars); new_thread: a new {ADD_TURNS}-turn thread per call, the queue drained "
            f"(untimed) every {DRAIN_EVERY} calls; by_turns[N]: {plan.long_threads} threads given "
            f"N turns (untimed), then {plan.long_adds} timed adds each of the conversation grown "
            "by one turn; pending: nothing extracted (600 s debounce), so every turn is queued; "
            "extracted: an untimed shutdown_flush (instant scripted model) before each add, so "
            "only the new turn is after the watermark. The worker thread runs. first_add_ms "
            "opens the journal. cpu: the calling thread's CPU time in the same calls "
            "(time.thread_time); components: the queue's calls (put, extend, cursor) timed by a "
            "wrapper, the rest is add() minus them"
        ),
    }


def bench_extraction(plan: Plan, root: Path, log: Log) -> dict[str, Any]:
    """One queued item's processing (extract with an instant scripted model, apply, commit)."""
    prefill = ingest(root, [(EXTRACT_USER, EXTRACT_NUMBER, plan.extraction_prefill)], 1)
    held = {normalized(f.content) for f in user_facts(EXTRACT_NUMBER, plan.extraction_prefill)}
    count = EXTRACTION_WARMUP + plan.extraction_items
    fresh = unique_facts(random.Random("extraction"), count * 2, first_id=66 * 10**9)
    proposed = [f for f in fresh if normalized(f.content) not in held][:count]
    replies = [reply({"content": f.content, "category": f.category}) for f in proposed]
    model = TimedModel(responses=replies)
    manager, extractions = pipeline_manager(root, model)
    spent = instrument(manager)
    rng = random.Random("extraction-chat")
    totals: list[float] = []
    parts: list[dict[str, float]] = []
    invokes: list[float] = []
    adds: list[float] = []
    for i in range(count):
        thread = f"x{i}"
        conversation = chat_messages(thread, rng, ADD_TURNS)
        start = time.perf_counter()
        manager.add(thread, conversation, user_id=EXTRACT_USER)
        add_ms = (time.perf_counter() - start) * 1000
        time.sleep(0.002)  # let the worker, woken by the put, go back to sleep
        spent.take()
        TimedModel.spent_ms.clear()
        if i == EXTRACTION_WARMUP:
            gc.collect()
        start = time.perf_counter()
        flushed = manager.shutdown_flush(60)
        elapsed = (time.perf_counter() - start) * 1000
        if not flushed:
            raise RuntimeError(f"item {i} was not processed: {extractions[-1:]}")
        part = spent.take()
        part["model.invoke (scripted, instant)"] = sum(TimedModel.spent_ms)
        ScriptedModel.prompts.clear()
        if i >= EXTRACTION_WARMUP:
            totals.append(elapsed)
            parts.append(part)
            invokes.append(sum(TimedModel.spent_ms))
            adds.append(add_ms)
    spent.restore()
    facts_after = len(manager.storage.load(EXTRACT_USER, None).facts)
    manager.close()
    measured = extractions[EXTRACTION_WARMUP:]
    labels = sorted({label for part in parts for label in part})
    components = {label: summarize([p.get(label, 0.0) for p in parts])["p50"] for label in labels}
    components["other (queue claim/finish, prompt, parse, gate, apply)"] = summarize(
        [t - sum(p.values()) for p, t in zip(parts, totals, strict=True)]
    )["p50"]
    log(f"extraction: {len(totals)} items, p50 {summarize(totals)['p50']:.2f} ms")
    return {
        "items": len(totals),
        "processing": summarize(totals),
        "model_invoke": summarize(invokes),
        "processing_without_model": summarize(
            [t - m for t, m in zip(totals, invokes, strict=True)]
        ),
        "end_to_end_without_model": summarize(
            [a + t - m for a, t, m in zip(adds, totals, invokes, strict=True)]
        ),
        "components_p50": components,
        "succeeded": sum(1 for e in measured if e.get("success")),
        "facts_before": plan.extraction_prefill,
        "facts_after": facts_after,
        "prefill_commit_ms": prefill["commit_per_user"]["p50"],
        "note": (
            "manager.shutdown_flush(60) with exactly one pending item (a new thread of 10 turns, "
            "queued untimed by add(), so filtering is done): claim from the journal, load the "
            "user's bucket, build the prompt, call the model, parse and gate the reply, apply it "
            "and commit (files + history + index), delete the item and advance the watermark. "
            "The model is the tests' ScriptedModel returning a fixed valid reply (one new fact, a "
            "different one per item) at once; its invoke time is included and reported apart. "
            "processing_without_model: processing less the invoke; end_to_end_without_model: "
            "the add() that queued the item (timed) plus its processing, less the invoke. "
            f"The user holds {plan.extraction_prefill} facts before the first item and one more "
            f"after each; {EXTRACTION_WARMUP} untimed items first"
        ),
    }


# -- stores of many users ------------------------------------------------------------------------


def reindex_child(root: Path, plan: Plan) -> dict[str, Any]:
    """Full reindex in a fresh process; stderr is passed through (a progress bar on a terminal)."""
    start = time.perf_counter()
    flags = ["--lexical"] if plan.lexical else []
    child = subprocess.run(
        [sys.executable, str(HERE / "reindex_child.py"), str(root), *flags],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    report: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
    report["process_wall_seconds"] = time.perf_counter() - start
    return report


def copy_index(root: Path, destination: Path) -> Path:
    source = root / ".retrieval" / "index.sqlite3"
    target = destination / "index.sqlite3"
    destination.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{source}{suffix}").exists():
            shutil.copyfile(f"{source}{suffix}", f"{target}{suffix}")
    return target


def extra_facts(plan: Plan, manager: DeerMemMemoryManager) -> list[IndexedFact]:
    """Facts new to the probe user (no normalised duplicate of what it holds)."""
    held = {normalized(f["content"]) for f in manager.storage.load(PROBE_USER, None).facts.values()}
    fresh = unique_facts(random.Random("updates"), plan.update_samples * 2, first_id=77 * 10**9)
    return [f for f in fresh if normalized(f.content) not in held][: plan.update_samples]


def taking_turns(sizes: list[int], rounds: int) -> Iterator[tuple[int, int]]:
    """`(round, size)`: every size once per round, the first of a round moving on each time."""
    for n in range(rounds):
        for k in range(len(sizes)):
            yield n, sizes[(n + k) % len(sizes)]


def bench_updates(plan: Plan, roots: dict[int, Path]) -> dict[str, dict[str, Any]]:
    """Per store (by facts held): create_fact of the probe user, then `RetrievalIndex.apply` on
    a copy of the store's index; each new fact deleted again, untimed.

    The stores take turns call by call, so that "an update costs the same at 10^2 and 10^5 rows"
    compares sizes measured in the same minutes. Measured one store after another, minutes
    apart, a slow phase of this VM moved one size's p50 by 1.4-1.7x.
    """
    sizes = sorted(roots)
    managers = {size: open_manager(roots[size], plan) for size in sizes}
    facts = {size: extra_facts(plan, managers[size]) for size in sizes}
    spent = {size: instrument(managers[size]) for size in sizes}
    totals: dict[int, list[float]] = {size: [] for size in sizes}
    parts: dict[int, list[dict[str, float]]] = {size: [] for size in sizes}
    for n, size in taking_turns(sizes, plan.update_samples):
        manager, fact = managers[size], facts[size][n]
        start = time.perf_counter()
        _, fact_id = manager.create_fact(
            fact.content, fact.category, fact.confidence, user_id=PROBE_USER
        )
        totals[size].append((time.perf_counter() - start) * 1000)
        parts[size].append(spent[size].take())
        assert fact_id is not None
        manager.delete_fact(fact_id, user_id=PROBE_USER)
        spent[size].take()
    for size in sizes:
        spent[size].restore()
        managers[size].close()
    result = {
        str(size): {
            "create_fact": summarize(totals[size]),
            "index_apply_inside_create_fact": summarize(
                [p.get("index.apply", 0.0) for p in parts[size]]
            ),
            "components_p50": component_medians(parts[size], totals[size]),
        }
        for size in sizes
    }
    for size, bare in bare_apply(plan, roots).items():
        result[str(size)] |= bare
    return result


def bare_apply(plan: Plan, roots: dict[int, Path]) -> dict[int, dict[str, Any]]:
    """RetrievalIndex.apply of one new fact to the probe user in a copy of each store's index
    (timed), then its delete (untimed); the stores taking turns as in `bench_updates`."""
    sizes = sorted(roots)
    indexes = {
        size: RetrievalIndex(copy_index(root, root.parent / f"bare-apply-{root.name}"))
        for size, root in roots.items()
    }
    facts = unique_facts(random.Random("bare"), plan.update_samples, first_id=88 * 10**9)
    revisions = {}
    for size, index in indexes.items():
        revision = index.indexed_revision(safe_user_id(PROBE_USER))
        if revision is None:
            raise RuntimeError(f"probe user is not indexed in the {size}-fact store")
        revisions[size] = revision
    times: dict[int, list[float]] = {size: [] for size in sizes}
    for n, size in taking_turns(sizes, plan.update_samples):
        index = indexes[size]
        revisions[size] += 1
        start = time.perf_counter()
        index.apply(PROBE_USER, revisions[size], [facts[n]], [])
        times[size].append((time.perf_counter() - start) * 1000)
        revisions[size] += 1
        index.apply(PROBE_USER, revisions[size], [], [(AGENT, facts[n].fact_id)])
    result = {}
    for size, index in indexes.items():
        (rows,) = index._conn.execute("SELECT count(*) FROM facts").fetchone()
        index.close()
        result[size] = {"apply": summarize(times[size]), "index_rows": rows}
    return result


def bench_store(plan: Plan, root: Path, others: int, largest: bool, log: Log) -> dict[str, Any]:
    """Everything measured on one store: build its index, search, update cost."""
    result: dict[str, Any] = {"others": others, "facts": others + plan.probe_facts}
    spread_users = [f"u{n}" for n, _ in spread(others, plan.spread_users)] if others else []
    rng = random.Random(31)
    if largest:
        if spread_users:
            # Without an index: each user's first search rebuilds its rows (lazy path).
            sample = rng.sample(spread_users, min(plan.first_touch_users, len(spread_users)))
            lazy = DeerMemMemoryManager(backend_config=manager_config(root, plan))
            times = time_calls(
                len(sample), lambda i: lazy.search("prefers code", user_id=sample[i])
            )
            lazy.close()
            result["first_search_without_index"] = summarize(times)
        runs = []
        for run in range(plan.reindex_runs):
            log(f"reindex {run + 1}/{plan.reindex_runs} of {result['facts']} facts, child process")
            runs.append(reindex_child(root, plan))
            log(f"reindex: {runs[-1]['seconds']:.2f} s, peak RSS {runs[-1]['peak_rss_mb']:.0f} MB")
        result["reindex"] = {
            "facts": runs[0]["facts"],
            "runs": runs,
            "seconds": summarize([r["seconds"] for r in runs]),
            "peak_rss_mb": summarize([r["peak_rss_mb"] for r in runs]),
            "rss_after_imports_mb": summarize([r["rss_after_imports_mb"] for r in runs]),
            "reading_files_seconds": summarize([r["reading_files_seconds"] for r in runs]),
            "note": (
                "back-to-back runs in fresh processes; the first reads a store written about a "
                "minute earlier. This VM evicts idle file pages (DAMON pageout), so how much of "
                "the store is still in the page cache varies from run to run."
            ),
        }
        manager = open_manager(root, plan)
    else:
        manager = open_manager(root, plan)
        start = time.perf_counter()
        manager.reindex()
        result["reindex_in_process_seconds"] = time.perf_counter() - start
        manager.close()
        # reindex leaves every bucket in the storage cache: start the searches without it, so
        # pass 1 loads each user on first touch in every store alike.
        manager = open_manager(root, plan)
    touched: set[str] = set()
    if spread_users:
        plan_queries = query_plan(spread_users, plan.spread_queries, seed=11)
        touched = {user for user, _ in plan_queries}
        pass1, counts = searches(manager, plan_queries)
        pass2, _ = searches(manager, plan_queries)
        result["spread"] = {
            "users": len(spread_users),
            "pass1": summarize(pass1),
            "pass2": summarize(pass2),
            "mean_hits": sum(counts) / len(counts),
            "zero_hit_queries": counts.count(0),
            "distinct_users_queried": len(touched),
        }
    probe_queries = query_plan([PROBE_USER], plan.probe_queries, seed=17)
    searches(manager, probe_queries[:WARMUP_QUERIES])
    probe_times, probe_counts = searches(manager, probe_queries)
    result["probe"] = {
        "search": summarize(probe_times),
        "mean_hits": sum(probe_counts) / len(probe_counts),
    }
    if largest and spread_users:
        fresh = [u for u in spread_users if u not in touched][: plan.first_touch_users]
        times = time_calls(len(fresh), lambda i: manager.get_context(fresh[i]))
        result["get_context_first_load"] = summarize(times)
    manager.close()
    log(
        f"store +{others}: probe search p50 {result['probe']['search']['p50']:.3f} ms"
        + (f", spread pass2 p99 {result['spread']['pass2']['p99']:.3f} ms" if spread_users else "")
    )
    return result


# -- main ------------------------------------------------------------------------------------------


@contextmanager
def workspace(parent: Path | None, keep: bool) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="deermem-bench-", dir=parent))
    try:
        yield path
    finally:
        if not keep:
            shutil.rmtree(path, ignore_errors=True)


def run(plan: Plan, workdir: Path, log: Log, parts: frozenset[str]) -> dict[str, Any]:
    """The benchmark's `parts` (see `PARTS`), after the disk's fsync floor as a baseline."""
    started = datetime.now(UTC).isoformat(timespec="seconds")
    stores_gb = 1e-5 * max(plan.others) if "stores" in parts else 0.0  # ~10 kB a fact
    need_gb = 0.5 + stores_gb
    free_gb = shutil.disk_usage(workdir).free / 1024**3
    if free_gb < need_gb:
        raise SystemExit(f"{workdir}: {free_gb:.1f} GB free, the benchmark needs ~{need_gb:.1f}")
    sections: dict[str, Any] = {}
    machine = machine_info(workdir)
    gauge_samples = 200 if not plan.quick else 20
    sections["baseline"] = {
        "fsync_write": fsync_floor(workdir, gauge_samples),
        "cpu_gauge": cpu_gauge(gauge_samples),
    }
    log(
        f"machine: {machine.get('nproc')} cpus, python {machine['python']}, "
        f"sqlite {machine['sqlite']}; fsync floor p50 "
        f"{sections['baseline']['fsync_write']['p50']:.3f} ms, CPU gauge p50 "
        f"{sections['baseline']['cpu_gauge']['p50']:.3f} ms"
    )

    # The gauge after each part (and each store): a part timed in a slow phase shows it.
    gauges: dict[str, float] = {}

    def gauge(after: str) -> None:
        gauges[after] = cpu_gauge(gauge_samples)["p50"]

    ingest_report: dict[str, Any] = {}
    context_root = workdir / "context"
    if parts & {"cold_start", "get_context"}:
        ingest_report["context"] = ingest(
            context_root, [(f"ctx{n}", 100 + n, n) for n in plan.context_sizes], 1
        )
    if "create_fact" in parts:
        manager, sections["create_fact"] = bench_create_fact(plan, workdir / "single", log)
        single = bench_single_search(plan, manager, sections["create_fact"]["user"], log)
        manager.close()
        sections["search"] = {"single_user": single}
        gauge("create_fact")
    if "cold_start" in parts:
        sections["cold_start"] = bench_cold_start(plan, context_root, log)
        gauge("cold_start")
    if "add" in parts:
        sections["add"] = bench_add(plan, workdir / "pipeline-add", log)
        gauge("add")
    if "extraction" in parts:
        sections["extraction"] = bench_extraction(plan, workdir / "pipeline-extraction", log)
        gauge("extraction")
    if "get_context" in parts:
        sections["get_context"] = bench_context(plan, context_root, log)
        gauge("get_context")

    if "stores" in parts:
        # Written after the latency parts, so that none of them is timed while the disk is
        # still busy with these 10^5 commits (docs/benchmarks.md, "Method").
        for others in plan.others:
            root = workdir / f"store-{others}"
            ingest_report[str(others)] = ingest(root, store_users(plan, others), plan.workers)
            log(
                f"ingested store +{others}: {ingest_report[str(others)]['facts']} facts in "
                f"{ingest_report[str(others)]['seconds']:.1f} s"
            )
        stores = {}
        for others in plan.others:
            stores[str(others)] = bench_store(
                plan, workdir / f"store-{others}", others, others == max(plan.others), log
            )
            gauge(f"store +{others}" + (" (with reindex)" if others == max(plan.others) else ""))
        largest = stores[str(max(plan.others))]
        sections["index_update"] = bench_updates(
            plan, {s["facts"]: workdir / f"store-{s['others']}" for s in stores.values()}
        )
        gauge("index updates")
        for store in stores.values():
            store["index_rows"] = sections["index_update"][str(store["facts"])]["index_rows"]
        sections.setdefault("search", {})["stores"] = stores
        sections["reindex"] = largest["reindex"] | {"store_facts": largest["facts"]}
    if ingest_report:
        sections["ingest"] = ingest_report
    sections["baseline"]["cpu_gauge_end"] = cpu_gauge(gauge_samples)
    sections["baseline"]["cpu_gauge_after"] = gauges
    log(f"CPU gauge p50 at the end {sections['baseline']['cpu_gauge_end']['p50']:.3f} ms")
    return {
        "schema": 1,
        "benchmark": "deermem",
        "quick": plan.quick,
        "parts": sorted(parts),
        "command": " ".join(
            [Path(sys.executable).name, "-m", "benchmarks.deermem_bench", *sys.argv[1:]]
        ),
        "started_at": started,
        "machine": machine,
        "source": source_info(),
        "plan": asdict(plan),
        "recorded_source": SOURCE,
        "recorded": RECORDED,
        "sections": sections,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    parser.add_argument("--json", type=Path, help="write every number here")
    parser.add_argument("--png", type=Path, help="write a chart here (needs matplotlib)")
    parser.add_argument("--markdown", type=Path, help="write the tables as Markdown here")
    parser.add_argument("--workdir", type=Path, help="parent of the temporary stores")
    parser.add_argument("--keep", action="store_true", help="keep the temporary stores")
    parser.add_argument(
        "--only",
        action="append",
        choices=PARTS,
        metavar="PART",
        help=f"run only this part; repeatable; one of: {', '.join(PARTS)}",
    )
    parser.add_argument(
        "--lexical",
        action="store_true",
        help="run every manager with retrieval_embeddings: false (lexical search only)",
    )
    args = parser.parse_args(argv)
    parts = frozenset(args.only or PARTS)
    if args.png and parts != set(PARTS):
        parser.error("--png draws every part: it cannot be combined with --only")
    plan = replace(QUICK if args.quick else FULL, lexical=args.lexical)
    log = Log()
    with workspace(args.workdir, args.keep) as workdir:
        log(f"{'quick' if plan.quick else 'full'} run of {', '.join(sorted(parts))} in {workdir}")
        results = run(plan, workdir, log, parts)
    results["wall_seconds"] = time.perf_counter() - log.start
    results["machine"]["loadavg_at_end"] = os.getloadavg()  # 1, 5, 15 min: others' load
    results["rows"] = deermem_report.rows(results)
    results["targets"] = deermem_report.targets(results)
    deermem_report.print_tables(results)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(deermem_report.markdown(results))
    if args.png:
        deermem_report.chart(results, args.png)
    log(f"done in {results['wall_seconds']:.0f} s")


if __name__ == "__main__":
    main()

"""Numbers of the ORIGINAL DeerMem, recorded outside this project (docs/benchmarks.md).

They were RECORDED by one benchmark of the same design (upstream bytedance/deer-flow at
f1f4af99, 2 CPU cores, Python 3.11.7, SQLite 3.40.1, ext4 on a virtual disk, two full runs);
the original code cannot run here, so
none of them is measured by this benchmark. Each entry keeps both recorded runs. Ratios in the
report are `mean(run 1, run 2) / ours`: above 1 means ours is faster (or smaller).

Keys match the row keys of `deermem_bench`. Times in ms unless the key says otherwise.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["RECORDED", "SOURCE", "recorded_mean"]

SOURCE: Final = "the original DeerMem, recorded: benchmarks/recorded.py"


def _cell(p50: float, p95: float | None, p99: float | None, n: int | None) -> dict[str, Any]:
    return {"p50": p50, "p95": p95, "p99": p99, "n": n}


RECORDED: Final[dict[str, dict[str, Any]]] = {
    # 1. create_fact, one user, by bucket size before the call.
    "create_fact/0-99": {
        "runs": [_cell(41.3, 73.3, 81.9, 100), _cell(43.2, 72.2, 74.8, 100)],
        "what": "DeerMem.create_fact, bucket 0->100, all calls",
    },
    "create_fact/0-9": {
        "runs": [_cell(9.46, 12.5, 13.0, 10), _cell(9.08, 11.6, 11.9, 10)],
        "what": "create_fact, bucket size 0-9",
    },
    "create_fact/90-99": {
        "runs": [_cell(70.6, 74.0, 74.2, 10), _cell(72.3, 75.7, 76.2, 10)],
        "what": "create_fact, bucket size 90-99",
    },
    "create_fact/100-199": {
        "runs": [_cell(106.4, 132.2, 133.9, 100), _cell(109.7, 138.0, 172.6, 100)],
        "what": "create_fact, bucket 100-199",
    },
    "create_fact/200-299": {
        "runs": [_cell(165.6, 196.1, 207.1, 100), _cell(175.9, 211.4, 221.7, 100)],
        "what": "create_fact, bucket 200-299",
    },
    "create_fact/300-399": {
        "runs": [_cell(236.4, 265.9, 278.4, 100), _cell(237.2, 281.8, 291.4, 100)],
        "what": "create_fact, bucket 300-399",
    },
    "create_fact/400-499": {
        "runs": [_cell(286.0, 318.8, 338.3, 100), _cell(309.3, 356.1, 375.1, 100)],
        "what": "create_fact, bucket 400-499",
    },
    "create_fact/490-499": {
        "runs": [_cell(313.2, 331.3, 339.6, 10), _cell(330.4, 379.6, 382.5, 10)],
        "what": "create_fact, bucket size 490-499",
    },
    "create_fact/full": {
        "runs": [_cell(324.7, 338.5, 347.7, 20), _cell(337.7, 377.2, 380.5, 20)],
        "what": "create_fact at 500 (bucket full, capacity eviction)",
    },
    # 2. get_context, warm, same process. The original has no rendered-text cache: its warm
    # call re-renders every time, so it compares with our uncached render.
    "get_context/100": {
        "runs": [_cell(2.09, 2.25, 2.41, 300), _cell(2.20, 2.34, 2.47, 300)],
        "what": "get_context (warm), 100 facts",
    },
    "get_context/500": {
        "runs": [_cell(5.86, 11.2, 20.1, 300), _cell(5.80, 7.48, 21.3, 300)],
        "what": "get_context (warm), 500 facts",
    },
    # 3a. search, 1 user, 500 facts, after warm_retrieval() (all 500 rows indexed).
    "search/single500": {
        "runs": [_cell(0.422, 0.672, 0.747, 500), _cell(0.408, 0.651, 0.783, 500)],
        "what": "search, 1 user, 500 facts, after warm_retrieval()",
    },
    # 3b. 10,000 facts over 100 users (100 each): the shape of our 100-fact probe user among
    # ~10^4 facts, not of our 10^4 facts over 10^3 users (10 each).
    "search/probe10000/pass1": {
        "runs": [_cell(1.55, 3.82, 59.5, 500), _cell(1.64, 3.71, 64.7, 500)],
        "what": "search, 10,000 facts over 100 users (100 each), pass 1",
    },
    "search/probe10000/pass2": {
        "runs": [_cell(1.53, 3.54, 3.92, 500), _cell(1.64, 3.65, 3.94, 500)],
        "what": "search, 10,000 facts over 100 users (100 each), pass 2",
    },
    # 3b+. 100,000 facts over 1,000 users (100 each): the same shape as ours.
    "search/spread100000/pass1": {
        "runs": [_cell(16.7, 35.0, 38.2, 500), _cell(15.8, 33.1, 38.6, 500)],
        "what": "search, 100,000 facts over 1,000 users, pass 1",
    },
    "search/spread100000/pass2": {
        "runs": [_cell(15.9, 32.7, 33.7, 500), _cell(15.9, 33.1, 33.9, 500)],
        "what": "search, 100,000 facts over 1,000 users, pass 2",
    },
    # Extras of 3b+: cold paths in the 100k store (50 samples each).
    "get_context_first_load/100000": {
        "runs": [_cell(64.7, 76.4, 136.0, 50), _cell(67.0, 69.0, 131.9, 50)],
        "what": "get_context, first load of a user with 100 facts, 100k store",
    },
    "search_lazy_first/100000": {
        "runs": [_cell(133.7, 164.4, 175.6, 50), _cell(131.4, 160.2, 190.0, 50)],
        "what": "first search per scope without warm_retrieval (lazy rebuild), 100k store",
    },
    # Index update cost per fact, quoted from caveat 2 ("about"): storage plus FTS5 upsert,
    # amortised over 100-fact ingest batches (one commit per batch), so NOT like-for-like with
    # our one create_fact commit per fact; the original's create_fact at 100 facts took ~71 ms.
    "index_update/100": {
        "runs": [_cell(1.4, None, None, None), _cell(1.4, None, None, None)],
        "what": "per fact in 100-fact batches incl. storage, empty index ('about 1.4 ms')",
    },
    "index_update/100000": {
        "runs": [_cell(47.0, None, None, None), _cell(47.0, None, None, None)],
        "what": "per fact in 100-fact batches, 100k rows ('about 47 ms per fact')",
    },
    # 100k warm_retrieval() full rebuild; its peak RSS is of a process that also ingested and
    # searched (the peak is reached during the rebuild).
    "reindex/seconds": {
        "runs": [_cell(72.1, None, None, 1), _cell(69.2, None, None, 1)],
        "what": "100k warm_retrieval() full rebuild, seconds",
    },
    "reindex/peak_rss_mb": {
        "runs": [_cell(548.8, None, None, 1), _cell(549.1, None, None, 1)],
        "what": "peak RSS (MB) of the 100k process: ingest + full rebuild + 1,000 searches",
    },
    # 4. Cold start, tiktoken, median of 7 after one throw-away start; breakdown medians.
    "cold_start/100": {
        "runs": [_cell(461, None, None, 7), _cell(457, None, None, 7)],
        "breakdown": [
            {"import": 224, "construct": 16, "first_get_context": 190},
            {"import": 216, "construct": 16, "first_get_context": 186},
        ],
        "what": "cold start to first get_context answer, 100 facts",
    },
    "cold_start/500": {
        "runs": [_cell(724, None, None, 7), _cell(673, None, None, 7)],
        "breakdown": [
            {"import": 224, "construct": 17, "first_get_context": 445},
            {"import": 200, "construct": 16, "first_get_context": 427},
        ],
        "what": "cold start to first get_context answer, 500 facts",
    },
}


def recorded_mean(key: str, stat: str = "p50") -> float | None:
    """The mean over both recorded runs of one statistic, or None when not recorded."""
    entry = RECORDED.get(key)
    if entry is None:
        return None
    values = [run[stat] for run in entry["runs"] if run.get(stat) is not None]
    return sum(values) / len(values) if values else None

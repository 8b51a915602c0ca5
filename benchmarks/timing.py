"""Timing helpers: run a call many times, summarise the samples (median, p95, p99, n)."""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["percentile", "summarize", "time_calls"]


def percentile(ordered: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0..100) of sorted samples, linearly interpolated between ranks."""
    if not ordered:
        raise ValueError("no samples")
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize(samples_ms: Sequence[float]) -> dict[str, Any]:
    """n, p50, p95, p99, mean, min and max of samples in milliseconds."""
    ordered = sorted(samples_ms)
    return {
        "n": len(ordered),
        "p50": percentile(ordered, 50),
        "p95": percentile(ordered, 95),
        "p99": percentile(ordered, 99),
        "mean": statistics.fmean(ordered),
        "min": ordered[0],
        "max": ordered[-1],
    }


def time_calls(
    samples: int,
    call: Callable[[int], object],
    *,
    before: Callable[[int], object] | None = None,
) -> list[float]:
    """Milliseconds of `call(i)` for i in range(samples); `before(i)` runs untimed first.

    The garbage collector stays on (a server has it on too), but runs once before the series.
    """
    gc.collect()
    times: list[float] = []
    for i in range(samples):
        if before is not None:
            before(i)
        start = time.perf_counter()
        call(i)
        times.append((time.perf_counter() - start) * 1000)
    return times

"""Measure whether an awaitable lets the event loop run while it waits.

A 10 ms ticker runs next to the call. An `a`-method that hands its blocking work to a thread
keeps the ticker going; one that blocks in its `async def` body stops it for as long as it
blocks. The longest stretch without a tick is what the assertion judges, so the check means the
same for a backend that answers in a millisecond and for one that takes a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "MAX_STALL_SECONDS",
    "TICK_SECONDS",
    "LoopReport",
    "assert_does_not_block",
    "measure_loop",
]

TICK_SECONDS: Final = 0.01
MAX_STALL_SECONDS: Final = 0.1


@dataclass(frozen=True)
class LoopReport:
    """What the ticker saw during one call.

    Attributes:
        ticks: how many times the 10 ms ticker ran while the call was pending.
        elapsed: seconds the call took.
        longest_stall: the longest time, in seconds, in which the ticker could not run.
    """

    ticks: int
    elapsed: float
    longest_stall: float


async def _watch(awaitable: Awaitable[Any]) -> LoopReport:
    stamps: list[float] = []

    async def tick() -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            stamps.append(time.perf_counter())

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)  # let the ticker start before the call does
    start = time.perf_counter()
    try:
        await awaitable
    finally:
        end = time.perf_counter()
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
    points = [start, *(stamp for stamp in stamps if start < stamp < end), end]
    stall = max(later - earlier for earlier, later in itertools.pairwise(points))
    return LoopReport(ticks=len(points) - 2, elapsed=end - start, longest_stall=stall)


def measure_loop(make_call: Callable[[], Awaitable[Any]]) -> LoopReport:
    """Run `make_call()` in a fresh event loop (`asyncio.run`) next to a 10 ms ticker."""

    async def main() -> LoopReport:
        return await _watch(make_call())

    return asyncio.run(main())


def assert_does_not_block(
    make_call: Callable[[], Awaitable[Any]], *, what: str, max_stall: float = MAX_STALL_SECONDS
) -> LoopReport:
    """Assert the event loop never stalled longer than `max_stall` seconds during the call.

    Args:
        make_call: builds the awaitable, e.g. `lambda: manager.aget_context("u1")`.
        what: the call's name, for the failure message.
        max_stall: the longest stall tolerated, in seconds.

    Returns:
        The `LoopReport`, for callers that want to assert more (e.g. a minimum tick count).
    """
    report = measure_loop(make_call)
    assert report.longest_stall < max_stall, (
        f"{what} blocked the event loop for {report.longest_stall:.3f}s (the call took "
        f"{report.elapsed:.3f}s; a 10 ms ticker ran {report.ticks} times). An async method must "
        f"not do blocking I/O in its body: keep the contract's default, which runs the sync "
        f"method with asyncio.to_thread, or await a truly async client."
    )
    return report

"""Gateway throughput: requests/s and latency of the memory API under concurrent clients.

    uv run python -m benchmarks.gateway_bench [--quick] [--json PATH] [--png PATH] [--markdown PATH]

(`make bench` runs it after the DeerMem benchmark and writes `benchmarks/results/gateway.*`.)

A real `deerflow serve` (one uvicorn process, DeerMem in a temporary directory, no auth) listens
on a loopback port. The memory of user `default` is seeded through the API with `--facts` facts.
Then, for `--seconds` each (after 2 s of unrecorded warm-up), `--clients` concurrent clients
(an httpx.AsyncClient each, one keep-alive connection) send, back to back:

* `GET /api/memory` (the whole document), and
* `GET /api/memory/search?q=…` (queries rotating over words of the seeded facts, limit 10),

first alone, then with `--writers` writers in parallel, each PATCHing its own fact with new
content in a loop (every write is a DeerMem commit: fsync'd files, index update, audit log).

Reported per scenario: completed requests per second, latency p50/p95/p99 in ms, non-2xx counts
(status 0: no answer, the connection was reset);
for the writers, writes per second and their latency. The client runs in this process, the
server in another, on the same machine: on 2 cores they compete for CPU, which the numbers
include. The load average before and after is recorded, since the machine may be shared.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx

from benchmarks.load_report import add_output_options, header, publish
from benchmarks.timing import summarize

REPO: Final = Path(__file__).resolve().parents[1]
TOPICS: Final = (
    "tea", "python", "hiking", "jazz", "rust", "cooking", "chess", "sailing", "kotlin", "pottery",
)  # fmt: skip
# Recorded as the status of a request that got no answer (connection reset or refused).
TRANSPORT_ERROR: Final = 0
_RUNNING: Final = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")


@dataclass
class Settings:
    seconds: float = 10.0
    warmup_seconds: float = 2.0
    clients: int = 100
    writers: int = 8
    facts: int = 100


QUICK: Final = Settings(seconds=1.0, warmup_seconds=0.2, clients=10, writers=2, facts=20)


# -- the server ------------------------------------------------------------------------------------


class Server:
    """`deerflow serve --port 0` in a child process over a fresh DeerMem store."""

    def __init__(self, workdir: Path) -> None:
        config = workdir / "config.yaml"
        config.write_text(
            "memory:\n  backend_config:\n"
            f"    storage_path: {workdir / 'store'}\n"
            "    max_facts: 500\n"
        )
        env = {**os.environ, "DEER_FLOW_HOME": str(workdir), "COLUMNS": "500"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "deerflow", "serve", "--port", "0", "--config", str(config)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.base_url = ""
        self.log: list[str] = []
        self._found = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + 60
        while not self._found.wait(0.1):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("deerflow serve did not start")
        while httpx.get(self.base_url + "/readyz").status_code != 200:
            time.sleep(0.05)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:  # drained, so the pipe never blocks the server
            self.log.append(line)
            found = _RUNNING.search(line)
            if found and not self._found.is_set():
                self.base_url = f"http://127.0.0.1:{found.group(1)}"
                self._found.set()

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# -- load ------------------------------------------------------------------------------------------


@dataclass
class Series:
    latencies_ms: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    recording: bool = False  # off during the warm-up (connections opening, caches filling)

    def record(self, started: float, status: int) -> None:
        if not self.recording:
            return
        self.latencies_ms.append((time.perf_counter() - started) * 1000)
        self.statuses[status] = self.statuses.get(status, 0) + 1

    def report(self, seconds: float) -> dict[str, Any]:
        failed = {str(code): n for code, n in self.statuses.items() if not 200 <= code < 300}
        return {
            "per_second": round(len(self.latencies_ms) / seconds, 1),
            **{key: round(value, 2) for key, value in summarize(self.latencies_ms).items()},
            "non_2xx": failed,
        }


async def _read_loop(
    client: httpx.AsyncClient, path: str, stop: asyncio.Event, series: Series, offset: int
) -> None:
    i = offset
    while not stop.is_set():
        params = {"q": TOPICS[i % len(TOPICS)], "limit": 10} if path.endswith("search") else None
        started = time.perf_counter()
        try:
            response = await client.get(path, params=params)
        except httpx.TransportError:
            series.record(started, TRANSPORT_ERROR)
        else:
            series.record(started, response.status_code)
        i += 1


async def _write_loop(
    client: httpx.AsyncClient, fact_id: str, stop: asyncio.Event, series: Series, writer: int
) -> None:
    i = 0
    while not stop.is_set():
        body = {"content": f"Writer {writer} revision {i} enjoys {TOPICS[i % len(TOPICS)]}"}
        started = time.perf_counter()
        try:
            response = await client.patch(f"/api/memory/facts/{fact_id}", json=body)
        except httpx.TransportError:
            series.record(started, TRANSPORT_ERROR)
        else:
            series.record(started, response.status_code)
        i += 1


async def run_scenario(
    base_url: str, path: str, settings: Settings, writer_facts: list[str]
) -> dict[str, Any]:
    """`settings.clients` readers of `path` for `settings.seconds`, plus writers on their facts.

    Each reader and writer has an AsyncClient of its own with one connection: one shared client
    with a 100-connection pool spends more CPU choosing a connection than the server spends
    answering (httpcore scans its pool per request), which would measure the client.
    """
    clients = [
        httpx.AsyncClient(base_url=base_url, limits=httpx.Limits(max_connections=1), timeout=120)
        for _ in range(settings.clients + len(writer_facts))
    ]
    stop = asyncio.Event()
    reads, writes = Series(), Series()
    readers, writers = clients[: settings.clients], clients[settings.clients :]
    tasks = [
        asyncio.create_task(_read_loop(client, path, stop, reads, i))
        for i, client in enumerate(readers)
    ]
    tasks += [
        asyncio.create_task(_write_loop(client, fact_id, stop, writes, n))
        for n, (client, fact_id) in enumerate(zip(writers, writer_facts, strict=True))
    ]
    await asyncio.sleep(settings.warmup_seconds)
    reads.recording = writes.recording = True
    started = time.perf_counter()
    await asyncio.sleep(settings.seconds)
    stop.set()
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - started  # includes draining the requests in flight
    for client in clients:
        await client.aclose()
    result = {"reads": reads.report(elapsed), "seconds": round(elapsed, 2)}
    if writer_facts:
        result["writes"] = writes.report(elapsed)
    return result


def seed(base_url: str, settings: Settings) -> list[str]:
    """Store `settings.facts` facts; return the ids of the writers' own facts (among them)."""
    ids = []
    with httpx.Client(base_url=base_url, timeout=60) as client:
        for i in range(settings.facts):
            topic = TOPICS[i % len(TOPICS)]
            body = {"content": f"Fact {i}: the user keeps notes about {topic} number {i}"}
            response = client.post("/api/memory/facts", json={**body, "category": "knowledge"})
            response.raise_for_status()
            ids.append(response.json()["id"])
    return ids[: settings.writers]


def measure(settings: Settings, workdir: Path) -> dict[str, Any]:
    server = Server(workdir)
    try:
        writer_facts = seed(server.base_url, settings)
        scenarios: dict[str, Any] = {}
        for name, path in (("get_memory", "/api/memory"), ("search", "/api/memory/search")):
            for label, writers in (("", []), ("+writers", writer_facts)):
                result = asyncio.run(run_scenario(server.base_url, path, settings, writers))
                scenarios[name + label] = {"path": path, "writers": len(writers), **result}
    except Exception:
        sys.stderr.write("".join(server.log[-40:]))
        raise
    finally:
        server.stop()
    return scenarios


# -- report ----------------------------------------------------------------------------------------

_COLUMNS: Final = ("scenario", "req/s", "p50 ms", "p95 ms", "p99 ms", "non-2xx")


def rows(results: dict[str, Any]) -> list[list[str]]:
    table = []
    for name, scenario in results["scenarios"].items():
        for kind in ("reads", "writes"):
            if kind in scenario:
                s = scenario[kind]
                label = name if kind == "reads" else f"  {scenario['writers']} writers (PATCH)"
                failed = ", ".join(f"{c}: {n}" for c, n in s["non_2xx"].items()) or "0"
                table.append(
                    [
                        label,
                        f"{s['per_second']:.0f}",
                        f"{s['p50']:.1f}",
                        f"{s['p95']:.1f}",
                        f"{s['p99']:.1f}",
                        failed,
                    ]
                )
    return table


def chart(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results["scenarios"])
    reads = [results["scenarios"][n]["reads"] for n in names]
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.bar(names, [r["per_second"] for r in reads], color="#1f5fbf")
    left.set_title(f"requests/s, {results['settings']['clients']} clients")
    right.bar(names, [r["p99"] for r in reads], color="#b3261e")
    right.set_title("p99 latency (ms)")
    for axis in (left, right):
        axis.tick_params(axis="x", rotation=20)
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 s, 10 clients (smoke test)")
    parser.add_argument("--seconds", type=float, help="duration of each scenario")
    parser.add_argument("--clients", type=int, help="concurrent readers")
    parser.add_argument("--writers", type=int, help="concurrent writers in the +writers runs")
    add_output_options(parser)
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else Settings()
    for key in ("seconds", "clients", "writers"):
        if getattr(args, key) is not None:
            setattr(settings, key, getattr(args, key))

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="deerflow-gateway-bench-") as workdir:
        scenarios = measure(settings, Path(workdir))
    results = header("gateway", args.quick, vars(settings), load_before)
    results["scenarios"] = scenarios
    publish(
        results,
        "deerflow serve (DeerMem), loopback",
        _COLUMNS,
        rows(results),
        args,
        chart,
    )


if __name__ == "__main__":
    main()

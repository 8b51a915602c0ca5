"""Several `deerflow serve` replicas over one memory, and a mixed load sent through all of them,
for the replica test (tests/gateway/test_replicas.py) and benchmark (benchmarks/replicas_bench.py).

The replicas share one DEER_FLOW_HOME (so one token file) and one memory (`backend_config`: one
`storage_path` on this host, or one PostgreSQL schema), authenticate by token, and chat with
`MarkerModel`, whose extraction turns `remember marker <id>` into the fact `Marker <id>`. Each
user's facts and markers carry the user's name, so a read can tell whose memory it came from.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final

import httpx

from deerflow.gateway.tokens import TokenStore, tokens_path
from tests.gateway.serve_process import ServeProcess, write_config
from tests.harness.scripted_model import MARKER_USE
from tests.postgres_server import postgres_backend_config

USERS: Final = ("alice", "bob", "carol")
TOPICS: Final = ("tea", "chess", "sailing", "jazz", "pottery", "kotlin", "hiking", "rust")
# A transport error (connection refused or reset) is recorded with this status.
NO_ANSWER: Final = 0


def shared_memory(engine: str, store: Path, database_url: str | None) -> dict[str, Any]:
    """`backend_config` of one fresh memory of `engine`: a new storage_path on this host, or a
    new schema of the PostgreSQL at `database_url`."""
    if engine == "files":
        return {"storage_path": str(store)}
    if database_url is None:
        raise ValueError(f"engine {engine!r} needs a database_url")
    # A replica killed while extracting leaves its conversation to the others after this.
    return postgres_backend_config(database_url, store, queue_lease_seconds=5)


def replica_config(workdir: Path, backend_config: dict[str, Any], debounce_seconds: float) -> Path:
    """config.yaml of the replicas: token auth, `MarkerModel`, memory in `backend_config`."""
    return write_config(
        workdir / "config.yaml",
        {
            "models": [{"name": "default", "use": MARKER_USE, "replies": ["Noted."]}],
            "auth": {"mode": "token"},
            "memory": {
                "shutdown_flush_timeout_seconds": 5,
                "backend_config": {
                    **backend_config,
                    "max_facts": 1000,  # nothing is evicted: every acknowledged write must stay
                    "debounce_seconds": debounce_seconds,
                    "debounce_max_wait_seconds": debounce_seconds,
                },
            },
        },
    )


def issue_tokens(home: Path, users: tuple[str, ...] = USERS) -> dict[str, str]:
    """A bearer token for each user, in the token file every replica reads."""
    store = TokenStore(tokens_path(home))
    return {user: store.add(user, "replicas")[1] for user in users}


@contextmanager
def running_replicas(count: int, config: Path, home: Path) -> Iterator[list[ServeProcess]]:
    """`count` `deerflow serve` processes over `config`, started side by side, killed after."""
    with ExitStack() as stack:
        with ThreadPoolExecutor(count) as pool:
            starting = [
                pool.submit(ServeProcess, "--config", str(config), home=home) for _ in range(count)
            ]
        for future in starting:
            if future.exception() is None:
                stack.callback(future.result().stop)
        yield [future.result() for future in starting]


@dataclass(frozen=True)
class Call:
    user: str
    replica: int
    route: str  # method and path template, e.g. "PATCH /api/memory/facts/{id}"
    status: int
    ms: float


@dataclass
class Fleet:
    """HTTP clients for every (user, replica); every request is recorded in `calls`."""

    urls: list[str]
    tokens: dict[str, str]
    calls: list[Call] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _clients: dict[tuple[str, int], httpx.Client] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for user, token in self.tokens.items():
            for replica, url in enumerate(self.urls):
                self._clients[user, replica] = httpx.Client(
                    base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120
                )

    def request(
        self, user: str, replica: int, method: str, path: str, route: str = "", **kwargs: Any
    ) -> httpx.Response | None:
        """The answer of replica `replica % len(urls)` to `user`, or None when none came."""
        replica %= len(self.urls)
        started = time.perf_counter()
        try:
            response = self._clients[user, replica].request(method, path, **kwargs)
            response.read()
        except httpx.TransportError:
            response = None
        elapsed = (time.perf_counter() - started) * 1000
        status = NO_ANSWER if response is None else response.status_code
        with self._lock:
            self.calls.append(Call(user, replica, f"{method} {route or path}", status, elapsed))
        return response

    def close(self) -> None:
        for client in self._clients.values():
            client.close()


# -- the mixed load ----------------------------------------------------------------------------


@dataclass
class Written:
    """A fact this load created, with what the gateway acknowledged about it."""

    user: str
    id: str
    content: str
    deleted: bool = False


@dataclass
class Outcome:
    """What a load's writes were acknowledged as: the facts, and the chats that completed."""

    facts: list[Written] = field(default_factory=list)
    markers: dict[str, list[str]] = field(default_factory=dict)  # user -> markers of done chats
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add_fact(self, fact: Written) -> None:
        with self._lock:
            self.facts.append(fact)

    def add_marker(self, user: str, marker: str) -> None:
        with self._lock:
            self.markers.setdefault(user, []).append(marker)


def fact_lifecycle(fleet: Fleet, outcome: Outcome, user: str, n: int) -> None:
    """Create a fact through one replica, read it through the next; every third is then edited
    through the third replica, every fifth deleted."""
    content = f"{user} keeps notebook {n} about {TOPICS[n % len(TOPICS)]}"
    body = {"content": content, "category": "knowledge"}
    created = fleet.request(user, n, "POST", "/api/memory/facts", json=body)
    if created is None or created.status_code != 201:
        return
    fact = Written(user, created.json()["id"], content)
    outcome.add_fact(fact)
    path, route = f"/api/memory/facts/{fact.id}", "/api/memory/facts/{id}"
    fleet.request(user, n + 1, "GET", path, route)
    if n % 3 == 0:
        edited = f"{content}, revised"
        answer = fleet.request(user, n + 2, "PATCH", path, route, json={"content": edited})
        if answer is not None and answer.status_code == 200:
            fact.content = edited
    if n % 5 == 0:
        answer = fleet.request(user, n + 1, "DELETE", path, route)
        if answer is not None and answer.status_code == 200:
            fact.deleted = True


def chat_events(response: httpx.Response) -> list[str]:
    """The event names of a chat turn's server-sent events."""
    return [
        line.removeprefix("event: ") for line in response.text.splitlines() if line[:7] == "event: "
    ]


def chat(fleet: Fleet, outcome: Outcome, user: str, n: int, replica: int | None = None) -> None:
    """One chat turn, on a thread of its own, that asks to remember marker `<user>-<n>`."""
    marker = f"{user}-{n}"
    answer = fleet.request(
        user,
        n if replica is None else replica,
        "POST",
        f"/api/chat/conv-{marker}",
        "/api/chat/{thread}",
        json={"message": f"Please remember marker {marker} for me."},
    )
    if answer is not None and answer.status_code == 200 and chat_events(answer)[-1:] == ["done"]:
        outcome.add_marker(user, marker)


def read(fleet: Fleet, user: str, n: int) -> None:
    if n % 2:
        fleet.request(user, n, "GET", "/api/memory")
    else:
        params = {"q": TOPICS[n % len(TOPICS)]}
        fleet.request(user, n, "GET", "/api/memory/search", params=params)


def mixed_load(
    fleet: Fleet, outcome: Outcome, *, facts: int, chats: int, reads: int, seed: int = 7
) -> list[Callable[[], None]]:
    """Per user: `facts` fact lifecycles, `chats` chat turns and `reads` reads, interleaved in
    a fixed pseudo-random order; replicas are taken in turn."""
    work: list[Callable[[], None]] = []
    for user in USERS:
        work += [partial(fact_lifecycle, fleet, outcome, user, n) for n in range(facts)]
        work += [partial(chat, fleet, outcome, user, n) for n in range(chats)]
        work += [partial(read, fleet, user, n) for n in range(reads)]
    random.Random(seed).shuffle(work)
    return work


def run(work: Sequence[Callable[[], None]], workers: int) -> None:
    with ThreadPoolExecutor(workers) as pool:
        for done in [pool.submit(step) for step in work]:
            done.result()


def failures(calls: list[Call]) -> dict[str, int]:
    """`route status` → count of the calls that did not succeed."""
    found: dict[str, int] = {}
    for call in calls:
        if not 200 <= call.status < 300:
            key = f"{call.route} {call.status}"
            found[key] = found.get(key, 0) + 1
    return found

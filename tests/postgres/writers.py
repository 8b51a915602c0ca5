"""Writer processes of one user's memory through `PostgresMemoryStorage`, forked from the
test (a fork starts in milliseconds; a new interpreter needs a second to import DeerMem).

Each writer reports lines through a pipe: `ready` once its storage is open, then what it
acknowledged. The test must hold no open pool while it forks.
"""

from __future__ import annotations

import json
import os
import traceback
from collections.abc import Callable
from typing import IO

from deerflow.agents.memory.backends.deermem.deermem.config import DeerMemConfig
from deerflow.agents.memory.backends.deermem.deermem.core.storage import MemoryStorage
from deerflow.agents.memory.manager import MemoryConflictError
from tests.deermem.crash_writer import numbered_writes
from tests.deermem.storage_helpers import create, fact
from tests.postgres.engines import postgres_storage

Report = Callable[[str], None]


def creates(storage: MemoryStorage, user: str, report: Report, name: str, count: int) -> None:
    """Commit `count` distinct facts as point operations, as concurrent creates do; report
    what was committed and what was refused, as JSON."""
    outcome: dict[str, list[str]] = {"committed": [], "conflicts": []}
    for i in range(count):
        record = fact(f"{name} fact {i}")
        try:
            create(storage, user, record)  # type: ignore[arg-type]
        except MemoryConflictError:
            outcome["conflicts"].append(record["content"])
        else:
            outcome["committed"].append(record["content"])
    report(json.dumps(outcome))


def commits(storage: MemoryStorage, user: str, report: Report, count: int) -> None:
    """The crash test's numbered writes (`tests/deermem/crash_writer.py`): write n adds three
    facts tagged `w{n}-a/b/c`, deletes those of write n-1 and sets the work summary to
    `write n`, so each write is either wholly there or wholly absent."""
    numbered_writes(storage, user, count, report)


def fork_writer(
    config: DeerMemConfig,
    user: str,
    work: Callable[..., None],
    *args: object,
    gate: tuple[int, int] | None = None,
) -> tuple[int, IO[str]]:
    """Fork a process running `work(storage, user, report, *args)` on a storage of its own;
    its pid and the pipe it reports on, `ready` read from it already. With `gate`, a pipe
    (read end, write end), it starts working once the test closes the write end."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the test
        code = 0
        try:
            os.close(read_end)
            out = os.fdopen(write_end, "w", buffering=1)
            with postgres_storage(config) as storage:
                out.write("ready\n")
                if gate is not None:
                    os.close(gate[1])
                    os.read(gate[0], 1)  # returns once every write end is closed
                work(storage, user, lambda line: out.write(line + "\n"), *args)
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    reports = os.fdopen(read_end)
    assert reports.readline() == "ready\n"
    return pid, reports

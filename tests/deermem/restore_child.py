"""A child process that restores a user dumped from one store into another, killing itself
with SIGKILL just before its N-th file open or rename (0: never; it then prints how many it
made), so that a test can cut a restore short at every step."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from deerflow.agents.memory.backends.deermem.deermem.core.dump import (
    dump_file_user,
    restore_file_user,
)
from tests.deermem.storage_helpers import storage_at


def main(source: str, destination: str, user: str, kill_at: int) -> None:
    dump = dump_file_user(storage_at(Path(source)), user)
    target = storage_at(Path(destination))
    steps = 0

    def counted(call: Any) -> Any:
        def step(*args: Any, **kwargs: Any) -> Any:
            nonlocal steps
            steps += 1
            if steps == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return call(*args, **kwargs)

        return step

    os.open, os.rename = counted(os.open), counted(os.rename)  # type: ignore[assignment]
    restore_file_user(target, dump)
    print(steps, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))

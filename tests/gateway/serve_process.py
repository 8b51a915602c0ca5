"""A real `deerflow serve` in a child process, for the tests and benchmarks that need one (or
several sharing one memory): started on a free loopback port, its output collected."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import httpx
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]


class ServeProcess:
    """`deerflow serve --port 0` as a child process, its output collected."""

    _RUNNING: ClassVar = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")

    def __init__(self, *args: str, home: Path, verbose: bool = False) -> None:
        env = {
            **os.environ,
            "DEER_FLOW_HOME": str(home),
            "COLUMNS": "500",
            "PYTHONPATH": str(REPO_ROOT),
        }
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "deerflow",
                *(["-v"] if verbose else []),
                "serve",
                "--port",
                "0",
                *args,
            ],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._port = threading.Event()
        self.port = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + 60
        while not self._port.wait(0.1):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                self._reader.join(10)
                raise RuntimeError("serve did not start:\n" + self.output)
        self.base_url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while httpx.get(self.base_url + "/readyz").status_code != 200:
            assert time.monotonic() < deadline, self.output
            time.sleep(0.05)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)
            found = self._RUNNING.search(line)
            if found:
                self.port = int(found.group(1))
                self._port.set()

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def terminate(self) -> None:
        """SIGTERM; uvicorn shuts down gracefully, then dies of the signal it re-raises."""
        self.process.send_signal(signal.SIGTERM)
        assert self.process.wait(60) == -signal.SIGTERM
        self._reader.join(10)
        assert "Application shutdown complete" in self.output

    def kill(self) -> None:
        """SIGKILL: no shutdown, no flush, as when a machine or container dies."""
        self.process.kill()
        assert self.process.wait(60) == -signal.SIGKILL
        self._reader.join(10)

    def stop(self) -> None:
        """Kill it if it still runs (the end of a test, whatever happened)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@contextmanager
def serve_process(*args: str, home: Path, verbose: bool = False) -> Iterator[ServeProcess]:
    server = ServeProcess(*args, home=home, verbose=verbose)
    try:
        yield server
    finally:
        server.stop()


def write_config(path: Path, raw: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(raw))
    return path

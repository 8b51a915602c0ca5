"""A real uvicorn on a free loopback port, in a thread of the test process.

    with LiveServer(create_app(config)) as server:
        httpx.get(server.url("/api/memory"))

Entering starts the server and waits until it is ready (`/readyz` 200, unless `wait_ready=False`);
leaving stops it the way SIGTERM would (the lifespan's shutdown flush included).
"""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType
from typing import Final

import httpx
import uvicorn
from fastapi import FastAPI

STARTUP_TIMEOUT_S: Final = 30.0


class LiveServer:
    def __init__(self, app: FastAPI, *, wait_ready: bool = True) -> None:
        self.app = app
        self.wait_ready = wait_ready
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._server = uvicorn.Server(uvicorn.Config(app, log_config=None, lifespan="on"))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    def url(self, path: str) -> str:
        return self.base_url + path

    def start(self) -> LiveServer:
        self._thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the server stopped during startup (see the log)")
            if time.monotonic() > deadline:
                raise TimeoutError("the server did not start")
            time.sleep(0.01)
        if self.wait_ready:
            self.until_ready()
        return self

    def until_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while httpx.get(self.url("/readyz")).status_code != 200:
            if time.monotonic() > deadline:
                raise TimeoutError("the server did not become ready")
            time.sleep(0.02)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(STARTUP_TIMEOUT_S + 60)
        self._socket.close()

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

"""Startup, readiness and shutdown of the gateway.

Startup builds the manager (a bad backend stops the server before it listens), then warms it in
the background: `/healthz` answers at once, `/readyz` and the memory routes answer 503 until the
backend is warm. Shutdown waits for warming to end, gives the backend
`memory.shutdown_flush_timeout_seconds` to write what is queued, then closes it (also a
manager handed to `create_app`: the gateway owns the backend it serves).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse

from deerflow.agents.memory.manager import (
    MemoryManager,
    build_memory_manager,
    default_host_hooks,
)
from deerflow.config import AppConfig
from deerflow.gateway.errors import GatewayError
from deerflow.gateway.schemas import ErrorBody
from deerflow.gateway.tokens import TokenStore
from deerflow.redaction import redact_text

__all__ = ["GatewayState", "gateway_state", "health_router", "lifespan", "ready_manager"]

logger = logging.getLogger(__name__)

WARM_FAILED: Final = "warming the memory backend failed; the server log says why"


@dataclass
class GatewayState:
    """What every request may need: configuration, the manager, readiness, the token store."""

    config: AppConfig
    home: Path
    tokens: TokenStore | None
    manager: MemoryManager | None = None
    ready: bool = False
    warm_error: str | None = None
    warm_task: asyncio.Task[None] | None = field(default=None, repr=False)


def gateway_state(request: Request) -> GatewayState:
    state: GatewayState = request.app.state.gateway
    return state


async def ready_manager(request: Request) -> MemoryManager:
    """The manager, once it is warm.

    Raises:
        GatewayError: 503 while memory is off, still warming, or failed to warm.
    """
    state = gateway_state(request)
    if not state.config.memory.enabled:
        raise GatewayError(
            503, "memory_disabled", "memory is turned off on this server (memory.enabled: false)"
        )
    if state.warm_error is not None:
        raise GatewayError(503, "not_ready", WARM_FAILED)
    if not state.ready or state.manager is None:
        raise GatewayError(
            503,
            "not_ready",
            "the memory backend is still warming up; retry shortly",
            headers={"Retry-After": "1"},
        )
    return state.manager


async def _warm(state: GatewayState, manager: MemoryManager) -> None:
    started = time.perf_counter()
    try:
        await manager.awarm()
    except Exception as exc:
        state.warm_error = redact_text(f"{type(exc).__name__}: {exc}")
        logger.error("memory backend failed to warm: %s", state.warm_error)
        return
    state.ready = True
    logger.info(
        "memory backend %s ready (warmed in %.2fs)",
        type(manager).__name__,
        time.perf_counter() - started,
    )


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    state: GatewayState = app.state.gateway
    memory = state.config.memory
    if memory.enabled and state.manager is None:
        state.manager = await asyncio.to_thread(
            build_memory_manager,
            memory,
            home=state.home,
            host_hooks=default_host_hooks(state.config),
        )
    if state.manager is None:
        state.ready = True  # nothing to warm: memory is off
    else:
        state.warm_task = asyncio.create_task(_warm(state, state.manager))
    try:
        yield
    finally:
        await _shut_down(state)


async def _shut_down(state: GatewayState) -> None:
    manager = state.manager
    state.ready = False
    if state.warm_task is not None:
        await state.warm_task  # a thread cannot be cancelled; warming ends on its own
    if manager is None:
        return
    timeout = state.config.memory.shutdown_flush_timeout_seconds
    logger.info("writing queued memory (up to %gs)", timeout)
    try:
        drained = await manager.ashutdown_flush(timeout)
    except Exception as exc:
        logger.error("memory flush at shutdown failed: %s", redact_text(f"{exc}"))
        drained = False
    if not drained:
        logger.warning(
            "memory writes still queued after %gs; a durable backend runs them at the next start",
            timeout,
        )
    await manager.aclose()


health_router = APIRouter(tags=["health"])


@health_router.get("/healthz", summary="Liveness: the process answers")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@health_router.get(
    "/readyz",
    summary="Readiness: the memory backend is built and warmed",
    responses={503: {"model": ErrorBody}},
)
async def readyz(request: Request) -> JSONResponse:
    state = gateway_state(request)
    if state.warm_error is not None:
        return JSONResponse({"error": "not_ready", "detail": WARM_FAILED}, status_code=503)
    if not state.ready:
        return JSONResponse(
            {"error": "not_ready", "detail": "warming the memory backend"},
            status_code=503,
            headers={"Retry-After": "1"},
        )
    return JSONResponse({"status": "ready"})

"""Every failure becomes a precise HTTP answer `{"error": code, "detail": text}`, decided by type.

`ERROR_STATUSES` is the table of docs/gateway.md, "Errors". Errors whose message could carry
internals (paths, remote answers) get a fixed text; the full error goes to the log, redacted.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Mapping
from typing import Any, Final, NamedTuple

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from deerflow.agents.memory.manager import (
    DuplicateFactError,
    FactEvictedError,
    FactNotFoundError,
    MemoryAccessError,
    MemoryConflictError,
    MemoryCorruptionError,
    MemoryManagerError,
    MemoryReadError,
    MemoryUnsupportedError,
)
from deerflow.redaction import redact_text
from deerflow.validation import dotted_path

__all__ = [
    "CORRUPTION_TEXT",
    "ERROR_STATUSES",
    "INTERNAL_TEXT",
    "ErrorStatus",
    "GatewayError",
    "error_status",
    "install_error_handlers",
]

logger = logging.getLogger(__name__)

CORRUPTION_TEXT: Final = (
    "stored memory cannot be read; it has not been changed or reset, and the server log names "
    "what is damaged"
)
INTERNAL_TEXT: Final = "internal server error; the server log has the details"


class ErrorStatus(NamedTuple):
    status: int
    code: str
    fixed_detail: str | None  # None: the error's own message is the detail


# First match wins, so subclasses come before their bases.
ERROR_STATUSES: Final[tuple[tuple[type[Exception], ErrorStatus], ...]] = (
    (FactNotFoundError, ErrorStatus(404, "fact_not_found", None)),
    (DuplicateFactError, ErrorStatus(409, "duplicate_fact", None)),
    (FactEvictedError, ErrorStatus(409, "fact_evicted", None)),
    # A lost race or a lock held too long; the message may name files on the server.
    (
        MemoryConflictError,
        ErrorStatus(409, "conflict", "the memory changed while writing; reload and retry"),
    ),
    (MemoryCorruptionError, ErrorStatus(500, "corruption", CORRUPTION_TEXT)),
    (
        MemoryReadError,
        ErrorStatus(503, "read_failed", "a required memory read failed; retry later"),
    ),
    (MemoryAccessError, ErrorStatus(403, "forbidden", None)),
    (MemoryUnsupportedError, ErrorStatus(501, "unsupported", None)),
    (MemoryManagerError, ErrorStatus(500, "memory_error", INTERNAL_TEXT)),
    (ValueError, ErrorStatus(400, "invalid_input", None)),
)


class GatewayError(Exception):
    """A refusal by the gateway itself (auth, readiness, request shape), with its status."""

    def __init__(
        self, status: int, code: str, detail: str, *, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.headers = headers


def error_status(exc: Exception) -> ErrorStatus | None:
    """How the gateway answers `exc`, decided by its type; None for unexpected errors (500)."""
    return next((status for kind, status in ERROR_STATUSES if isinstance(exc, kind)), None)


def error_response(
    status: int, code: str, detail: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse({"error": code, "detail": detail}, status_code=status, headers=headers)


async def _gateway_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, GatewayError)
    return error_response(exc.status, exc.code, exc.detail, exc.headers)


async def _typed_error(request: Request, exc: Exception) -> JSONResponse:
    known = error_status(exc)
    assert known is not None  # registered only for the kinds of ERROR_STATUSES
    if known.status >= 500:
        logger.error(
            "%s %s failed: %s",
            request.method,
            request.url.path,
            redact_text(f"{type(exc).__name__}: {exc}"),
        )
    detail = known.fixed_detail or redact_text(" ".join(str(exc).split()))
    return error_response(known.status, known.code, detail)


async def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    # Starlette re-raises after this response, and uvicorn logs the traceback.
    return error_response(500, "internal_error", INTERNAL_TEXT)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = [f"{dotted_path('', tuple(error['loc']))}: {error['msg']}" for error in exc.errors()]
    return error_response(422, "validation_error", redact_text("; ".join(problems)))


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(sorted(_allowed_methods(request)))
    return error_response(exc.status_code, code, str(exc.detail), headers)


def _allowed_methods(request: Request) -> set[str]:
    """Every method the OpenAPI document lists for this path (Starlette's `Allow` names one
    route's methods only)."""
    paths: dict[str, dict[str, Any]] = request.app.openapi()["paths"]
    return {
        method.upper()
        for template, operations in paths.items()
        if _path_pattern(template).fullmatch(request.url.path)
        for method in operations
    }


@functools.cache
def _path_pattern(template: str) -> re.Pattern[str]:
    """`/api/memory/facts/{fact_id}` → a pattern matching one path segment per parameter."""
    return re.compile(re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)))


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error with the JSON body; unexpected ones as a fixed-text 500, logged."""
    app.add_exception_handler(GatewayError, _gateway_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    for kind in {kind for kind, _ in ERROR_STATUSES}:
        app.add_exception_handler(kind, _typed_error)
    app.add_exception_handler(Exception, _unexpected_error)

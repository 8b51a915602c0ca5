"""Export and import: a JSON document for every backend, a zip of Markdown where the backend has it.

`POST /api/memory/import` takes the document as a JSON body, or an uploaded file (multipart
field `file`): a zip made by `GET /api/memory/export?format=markdown`, or a JSON export.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import anyio.to_thread
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import UploadFile
from starlette.types import Message

from deerflow.agents.memory.extensions import MarkdownPortable
from deerflow.agents.memory.manager import MemoryManager, MemoryUnsupportedError, condition
from deerflow.gateway.archive import MAX_UPLOAD_BYTES, is_zip, pack_folder, unpack_export
from deerflow.gateway.auth import CurrentUser
from deerflow.gateway.errors import GatewayError
from deerflow.gateway.lifecycle import ready_manager
from deerflow.gateway.memory_routes import AgentName, ExpectedRevision
from deerflow.gateway.schemas import MemoryDocument, error_responses

__all__ = ["router"]

router = APIRouter(prefix="/api/memory", tags=["export and import"])

Manager = Annotated[MemoryManager, Depends(ready_manager)]

_IMPORT_BODY: Final[dict[str, Any]] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/MemoryDocument"}},
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "file": {
                            "type": "string",
                            "format": "binary",
                            "description": "A Markdown-export zip or a JSON export.",
                        }
                    },
                    "required": ["file"],
                }
            },
        },
    }
}


@router.get(
    "/export",
    summary="Export the summaries and the bucket's facts",
    response_model=MemoryDocument,
    responses={
        200: {
            "content": {"application/zip": {}},
            "description": "The document (json), or a zip of Markdown files (markdown).",
        },
        **error_responses(400, 501),
    },
)
async def export(
    manager: Manager,
    user: CurrentUser,
    format: Annotated[Literal["json", "markdown"], Query()] = "json",
    agent_name: AgentName = None,
) -> Any:
    if format == "json":
        document = await manager.aexport_memory(user_id=user, agent_name=agent_name)
        return JSONResponse(document, headers=_attachment("memory-export.json"))
    if not isinstance(manager, MarkdownPortable):
        raise MemoryUnsupportedError(type(manager).__name__, "export_markdown")
    portable = manager

    def markdown_zip() -> bytes:
        with tempfile.TemporaryDirectory(prefix="deerflow-export-") as folder:
            portable.export_markdown(Path(folder), user_id=user, agent_name=agent_name)
            return pack_folder(Path(folder))

    data = await anyio.to_thread.run_sync(markdown_zip)
    return Response(data, media_type="application/zip", headers=_attachment("memory-export.zip"))


@router.post(
    "/import",
    summary="Replace the summaries and the bucket's facts with an export (revertible)",
    response_model=MemoryDocument,
    openapi_extra=_IMPORT_BODY,
    responses=error_responses(400, 409, 413, 415, 501),
)
async def import_memory(
    request: Request,
    manager: Manager,
    user: CurrentUser,
    agent_name: AgentName = None,
    expected_revision: ExpectedRevision = None,
) -> Any:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_UPLOAD_BYTES:
        raise _too_large()
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type == "application/json":
        payload = await _read_limited(request)
    elif media_type == "multipart/form-data":
        payload = await _uploaded_file(request)
        if is_zip(payload):
            document = await _import_markdown(manager, payload, user, agent_name, expected_revision)
            return JSONResponse(document)
    else:
        raise GatewayError(
            415,
            "unsupported_media_type",
            "send the document as application/json, or a file as multipart/form-data",
        )
    data = _json_object(payload)
    document = await manager.aimport_memory(
        data, user_id=user, agent_name=agent_name, expected_revision=expected_revision
    )
    return JSONResponse(document)


async def _import_markdown(
    manager: MemoryManager,
    payload: bytes,
    user: str,
    agent_name: str | None,
    expected_revision: int | None,
) -> dict[str, Any]:
    if not isinstance(manager, MarkdownPortable):
        raise MemoryUnsupportedError(type(manager).__name__, "import_markdown")
    portable = manager

    def run() -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="deerflow-import-") as folder:
            unpack_export(payload, Path(folder))
            return portable.import_markdown(
                Path(folder),
                user_id=user,
                agent_name=agent_name,
                **condition(expected_revision),
            )

    return await anyio.to_thread.run_sync(run)


def _json_object(payload: bytes) -> dict[str, Any]:
    try:
        data = json.loads(payload)
    except RecursionError:
        raise ValueError("import: the JSON is nested too deeply") from None
    except ValueError as exc:  # also UnicodeDecodeError
        raise ValueError(f"import: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"import: expected a JSON object, got {type(data).__name__}")
    return data


async def _read_limited(request: Request) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_UPLOAD_BYTES:
            raise _too_large()
        chunks.append(chunk)
    return b"".join(chunks)


async def _uploaded_file(request: Request) -> bytes:
    # Read under the limit first: a chunked body has no Content-Length, and parsing the form
    # straight from the socket would spool all of it to disk before any size could be checked.
    body = await _read_limited(request)

    async def replay() -> Message:
        return {"type": "http.request", "body": body, "more_body": False}

    async with Request(request.scope, replay).form(max_files=1, max_fields=10) as form:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise ValueError("import: the multipart body needs a file in the field 'file'")
        payload = await upload.read(MAX_UPLOAD_BYTES + 1)
    if len(payload) > MAX_UPLOAD_BYTES:
        raise _too_large()
    return payload


def _too_large() -> GatewayError:
    return GatewayError(413, "too_large", f"the upload is larger than {MAX_UPLOAD_BYTES} bytes")


def _attachment(filename: str) -> dict[str, str]:
    return {"Content-Disposition": f'attachment; filename="{filename}"'}

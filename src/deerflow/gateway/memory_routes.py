"""The memory routes: each calls one manager method, off the event loop.

The user always comes from `require_user`; `agent_name` selects the agent bucket and is checked
by the backend (a bad name is a 400). Answers are the manager's return values as JSON.
"""

from __future__ import annotations

from typing import Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, Depends, Query, Request
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse

from deerflow.agents.custom_agents import list_agents
from deerflow.agents.memory.extensions import AgentListing, MarkdownPortable
from deerflow.agents.memory.manager import (
    OPTIONAL_OPERATIONS,
    FactNotFoundError,
    MemoryManager,
    MemoryUnsupportedError,
    provided_operations,
)
from deerflow.gateway.auth import CurrentUser
from deerflow.gateway.lifecycle import gateway_state, ready_manager
from deerflow.gateway.schemas import (
    Category,
    Change,
    DeletedFact,
    FactCreate,
    FactPatch,
    History,
    MemoryDocument,
    MergedFact,
    SearchResults,
    Status,
    SummaryPart,
    SummarySection,
    SummaryUpdate,
    WrittenFact,
    error_responses,
)
from deerflow.redaction import redact

__all__ = ["router", "supported_operations"]

router = APIRouter(prefix="/api/memory", tags=["memory"])

Manager = Annotated[MemoryManager, Depends(ready_manager)]
AgentName = Annotated[
    str | None,
    Query(
        description="Agent bucket; omitted: the default bucket. Summaries are per user.",
        examples=["researcher"],
    ),
]
FactId = Annotated[str, PathParam(description="A fact id.", examples=["fact_7a07c35f1e9d"])]
ExpectedRevision = Annotated[
    int | None,
    Query(
        ge=0,
        description=(
            "The memory `revision` the caller read. If the memory has changed since, nothing is "
            "written and the answer is 409 `conflict` (reload and retry). Checked in the same "
            "commit as the write. A backend without revisions answers 501."
        ),
        examples=[3],
    ),
]


def supported_operations(manager: MemoryManager | None) -> dict[str, bool]:
    """Optional operation → whether `manager` provides it (overrides the contract's default),
    plus `expected_revision`: whether its writes take one."""
    provided = provided_operations(type(manager)) if manager is not None else frozenset()
    found = {name: name in provided for name in OPTIONAL_OPERATIONS}
    portable = isinstance(manager, MarkdownPortable)
    conditional = manager is not None and type(manager).supports_expected_revision
    return found | {
        "export_markdown": portable,
        "import_markdown": portable,
        "expected_revision": conditional,
    }


def _written(answer: dict[str, Any], document: dict[str, Any]) -> dict[str, Any]:
    """A write's answer with the memory's `revision` after it (as of the document returned)."""
    return answer | {"revision": document.get("revision")}


def _fact(document: dict[str, Any], fact_id: str | None) -> dict[str, Any] | None:
    return next((f for f in document.get("facts", []) if f.get("id") == fact_id), None)


# -- reading -------------------------------------------------------------------------------------


@router.get(
    "",
    summary="The memory document: summaries and the bucket's facts",
    response_model=MemoryDocument,
    responses=error_responses(400, 501),
)
async def get_memory(manager: Manager, user: CurrentUser, agent_name: AgentName = None) -> Any:
    return JSONResponse(await manager.aget_memory(user_id=user, agent_name=agent_name))


@router.post(
    "/reload",
    summary="Read the stored memory again, dropping caches",
    response_model=MemoryDocument,
    responses=error_responses(400, 501),
)
async def reload_memory(manager: Manager, user: CurrentUser, agent_name: AgentName = None) -> Any:
    try:
        document = await manager.areload_memory(user_id=user, agent_name=agent_name)
    except MemoryUnsupportedError:  # a backend without caches is simply read again
        document = await manager.aget_memory(user_id=user, agent_name=agent_name)
    return JSONResponse(document)


@router.get(
    "/facts/{fact_id}",
    summary="One fact of the bucket, with every field the backend returns for it, and the "
    "memory's revision (for a conditional write after it)",
    response_model=WrittenFact,
    responses=error_responses(400, 404, 501),
)
async def get_fact(
    fact_id: FactId, manager: Manager, user: CurrentUser, agent_name: AgentName = None
) -> Any:
    document = await manager.aget_memory(user_id=user, agent_name=agent_name)
    fact = _fact(document, fact_id)
    if fact is None:
        raise FactNotFoundError(fact_id)
    return JSONResponse(_written(fact, document))


@router.get(
    "/search",
    summary="Facts of the bucket matching a query, best first",
    response_model=SearchResults,
    responses=error_responses(400, 501),
)
async def search(
    manager: Manager,
    user: CurrentUser,
    q: Annotated[str, Query(min_length=1, max_length=1000, examples=["tea"])],
    category: Annotated[Category | None, Query(examples=["preference"])] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 10,
    agent_name: AgentName = None,
) -> Any:
    results = await manager.asearch(
        q, limit, user_id=user, agent_name=agent_name, category=category
    )
    return JSONResponse({"query": q, "results": results})


@router.get(
    "/history",
    summary="The audit log of the bucket and the user's summaries, newest first",
    response_model=History,
    responses=error_responses(400, 501),
)
async def history(
    manager: Manager,
    user: CurrentUser,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    agent_name: AgentName = None,
) -> Any:
    changes = await manager.aget_history(user_id=user, agent_name=agent_name, limit=limit)
    return JSONResponse({"changes": changes})


# -- changing --------------------------------------------------------------------------------------


@router.post(
    "/facts",
    status_code=201,
    summary="Store one fact",
    response_model=WrittenFact,
    responses={
        200: {"model": MergedFact, "description": "Merged into an existing fact."},
        **error_responses(400, 409, 501),
    },
)
async def create_fact(
    body: FactCreate,
    manager: Manager,
    user: CurrentUser,
    agent_name: AgentName = None,
    expected_revision: ExpectedRevision = None,
) -> Any:
    document, fact_id = await manager.acreate_fact(
        body.content,
        body.category,
        body.confidence,
        user_id=user,
        agent_name=agent_name,
        expected_revision=expected_revision,
    )
    created = _fact(document, fact_id)
    if fact_id is None or created is None:
        merged = {"merged": True, "detail": "the backend merged this into an existing fact"}
        return JSONResponse(_written(merged, document), status_code=200)
    return JSONResponse(_written(created, document), status_code=201)


@router.patch(
    "/facts/{fact_id}",
    summary="Change the text, category or confidence of a fact",
    response_model=WrittenFact,
    responses=error_responses(400, 404, 409, 501),
)
async def update_fact(
    fact_id: FactId,
    body: FactPatch,
    manager: Manager,
    user: CurrentUser,
    agent_name: AgentName = None,
    expected_revision: ExpectedRevision = None,
) -> Any:
    document = await manager.aupdate_fact(
        fact_id,
        body.content,
        body.category,
        body.confidence,
        user_id=user,
        agent_name=agent_name,
        expected_revision=expected_revision,
    )
    return JSONResponse(_written(_fact(document, fact_id) or {"id": fact_id}, document))


@router.delete(
    "/facts/{fact_id}",
    summary="Delete a fact (revertible through the history)",
    response_model=DeletedFact,
    responses=error_responses(400, 404, 409, 501),
)
async def delete_fact(
    fact_id: FactId,
    manager: Manager,
    user: CurrentUser,
    agent_name: AgentName = None,
    expected_revision: ExpectedRevision = None,
) -> Any:
    document = await manager.adelete_fact(
        fact_id, user_id=user, agent_name=agent_name, expected_revision=expected_revision
    )
    return JSONResponse(_written({"deleted": fact_id}, document))


@router.put(
    "/summaries/{part}/{section}",
    summary="Replace the text of one summary section of the user (revertible)",
    response_model=MemoryDocument,
    responses=error_responses(400, 409, 501),
)
async def update_summary(
    part: Annotated[SummaryPart, PathParam(examples=["user"])],
    section: Annotated[
        SummarySection,
        PathParam(description="A section of `part` (else 400).", examples=["workContext"]),
    ],
    body: SummaryUpdate,
    manager: Manager,
    user: CurrentUser,
    agent_name: AgentName = None,
    expected_revision: ExpectedRevision = None,
) -> Any:
    document = await manager.aupdate_summary(
        part,
        section,
        body.text,
        user_id=user,
        agent_name=agent_name,
        expected_revision=expected_revision,
    )
    return JSONResponse(document)


@router.delete(
    "",
    summary="Clear the bucket, or without agent_name all of the user's memory (revertible)",
    response_model=MemoryDocument,
    responses=error_responses(400, 409, 501),
)
async def clear_memory(
    manager: Manager,
    user: CurrentUser,
    agent_name: AgentName = None,
    expected_revision: ExpectedRevision = None,
) -> Any:
    document = await manager.aclear_memory(
        user_id=user, agent_name=agent_name, expected_revision=expected_revision
    )
    return JSONResponse(document)


@router.post(
    "/history/{change_id}/revert",
    summary="Undo one recorded change; the undo is recorded too",
    response_model=Change,
    responses=error_responses(400, 409, 501),
)
async def revert_change(
    change_id: Annotated[str, PathParam(examples=["chg_55f62d42ae1d484fb0530909f4078c5a"])],
    manager: Manager,
    user: CurrentUser,
    expected_revision: ExpectedRevision = None,
) -> Any:
    change = await manager.arevert_change(
        change_id, user_id=user, expected_revision=expected_revision
    )
    return JSONResponse(change)


# -- about the server ------------------------------------------------------------------------------


@router.get(
    "/config",
    summary="The server's configuration, secrets redacted",
    responses=error_responses(),
)
async def get_config(request: Request, user: CurrentUser) -> dict[str, Any]:
    config = gateway_state(request).config
    redacted: dict[str, Any] = redact(config.model_dump(mode="json"))
    return redacted


@router.get(
    "/status",
    summary="Backend, readiness, supported operations and known agent buckets",
    response_model=Status,
    responses=error_responses(),
)
async def status(request: Request, user: CurrentUser) -> Any:
    state = gateway_state(request)
    memory = state.config.memory
    agents = set(list_agents(state.home))
    if state.ready and isinstance(state.manager, AgentListing):
        agents.update(await _agent_names(state.manager, user))
    return JSONResponse(
        {
            "enabled": memory.enabled,
            "ready": state.ready and state.warm_error is None,
            "backend": type(state.manager).__name__ if state.manager is not None else None,
            "manager_class": memory.manager_class,
            "mode": memory.mode,
            "auth_mode": state.config.auth.mode,
            "user": user,
            "supports": supported_operations(state.manager),
            "agents": sorted(agents),
        }
    )


async def _agent_names(manager: AgentListing, user: str) -> list[str]:
    return await anyio.to_thread.run_sync(lambda: manager.agent_names(user_id=user))

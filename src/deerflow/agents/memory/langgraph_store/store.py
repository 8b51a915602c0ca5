"""`DeerFlowStore`: LangGraph's `BaseStore` over the `MemoryManager` contract.

Each operation is written once, as a generator that yields the backend calls it needs and gets
their answers (or their errors, thrown in) back; `batch` runs those calls directly and `abatch`
through the contract's async twins, so the two paths cannot drift apart.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    validate_op_namespace,
)

from deerflow.agents.memory.extensions import AgentListing, FactsWithChosenIds
from deerflow.agents.memory.langgraph_store.items import (
    category_filter,
    fact_id_of,
    matches,
    parse_value,
    refuse_changed,
    search_item,
    stored_item,
    value_of,
)
from deerflow.agents.memory.langgraph_store.namespaces import Bucket, NamespaceMap, matches_all
from deerflow.agents.memory.manager import (
    DuplicateFactError,
    FactNotFoundError,
    MemoryManager,
    MemoryUnsupportedError,
    provided_operations,
)

__all__ = ["DEFAULT_ROOT", "REQUIRED_OPERATIONS", "DeerFlowStore"]

DEFAULT_ROOT: Final = "memories"
REQUIRED_OPERATIONS: Final = ("get_memory", "search", "update_fact", "delete_fact")
"""The contract's optional operations the store calls; `create_fact_with_id` and `agent_names`
come from the `FactsWithChosenIds` and `AgentListing` extensions."""
_WITH_ASYNC_TWIN: Final = frozenset(REQUIRED_OPERATIONS)

R = TypeVar("R")


@dataclass(frozen=True)
class _Call:
    operation: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


Steps = Generator[_Call, Any, R]


def _call(operation: str, *args: Any, **kwargs: Any) -> _Call:
    return _Call(operation, args, kwargs)


class _Driving(Generic[R]):
    """One operation's steps being run: hands out the next backend call, takes its answer or
    its error (thrown into the steps, so they can catch it), and keeps the steps' result."""

    def __init__(self, steps: Steps[R]) -> None:
        self._steps = steps
        self._answer: Any = None
        self._error: Exception | None = None
        self.result: R

    def next_call(self) -> _Call | None:
        try:
            if self._error is None:
                return self._steps.send(self._answer)
            return self._steps.throw(self._error)
        except StopIteration as stop:
            self.result = stop.value
            return None

    def answered(self, answer: Any) -> None:
        self._answer, self._error = answer, None

    def failed(self, error: Exception) -> None:
        self._answer, self._error = None, error


def _scope(bucket: Bucket) -> dict[str, Any]:
    return {"user_id": bucket.user_id, "agent_name": bucket.agent_name}


class DeerFlowStore(BaseStore):
    """A LangGraph store whose items are the facts of DeerFlow Memory.

    Namespaces: `(root, user_id)` is the user's default bucket, `(root, user_id, agent_name)`
    an agent's bucket (`root` is "memories" by default). Keys: fact ids in UUID form (see
    `items`). Writes go through the contract, so they are validated, scrubbed of secrets,
    recorded in the history and undoable like any other.

    Raises:
        MemoryUnsupportedError: at construction, naming every operation the backend lacks.
    """

    supports_ttl = False

    def __init__(self, manager: MemoryManager, *, root: str = DEFAULT_ROOT) -> None:
        missing = [op for op in REQUIRED_OPERATIONS if op not in provided_operations(type(manager))]
        if not isinstance(manager, FactsWithChosenIds):
            missing.append("create_fact_with_id")
        if not isinstance(manager, AgentListing):
            missing.append("agent_names")
        if missing:
            raise MemoryUnsupportedError(type(manager).__name__, ", ".join(missing))
        self._manager = manager
        self._namespaces = NamespaceMap(root)

    # -- BaseStore -----------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run `ops` one after the other, in order; the first error stops the batch (the
        operations before it stay done)."""
        return [self._run(self._steps(op)) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """`batch` through the contract's async twins; the event loop is never blocked."""
        return [await self._arun(self._steps(op)) for op in ops]

    # -- the two drivers -----------------------------------------------------------------------

    def _run(self, steps: Steps[R]) -> R:
        driving = _Driving(steps)
        while (call := driving.next_call()) is not None:
            try:
                driving.answered(getattr(self._manager, call.operation)(*call.args, **call.kwargs))
            except Exception as exc:
                driving.failed(exc)
        return driving.result

    async def _arun(self, steps: Steps[R]) -> R:
        driving = _Driving(steps)
        while (call := driving.next_call()) is not None:
            try:
                driving.answered(await self._acall(call))
            except Exception as exc:
                driving.failed(exc)
        return driving.result

    async def _acall(self, call: _Call) -> Any:
        import asyncio

        if call.operation in _WITH_ASYNC_TWIN:
            twin = getattr(self._manager, "a" + call.operation)
            return await twin(*call.args, **call.kwargs)
        # An extension has no async twin: a worker thread, as the twins themselves use.
        method = getattr(self._manager, call.operation)
        return await asyncio.to_thread(method, *call.args, **call.kwargs)

    # -- the operations, written once --------------------------------------------------------

    def _steps(self, op: Op) -> Steps[Result]:
        validate_op_namespace(op)
        if isinstance(op, GetOp):
            return self._get(op)
        if isinstance(op, PutOp):
            return self._put(op) if op.value is not None else self._delete(op)
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, ListNamespacesOp):
            return self._list_namespaces(op)
        raise ValueError(f"unknown store operation: {type(op).__name__}")

    def _get(self, op: GetOp) -> Steps[Item | None]:
        bucket = self._namespaces.bucket(op.namespace)
        fact = yield from self._find(bucket, fact_id_of(op.key))
        return None if fact is None else stored_item(op.namespace, fact)

    def _find(self, bucket: Bucket, fact_id: str) -> Steps[dict[str, Any] | None]:
        document = yield _call("get_memory", **_scope(bucket))
        return next((fact for fact in document["facts"] if fact["id"] == fact_id), None)

    def _put(self, op: PutOp) -> Steps[None]:
        if op.ttl is not None:
            raise NotImplementedError(
                "DeerFlowStore keeps facts until they are deleted (staleness and capacity are "
                "DeerFlow Memory's governance), so it has no TTL: put with ttl=None"
            )
        if op.index not in (None, ["content"]):
            raise ValueError(
                f"index={op.index!r}: DeerFlow Memory indexes every fact's content for search "
                "by itself; pass index=None"
            )
        bucket = self._namespaces.bucket(op.namespace)
        fact_id = fact_id_of(op.key)
        write = parse_value(op.value or {})
        if write.unchanged:
            refuse_changed(write, (yield from self._find(bucket, fact_id)))
        update = _call(
            "update_fact",
            fact_id,
            write.content,
            write.optional.get("category"),
            write.optional.get("confidence"),
            **_scope(bucket),
        )
        try:
            yield update
            return
        except FactNotFoundError:
            refuse_changed(write, None)
        try:
            yield _call(
                "create_fact_with_id", fact_id, write.content, **write.optional, **_scope(bucket)
            )
        except DuplicateFactError as exc:
            if exc.existing_fact_id != fact_id:
                raise
            yield update  # another writer created this key between our two calls

    def _delete(self, op: PutOp) -> Steps[None]:
        bucket = self._namespaces.bucket(op.namespace)
        # Deleting what is not there leaves the store as asked, as BaseStore's delete does.
        with contextlib.suppress(FactNotFoundError):
            yield _call("delete_fact", fact_id_of(op.key), **_scope(bucket))

    def _buckets(self, prefix: tuple[str, ...]) -> Steps[list[Bucket]]:
        searched = self._namespaces.searched(prefix)
        if searched.agent_name is not None:
            return [searched]
        agents = yield _call("agent_names", user_id=searched.user_id)
        return [searched, *(Bucket(searched.user_id, agent) for agent in agents)]

    def _search(self, op: SearchOp) -> Steps[list[SearchItem]]:
        if op.limit < 0 or op.offset < 0:
            raise ValueError(f"limit and offset: must not be negative, got {op.limit}, {op.offset}")
        conditions = dict(op.filter or {})
        category = category_filter(conditions)
        buckets = yield from self._buckets(op.namespace_prefix)
        wanted = op.offset + op.limit
        found: list[tuple[Bucket, dict[str, Any]]] = []
        for bucket in buckets:
            if op.query and op.query.strip():
                facts = yield from self._ranked(bucket, op.query, category, conditions, wanted)
            else:
                document = yield _call("get_memory", **_scope(bucket))
                facts = [f for f in document["facts"] if matches(value_of(f), conditions)]
            found.extend((bucket, fact) for fact in facts)
        if op.query and op.query.strip():
            found.sort(key=lambda hit: -float(hit[1].get("score") or 0.0))
        else:  # newest first, as LangGraph's database stores list
            found.sort(key=lambda hit: (hit[1].get("updatedAt") or "", hit[1]["id"]), reverse=True)
        page = found[op.offset : wanted]
        return [search_item(self._namespaces.namespace(bucket), fact) for bucket, fact in page]

    def _ranked(
        self,
        bucket: Bucket,
        query: str,
        category: str | None,
        conditions: dict[str, Any],
        wanted: int,
    ) -> Steps[list[dict[str, Any]]]:
        """The bucket's best `wanted` hits that meet the filter; asks for more while the
        backend's own filter (category only) lets through hits the rest of it drops."""
        if wanted == 0:
            return []
        top_k = wanted
        while True:
            hits = yield _call("search", query, top_k, category=category, **_scope(bucket))
            kept = [hit for hit in hits if matches(value_of(hit), conditions)]
            if len(kept) >= wanted or len(hits) < top_k:
                return kept[:wanted]
            top_k *= 2

    def _list_namespaces(self, op: ListNamespacesOp) -> Steps[list[tuple[str, ...]]]:
        conditions = op.match_conditions or ()
        user_id = self._namespaces.listed_user(conditions)
        default = Bucket(user_id, None)
        document = yield _call("get_memory", **_scope(default))
        agents = yield _call("agent_names", user_id=user_id)
        buckets = [default] if document["facts"] else []
        buckets += [Bucket(user_id, agent) for agent in agents]
        namespaces = [self._namespaces.namespace(bucket) for bucket in buckets]
        kept = [ns for ns in namespaces if matches_all(ns, conditions)]
        if op.max_depth is not None:
            kept = list(dict.fromkeys(ns[: op.max_depth] for ns in kept))
        return sorted(kept)[op.offset : op.offset + op.limit]

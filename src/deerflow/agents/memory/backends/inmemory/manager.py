"""A thread-safe, in-process reference backend that implements every operation of the contract.

Nothing is persisted and nothing is extracted: `add()` accepts the conversation and stores
nothing, because turning messages into facts needs an LLM, which is out of scope for a reference.
Facts come in through `create_fact` and `import_memory`. Use it in your own tests, or read it to
see what each operation of the contract is expected to do.

Scope: summaries belong to a user (None means "default"); facts belong to a (user, agent) bucket
(agent None means the "__default__" bucket). Every committed change of a user increments that
user's `revision` by one, and every fact change is kept in an in-memory audit log.
"""

from __future__ import annotations

import copy
import html
import re
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from deerflow.agents.memory.base import MemoryManager, MemoryMode, parse_backend_config
from deerflow.agents.memory.document import (
    HISTORY_SECTIONS,
    USER_SECTIONS,
    check_revision,
    empty_document,
    utc_now,
    validate_category,
    validate_confidence,
    validate_content,
    validate_summary,
)
from deerflow.agents.memory.errors import (
    DuplicateFactError,
    FactNotFoundError,
    MemoryConflictError,
)
from deerflow.agents.memory.identity import checked_id
from deerflow.agents.memory.import_document import parse_import_document

__all__ = ["InMemoryMemoryManager"]

DEFAULT_USER = "default"
DEFAULT_BUCKET = "__default__"
_LABELS = {
    "workContext": "Work",
    "personalContext": "Personal",
    "topOfMind": "Current Focus",
    "recentMonths": "Recent",
    "earlierContext": "Earlier",
    "longTermBackground": "Background",
}
_Fact = dict[str, Any]
_Change = tuple[str, _Fact | None, _Fact | None]  # (bucket, before, after); None: absent


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    storage_path: str | None = None  # added by the factory; nothing is written there
    max_context_chars: int = Field(default=4000, gt=0)


@dataclass
class _UserState:
    document: dict[str, Any] = field(default_factory=lambda: dict(empty_document()))
    buckets: dict[str, dict[str, _Fact]] = field(default_factory=dict)
    log: list[dict[str, Any]] = field(default_factory=list)
    reverted: set[str] = field(default_factory=set)


def _tokens(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def _bucket(agent_name: str | None) -> str:
    return agent_name or DEFAULT_BUCKET


def _normalized(content: str) -> str:
    return " ".join(content.lower().split())


def _refuse_duplicate(facts: dict[str, _Fact], new: _Fact) -> None:
    key = _normalized(new["content"])
    for existing in facts.values():
        if existing["id"] != new["id"] and _normalized(existing["content"]) == key:
            raise DuplicateFactError(
                f"a fact with this content exists: {existing['id']}",
                existing_fact_id=existing["id"],
            )


def _fact(raw: Any, now: str, source: str) -> _Fact:
    """A validated fact from `raw`, keeping its extra keys; missing id and times are filled in."""
    if not isinstance(raw, dict):
        raise ValueError("fact: must be a dict")
    fact_id = raw.get("id")
    return {
        **raw,
        "id": fact_id if isinstance(fact_id, str) and fact_id else f"fact_{uuid.uuid4().hex}",
        "content": validate_content(raw.get("content")),
        "category": validate_category(raw.get("category", "context")),
        "confidence": validate_confidence(raw.get("confidence", 0.5)),
        "createdAt": str(raw.get("createdAt") or now),
        "updatedAt": str(raw.get("updatedAt") or now),
        "source": str(raw.get("source") or source),
    }


class InMemoryMemoryManager(MemoryManager):
    """Keeps memory in a dict behind one lock.

    `backend_config` keys: `max_context_chars` (default 4000), the budget of `get_context`;
    `storage_path` is accepted and ignored.
    """

    supports_search: ClassVar[bool] = True
    supports_expected_revision: ClassVar[bool] = True

    _settings: _Settings = PrivateAttr()
    _lock: threading.RLock = PrivateAttr(default_factory=threading.RLock)
    _users: dict[str, _UserState] = PrivateAttr(default_factory=dict)

    @classmethod
    def from_config(
        cls, backend_config: dict[str, Any], *, mode: MemoryMode = "middleware", **host_hooks: Any
    ) -> Self:
        return cls(backend_config=backend_config, mode=mode, callbacks=host_hooks.get("callbacks"))

    def model_post_init(self, context: Any, /) -> None:
        self._settings = parse_backend_config(_Settings, self.backend_config)

    # -- writes from conversations -------------------------------------------------------------

    def add(
        self,
        thread_id: str,
        messages: list[Any],
        *,
        agent_name: str | None = None,
        user_id: str | None = None,
        trace_id: str | None = None,
    ) -> None:
        """Accept the conversation and store nothing: extraction is out of scope here."""

    def cancel_pending(self, *, user_id: str | None, agent_name: str | None = None) -> int:
        """Return 0: `add()` is synchronous, so nothing is ever queued."""
        return 0

    def shutdown_flush(self, timeout: float) -> bool:
        """Return True: nothing is ever queued."""
        return True

    def warm(self) -> bool:
        """Return True: an in-process dict is ready at once."""
        return True

    # -- reads ---------------------------------------------------------------------------------

    def get_context(
        self,
        user_id: str | None,
        *,
        agent_name: str | None = None,
        thread_id: str | None = None,
        query: str | None = None,
    ) -> str:
        """Summaries and facts as plain text within `max_context_chars`, `<`, `>`, `&` escaped.

        Facts are ranked by overlap with `query`, then confidence; tool mode leaves them out.
        """
        with self._lock:
            doc = self._document(user_id, agent_name)
        sections = [
            (title, [f"- {_LABELS[k]}: {s}" for k in keys if (s := doc[part][k]["summary"])])
            for title, part, keys in (
                ("User Context:", "user", USER_SECTIONS),
                ("History:", "history", HISTORY_SECTIONS),
            )
        ]
        if self.mode != "tool":
            ranked = self._rank(doc["facts"], query or "")
            lines = [f"- [{f['category']} | {f['confidence']:.2f}] {f['content']}" for f in ranked]
            sections.append(("Facts:", lines))
        return self._render(sections)

    def search(
        self,
        query: str,
        top_k: int = 5,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        category: str | None = None,
    ) -> list[dict[str, Any]]:
        """Facts sharing words with `query` (case-insensitive), best first, with a `score`."""
        with self._lock:
            facts = self._document(user_id, agent_name)["facts"]
        hits = [f for f in self._rank(facts, query) if f["score"] > 0]
        return [f for f in hits if category in (None, f["category"])][: max(top_k, 0)]

    def get_memory(
        self, *, user_id: str | None = None, agent_name: str | None = None
    ) -> dict[str, Any]:
        with self._lock:
            return self._document(user_id, agent_name)

    def reload_memory(
        self, *, user_id: str | None = None, agent_name: str | None = None
    ) -> dict[str, Any]:
        """Same as `get_memory`: there is no cache to drop."""
        return self.get_memory(user_id=user_id, agent_name=agent_name)

    def export_memory(
        self, *, user_id: str | None = None, agent_name: str | None = None
    ) -> dict[str, Any]:
        return self.get_memory(user_id=user_id, agent_name=agent_name)

    def get_history(
        self, *, user_id: str | None = None, agent_name: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """Fact changes of one agent bucket, newest first."""
        bucket = _bucket(agent_name)
        with self._lock:
            log = self._state(user_id).log
            entries = [e for e in reversed(log) if e["bucket"] == bucket][: max(limit, 0)]
            return copy.deepcopy(entries)

    def change_ids(self, *, user_id: str | None = None) -> list[str]:
        """Every change id recorded for the user, oldest first, whichever bucket it touched (the
        `ChangeListing` extension)."""
        with self._lock:
            return [str(entry["change_id"]) for entry in self._state(user_id).log]

    # -- explicit writes -----------------------------------------------------------------------

    def create_fact(
        self,
        content: str,
        category: str = "context",
        confidence: float = 0.5,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> tuple[dict[str, Any], str | None]:
        given = {"content": content, "category": category, "confidence": confidence}
        fact = _fact(given, utc_now(), source="manual")
        return self._create(fact, user_id, agent_name, expected_revision), fact["id"]

    def create_fact_with_id(
        self,
        fact_id: str,
        content: str,
        category: str = "context",
        confidence: float = 0.5,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
    ) -> dict[str, Any]:
        """`create_fact` under the caller's id (the `FactsWithChosenIds` extension).

        Raises:
            DuplicateFactError: the id is taken in the bucket, or the content is stored.
        """
        checked_id(fact_id, "fact_id")
        given = {"id": fact_id, "content": content, "category": category, "confidence": confidence}
        return self._create(_fact(given, utc_now(), source="manual"), user_id, agent_name, None)

    def _create(
        self,
        fact: _Fact,
        user_id: str | None,
        agent_name: str | None,
        expected_revision: int | None,
    ) -> dict[str, Any]:
        bucket = _bucket(agent_name)
        with self._lock:
            self._check_revision(user_id, expected_revision)
            if fact["id"] in self._state(user_id).buckets.get(bucket, {}):
                raise DuplicateFactError(
                    f"a fact with this id exists: {fact['id']}", existing_fact_id=fact["id"]
                )
            self._commit(user_id, "create_fact", [(bucket, None, fact)])
            return self._document(user_id, agent_name)

    def agent_names(self, *, user_id: str | None = None) -> list[str]:
        """The agents whose buckets hold facts of the user (the `AgentListing` extension)."""
        with self._lock:
            buckets = self._state(user_id).buckets
            return sorted(
                name for name, facts in buckets.items() if facts and name != DEFAULT_BUCKET
            )

    def update_fact(
        self,
        fact_id: str,
        content: str | None = None,
        category: str | None = None,
        confidence: float | None = None,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        given = {"content": content, "category": category, "confidence": confidence}
        with self._lock:
            self._check_revision(user_id, expected_revision)
            before = self._find(user_id, agent_name, fact_id)
            changed = {key: value for key, value in given.items() if value is not None}
            after = _fact({**before, **changed, "updatedAt": utc_now()}, "", source="manual")
            self._commit(user_id, "update_fact", [(_bucket(agent_name), before, after)])
            return self._document(user_id, agent_name)

    def delete_fact(
        self,
        fact_id: str,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        with self._lock:
            self._check_revision(user_id, expected_revision)
            before = self._find(user_id, agent_name, fact_id)
            self._commit(user_id, "delete_fact", [(_bucket(agent_name), before, None)])
            return self._document(user_id, agent_name)

    def clear_memory(
        self,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        """Delete one bucket's facts, or, when `agent_name` is None, all facts and summaries."""
        with self._lock:
            self._check_revision(user_id, expected_revision)
            state = self._state(user_id)
            buckets = [agent_name] if agent_name else list(state.buckets)
            if agent_name is None:
                state.document = {**empty_document(), "revision": state.document["revision"]}
            changes: list[_Change] = [
                (bucket, fact, None)
                for bucket in buckets
                for fact in state.buckets.get(bucket, {}).values()
            ]
            self._commit(user_id, "clear_memory", changes)
            return self._document(user_id, agent_name)

    def import_memory(
        self,
        data: dict[str, Any],
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        """Replace the user's summaries and the bucket's facts with those of `data`.

        Raises:
            ValueError: `data` is not a document (`parse_import_document`), or one of its facts
                is invalid (`facts[3].content: ...`).
        """
        document = parse_import_document(data)
        now = utc_now()
        summaries = {
            part: {key: {"summary": text, "updatedAt": now} for key, text in texts.items()}
            for part, texts in document.summaries().items()
        }
        bucket = _bucket(agent_name)
        new: list[_Change] = []
        for number, raw in enumerate(document.facts):
            try:
                new.append((bucket, None, _fact(raw, now, "import")))
            except ValueError as exc:
                raise ValueError(f"facts[{number}].{exc}") from None
        with self._lock:
            self._check_revision(user_id, expected_revision)
            state = self._state(user_id)
            old: list[_Change] = [(bucket, f, None) for f in state.buckets.get(bucket, {}).values()]
            self._commit(user_id, "import_memory", old + new)
            state.document.update(summaries)
            return self._document(user_id, agent_name)

    def update_summary(
        self,
        part: str,
        section: str,
        text: str,
        *,
        user_id: str | None = None,
        agent_name: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, Any]:
        """Replace one summary section's text ("" empties it); a blank text counts as "".

        Raises:
            ValueError: unknown part or section, or text that breaks the content rules or looks
                like a credential.
            MemoryConflictError: the memory is not at `expected_revision`.
        """
        part, section, summary = validate_summary(part, section, text)
        with self._lock:
            state = self._state(user_id)
            self._check_revision(user_id, expected_revision)
            if state.document[part][section]["summary"] != summary:
                state.document[part][section] = {"summary": summary, "updatedAt": utc_now()}
                self._commit(user_id, f"update_summary {part}.{section}", [])
            return self._document(user_id, agent_name)

    def revert_change(
        self, change_id: str, *, user_id: str | None = None, expected_revision: int | None = None
    ) -> dict[str, Any]:
        """Put the fact back as it was before `change_id`; return the change the undo recorded.

        Raises:
            ValueError: unknown change id, or the change was already reverted.
            MemoryConflictError: the fact changed again since; revert the later change first.
        """
        with self._lock:
            self._check_revision(user_id, expected_revision)
            state = self._state(user_id)
            change = next((e for e in state.log if e["change_id"] == change_id), None)
            if change is None or change_id in state.reverted:
                raise ValueError(f"revert_change: {change_id!r} is unknown or already reverted")
            fact = change["after"] or change["before"]
            if state.buckets.get(change["bucket"], {}).get(fact["id"]) != change["after"]:
                raise MemoryConflictError(f"fact {fact['id']} changed after {change_id}")
            undo: _Change = (change["bucket"], change["after"], change["before"])
            self._commit(user_id, f"revert_change {change_id}", [undo])
            state.reverted.add(change_id)
            return copy.deepcopy(state.log[-1])

    # -- internals (callers hold the lock) ------------------------------------------------------

    def _check_revision(self, user_id: str | None, expected_revision: int | None) -> None:
        check_revision(self._state(user_id).document["revision"], expected_revision)

    def _state(self, user_id: str | None) -> _UserState:
        return self._users.setdefault(user_id or DEFAULT_USER, _UserState())

    def _document(self, user_id: str | None, agent_name: str | None) -> dict[str, Any]:
        state = self._state(user_id)
        facts = state.buckets.get(_bucket(agent_name), {}).values()
        return copy.deepcopy({**state.document, "facts": list(facts)})

    def _find(self, user_id: str | None, agent_name: str | None, fact_id: str) -> _Fact:
        fact = self._state(user_id).buckets.get(_bucket(agent_name), {}).get(fact_id)
        if fact is None:
            raise FactNotFoundError(fact_id)
        return fact

    def _commit(self, user_id: str | None, reason: str, changes: list[_Change]) -> None:
        """Apply fact changes all or nothing, log each, and count one revision of the user.

        Raises:
            DuplicateFactError: a new or changed fact has the content of another in its bucket.
        """
        state = self._state(user_id)
        buckets = {bucket: dict(state.buckets.get(bucket, {})) for bucket, _, _ in changes}
        now = utc_now()
        for bucket, before, after in changes:
            facts = buckets[bucket]
            if before is not None:
                del facts[before["id"]]
            if after is not None:
                _refuse_duplicate(facts, after)
                facts[after["id"]] = after
        state.buckets.update(buckets)
        state.log.extend(
            {
                "change_id": f"change_{uuid.uuid4().hex}",
                "at": now,
                "actor": "api",
                "reason": reason,
                "bucket": bucket,
                "before": copy.deepcopy(before),
                "after": copy.deepcopy(after),
                "revision": state.document["revision"] + 1,  # the memory's after this commit
            }
            for bucket, before, after in changes
        )
        state.document["revision"] += 1
        state.document["lastUpdated"] = now

    @staticmethod
    def _rank(facts: list[_Fact], query: str) -> list[_Fact]:
        wanted = _tokens(query)
        scored = [
            {**f, "score": len(wanted & _tokens(f["content"])) / len(wanted) if wanted else 0.0}
            for f in facts
        ]
        return sorted(scored, key=lambda f: (-f["score"], -f["confidence"]))

    def _render(self, sections: list[tuple[str, list[str]]]) -> str:
        """Join the non-empty sections; the first line that does not fit ends the text."""
        text = ""
        for title, lines in sections:
            head = f"{text}\n\n{title}" if text else title
            for line in lines:
                candidate = f"{head}\n{html.escape(line, quote=False)}"
                if len(candidate) > self._settings.max_context_chars:
                    return text
                text = head = candidate
        return text
